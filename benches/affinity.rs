//! How sticky the affinity chains of `route::chain` are, and what a chain costs.
//!
//! Exists to show, with numbers, that a ±10 % change of one backend's weight moves only the
//! minimum share of affinity keys (projects) to another first choice: the total variation
//! distance between the old and new first-choice distributions. Also prints the measured and
//! theoretical share whose whole chain changes, and times `chain()` for 2, 8 and 64 backends.
//! It must stay a plain program (harness = false): no network, no files, a few seconds of CPU.
//!
//! `cargo bench --bench affinity`

use std::hint::black_box;
use std::time::Instant;

use spillway::route::chain::chain;

const KEYS: usize = 100_000;

fn normalised(w: &[f64]) -> Vec<f64> {
    let total: f64 = w.iter().sum();
    w.iter().map(|w| w / total).collect()
}

/// Least share of keys that must change first choice: total variation distance.
fn tv_distance(old: &[f64], new: &[f64]) -> f64 {
    let (p, q) = (normalised(old), normalised(new));
    p.iter().zip(&q).map(|(p, q)| (p - q).abs()).sum::<f64>() / 2.0
}

/// Probability that the whole chain changes when only backend `j`'s weight goes from `old[j]`
/// to `w_new`. Scores are independent exponentials `X_i` with rates `w_i`; `X_j` becomes
/// `c·X_j` with `c = old[j] / w_new`, and the order changes iff some other `X_i` lies between.
/// `1 − ∫ w_j e^{−w_j x} Π_{i≠j} (1 − |e^{−w_i x} − e^{−w_i c x}|) dx`, by Simpson's rule.
fn chain_change_theory(old: &[f64], j: usize, w_new: f64) -> f64 {
    let wj = old[j];
    let c = wj / w_new;
    let f = |x: f64| {
        let mut keep = wj * (-wj * x).exp();
        for (i, &wi) in old.iter().enumerate() {
            if i != j {
                keep *= 1.0 - ((-wi * x).exp() - (-wi * c * x).exp()).abs();
            }
        }
        keep
    };
    let (upper, steps) = (60.0 / wj, 200_000);
    let h = upper / steps as f64;
    let mut sum = f(0.0) + f(upper);
    for k in 1..steps {
        sum += f(k as f64 * h) * if k % 2 == 1 { 4.0 } else { 2.0 };
    }
    1.0 - sum * h / 3.0
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("backend-{i}")).collect()
}

fn stickiness(keys: &[String]) {
    println!("Keys whose chain changes when one weight changes ({KEYS} keys, window 0)\n");
    println!(
        "| weights | changed | first choice: measured | first choice: minimum (TV) | whole chain: measured | whole chain: theory |"
    );
    println!("|---|---|---|---|---|---|");
    let cases: [(&[f64], &[usize]); 3] =
        [(&[0.5, 0.3, 0.2], &[0, 1, 2]), (&[0.7, 0.3], &[0, 1]), (&[0.25, 0.25, 0.25, 0.25], &[0])];
    for (weights, changed) in cases {
        let names = names(weights.len());
        let old: Vec<(&str, f64)> = names.iter().map(String::as_str).zip(weights.iter().copied()).collect();
        let before: Vec<Vec<usize>> = keys.iter().map(|k| chain(k, 0, &old)).collect();
        for &j in changed {
            for factor in [1.1, 0.9] {
                let mut new_weights = weights.to_vec();
                new_weights[j] *= factor;
                let new: Vec<(&str, f64)> =
                    names.iter().map(String::as_str).zip(new_weights.iter().copied()).collect();
                let (mut first, mut whole) = (0usize, 0usize);
                for (k, old_chain) in keys.iter().zip(&before) {
                    let c = chain(k, 0, &new);
                    first += usize::from(c[0] != old_chain[0]);
                    whole += usize::from(&c != old_chain);
                }
                println!(
                    "| {weights:?} | w{j} {:+.0} % | {:.4} | {:.4} | {:.4} | {:.4} |",
                    (factor - 1.0) * 100.0,
                    first as f64 / KEYS as f64,
                    tv_distance(weights, &new_weights),
                    whole as f64 / KEYS as f64,
                    chain_change_theory(weights, j, new_weights[j]),
                );
            }
        }
    }
}

fn timing(keys: &[String]) {
    println!("\nchain() per call (release, {} distinct keys, cycled)\n", keys.len().min(10_000));
    println!("| backends | ns per call |");
    println!("|---|---|");
    for n in [2usize, 8, 64] {
        let names = names(n);
        let backends: Vec<(&str, f64)> =
            names.iter().enumerate().map(|(i, s)| (s.as_str(), 1.0 / (i + 1) as f64)).collect();
        let calls = 4_000_000 / n;
        let keys = &keys[..10_000];
        for k in keys.iter().take(1000) {
            black_box(chain(k, 0, &backends));
        }
        let start = Instant::now();
        for i in 0..calls {
            black_box(chain(black_box(&keys[i % keys.len()]), 0, black_box(&backends)));
        }
        let ns = start.elapsed().as_nanos() as f64 / calls as f64;
        println!("| {n} | {ns:.0} |");
    }
}

fn main() {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("project-{i}")).collect();
    stickiness(&keys);
    timing(&keys);
}
