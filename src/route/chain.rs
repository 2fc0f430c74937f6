//! Sticky weighted fallback chains (third seed document): a chain is a weighted permutation
//! of the backends (first drawn with probability ∝ weight, the next from the rest, …), with
//! zero-weight backends appended in configured order, and one affinity key (a project) keeps
//! its chain for a time window so its provider-side prompt cache stays warm.
//!
//! The draw is weighted rendezvous hashing: backend `i` gets a uniform `u_i` in (0, 1) from a
//! hash of (key, window, backend name) and the score `−ln(u_i) / w_i`; the chain is the
//! backends by ascending score. Each score is an independent exponential with rate `w_i`, so
//! the order is exactly sampling without replacement in proportion to weight (the exponential
//! race). Because `u_i` depends on nothing but the key, the window and the backend's own name:
//! - every router replica computes the same chain with no shared store;
//! - when one weight changes only that backend's score moves, so only the keys whose order
//!   it crosses change, and the share of keys whose first choice changes is exactly the total
//!   variation distance between the old and new first-choice distributions, the least any
//!   scheme can move; the relative order of the other backends never changes;
//! - adding or removing a backend moves only the keys it wins or held.
//!
//! The hash is specified so that other implementations (and future Rust versions) agree:
//! `seed = XXH3-64(le64(len(key)) ‖ key ‖ le64(window), seed = 0x5350_494c_4c57_4159)`, then
//! `h = XXH3-64(name, seed)`, `u = ((h >> 11) + 0.5) / 2^53` (xxhash-rust's `xxh3`). std's
//! `DefaultHasher` is not used: its algorithm may change between Rust releases.
//!
//! It must stay pure (no clock reads: the caller passes the window index; no randomness, no
//! state) and must not filter backends: policy, breakers and quotas are applied by planning,
//! before and after.

use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3};

/// Fixed seed of the (key, window) hash: "SPILLWAY" in ASCII. Changing it re-draws every
/// chain, so it is part of the format.
const KEY_SEED: u64 = 0x5350_494c_4c57_4159;

/// The index of the time window containing `unix_secs`; `window_secs = 0` counts as 1.
/// Every key re-draws at the same instants; see [`key_window`] for staggered boundaries.
pub(crate) fn window_index(unix_secs: u64, window_secs: u64) -> u64 {
    unix_secs / window_secs.max(1)
}

/// Like [`window_index`], but each key's windows are shifted by a phase derived from the key,
/// so that not every project re-draws (and goes cache-cold) at the same instant. Still the
/// same on every replica.
pub fn key_window(key: &str, unix_secs: u64, window_secs: u64) -> u64 {
    let window_secs = window_secs.max(1);
    let phase = xxh3_64_with_seed(key.as_bytes(), KEY_SEED) % window_secs;
    unix_secs.saturating_add(phase) / window_secs
}

/// The per-(key, window) seed of the backend hashes.
fn key_seed(key: &str, window: u64) -> u64 {
    let mut h = Xxh3::with_seed(KEY_SEED);
    h.update(&(key.len() as u64).to_le_bytes());
    h.update(key.as_bytes());
    h.update(&window.to_le_bytes());
    h.digest()
}

fn unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// The uniform in (0, 1) that `backend` draws for `key` in `window`.
pub fn uniform(key: &str, window: u64, backend: &str) -> f64 {
    unit(xxh3_64_with_seed(backend.as_bytes(), key_seed(key, window)))
}

/// The fallback chain of `key` in `window`: indices into `backends` (name, weight), every index
/// once. Positive finite weights are drawn in proportion to weight (they need not sum to 1);
/// zero, negative, NaN and infinite weights follow in the given order. Exact score ties (only
/// possible for duplicate names) keep the given order.
pub fn chain(key: &str, window: u64, backends: &[(&str, f64)]) -> Vec<usize> {
    let seed = key_seed(key, window);
    let mut drawn: Vec<(f64, usize)> = Vec::with_capacity(backends.len());
    let mut rest = Vec::new();
    for (i, &(name, w)) in backends.iter().enumerate() {
        if w > 0.0 && w.is_finite() {
            let u = unit(xxh3_64_with_seed(name.as_bytes(), seed));
            drawn.push((-u.ln() / w, i));
        } else {
            rest.push(i);
        }
    }
    drawn.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    drawn.into_iter().map(|(_, i)| i).chain(rest).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: usize = 100_000;

    fn key(i: usize) -> String {
        format!("project-{i}")
    }

    fn backends(weights: &[f64]) -> Vec<(&'static str, f64)> {
        const NAMES: [&str; 6] = ["anthropic", "openai", "gemini", "bedrock", "vertex", "azure"];
        NAMES.iter().copied().zip(weights.iter().copied()).collect()
    }

    /// Share of keys whose chain starts (position 0) or continues (position 1) with each backend.
    fn shares(window: u64, weights: &[f64], position: usize) -> Vec<f64> {
        let b = backends(weights);
        let mut count = vec![0usize; weights.len()];
        for i in 0..KEYS {
            count[chain(&key(i), window, &b)[position]] += 1;
        }
        count.into_iter().map(|c| c as f64 / KEYS as f64).collect()
    }

    #[track_caller]
    fn assert_shares(got: &[f64], want: &[f64], tolerance: f64) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < tolerance, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn the_hash_is_pinned() {
        // XXH3-64 of the empty input is the reference implementation's test vector.
        assert_eq!(xxh3_64_with_seed(b"", 0), 0x2d06_8005_38d3_94c2);
        // The specified construction, written out; these numbers must never change, or
        // replicas running different builds would disagree.
        let mut bytes = 9u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"project-1");
        bytes.extend_from_slice(&7u64.to_le_bytes());
        assert_eq!(xxh3_64_with_seed(&bytes, KEY_SEED), 0x7b10_1ebd_183e_bcbb);
        assert_eq!(key_seed("project-1", 7), 0x7b10_1ebd_183e_bcbb);
        assert_eq!(uniform("project-1", 7, "openai"), 0.5195736507010329);
        let five = backends(&[0.2; 5]);
        assert_eq!(chain("project-1", 7, &five), [4, 0, 1, 2, 3]);
        assert_eq!(chain("project-1", 8, &five), [4, 1, 0, 3, 2]);
        assert_eq!(chain("acme/webshop", 7, &five), [2, 4, 3, 1, 0]);
        assert_eq!(unit(0), 0.5 / (1u64 << 53) as f64);
        assert_eq!(unit(u64::MAX), 1.0 - 0.5 / (1u64 << 53) as f64);
    }

    #[test]
    fn same_inputs_same_chain_on_every_replica() {
        let b = backends(&[0.5, 0.3, 0.2]);
        for i in 0..1000 {
            let k = key(i);
            let first = chain(&k, 42, &b);
            // Another "replica": a fresh, equal input built separately.
            let names: Vec<String> = b.iter().map(|(n, _)| n.to_string()).collect();
            let other: Vec<(&str, f64)> = names.iter().map(|n| n.as_str()).zip([0.5, 0.3, 0.2]).collect();
            assert_eq!(first, chain(&k, 42, &other));
            let mut sorted = first.clone();
            sorted.sort();
            assert_eq!(sorted, [0, 1, 2]);
        }
    }

    #[test]
    fn first_and_second_choices_follow_sampling_without_replacement() {
        let w = [0.5, 0.3, 0.2];
        // ±0.006 is about four standard deviations at 100 000 keys.
        assert_shares(&shares(1, &w, 0), &w, 0.006);
        // Second choice: P(j) = Σ_{i≠j} p_i · p_j / (1 − p_i).
        //   j=0: 0.3·0.5/0.7 + 0.2·0.5/0.8 = 0.2142857 + 0.125 = 0.3392857
        //   j=1: 0.5·0.3/0.5 + 0.2·0.3/0.8 = 0.3 + 0.075       = 0.375
        //   j=2: 0.5·0.2/0.5 + 0.3·0.2/0.7 = 0.2 + 0.0857143   = 0.2857143
        assert_shares(&shares(1, &w, 1), &[0.3392857, 0.375, 0.2857143], 0.006);
        // Weights need not be normalised: ×4 is the same distribution, and the same chains.
        let b = backends(&w);
        let scaled = backends(&[2.0, 1.2, 0.8]);
        for i in 0..1000 {
            assert_eq!(chain(&key(i), 1, &b), chain(&key(i), 1, &scaled));
        }
        // Chi-square of the first choice against the weights, 2 degrees of freedom: the 99.9 %
        // critical value is 13.8.
        let chi2: f64 =
            shares(9, &w, 0).iter().zip(w).map(|(s, p)| (s - p) * (s - p) * KEYS as f64 / p).sum();
        assert!(chi2 < 13.8, "chi-square {chi2}");
    }

    #[test]
    fn a_ten_percent_weight_change_moves_the_minimum_share_of_keys() {
        let old = backends(&[0.5, 0.3, 0.2]);
        for (factor, theory) in [
            // p1 goes from 0.3 to 0.33/1.03 = 0.3203883: TV distance 0.0203883.
            (1.1, 0.33 / 1.03 - 0.3),
            // p1 goes from 0.3 to 0.27/0.97 = 0.2783505: TV distance 0.0216495.
            (0.9, 0.3 - 0.27 / 0.97),
        ] {
            let new = backends(&[0.5, 0.3 * factor, 0.2]);
            let mut moved = 0;
            for i in 0..KEYS {
                let (a, b) = (chain(&key(i), 3, &old), chain(&key(i), 3, &new));
                if a[0] != b[0] {
                    moved += 1;
                    // Keys only move to the backend that grew, or away from the one that shrank.
                    if factor > 1.0 {
                        assert_eq!(b[0], 1);
                    } else {
                        assert_eq!(a[0], 1);
                    }
                }
                // Nobody else is reshuffled: without backend 1 the two chains are the same.
                let without = |c: &[usize]| c.iter().copied().filter(|&x| x != 1).collect::<Vec<_>>();
                assert_eq!(without(&a), without(&b));
            }
            let share = moved as f64 / KEYS as f64;
            // ± 0.002 is about four standard deviations.
            assert!((share - theory).abs() < 0.002, "×{factor}: moved {share}, theory {theory}");
        }
    }

    #[test]
    fn a_new_window_redraws() {
        let b = backends(&[0.5, 0.3, 0.2]);
        let mut first_differs = 0;
        let mut chain_differs = 0;
        for i in 0..KEYS {
            let (a, c) = (chain(&key(i), 100, &b), chain(&key(i), 101, &b));
            first_differs += usize::from(a[0] != c[0]);
            chain_differs += usize::from(a != c);
        }
        // Independent draws disagree on the first choice with probability 1 − Σ p² = 0.62.
        let share = first_differs as f64 / KEYS as f64;
        assert!((share - 0.62).abs() < 0.006, "{share}");
        // …and on the whole chain with probability 1 − Σ_chains P(chain)², computed by hand:
        // chain probabilities 0.5·0.6, 0.5·0.4, 0.3·(5/7), 0.3·(2/7), 0.2·(5/8), 0.2·(3/8).
        let p: [f64; 6] = [0.3, 0.2, 0.3 * 5.0 / 7.0, 0.3 * 2.0 / 7.0, 0.125, 0.075];
        let theory = 1.0 - p.iter().map(|p| p * p).sum::<f64>();
        let share = chain_differs as f64 / KEYS as f64;
        assert!((share - theory).abs() < 0.006, "{share} vs {theory}");
    }

    #[test]
    fn zero_weights_come_last_in_configured_order() {
        let b = [("a", 0.0), ("b", 0.5), ("c", f64::NAN), ("d", 0.5), ("e", -1.0), ("f", f64::INFINITY)];
        for i in 0..1000 {
            let c = chain(&key(i), 0, &b);
            assert_eq!(c[2..], [0, 2, 4, 5]);
            assert!(c[..2] == [1, 3] || c[..2] == [3, 1], "{c:?}");
        }
        assert_eq!(chain("k", 0, &[("a", 0.0), ("b", 0.0)]), [0, 1]);
        assert!(chain("k", 0, &[]).is_empty());
        assert_eq!(chain("k", 0, &[("only", 0.2)]), [0]);
    }

    #[test]
    fn windows() {
        assert_eq!(window_index(0, 300), 0);
        assert_eq!(window_index(299, 300), 0);
        assert_eq!(window_index(300, 300), 1);
        assert_eq!(window_index(1_700_000_000, 300), 5_666_666);
        assert_eq!(window_index(17, 0), 17);
        // Staggered windows still last window_secs for each key, with a per-key phase.
        let phase = |k: &str| (0..300).find(|&t| key_window(k, t, 300) != key_window(k, 0, 300));
        let mut phases = std::collections::BTreeSet::new();
        for i in 0..50 {
            let k = key(i);
            let start = key_window(&k, 1_000_000, 300);
            assert_eq!(key_window(&k, 1_000_300, 300), start + 1);
            phases.insert(phase(&k));
        }
        assert!(phases.len() > 40, "phases collide: {phases:?}");
    }
}
