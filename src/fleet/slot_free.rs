//! When does a full node free a slot? Pure arithmetic over what the router knows exactly of its
//! own requests there (`fleet::progress`: prompt to prefill, tokens streamed, output cap, the
//! node's usual answer length) and the node's measured rates (prefill tokens per second, one
//! decode step). Planning uses it to decide whether a request waits for a local slot or spills.
//!
//! One request's remaining time is what is left of its prefill (its uncached prompt at the
//! prefill rate plus one step, less the time it has run, while no token has come) plus its
//! remaining output at one step a token. Its remaining output is the node's usual answer length
//! less what it has streamed, but at least a quarter of the usual length once it has run past
//! it (a long answer tends to go on), and never more than its cap allows. Before the node has
//! finished any answer, the cap itself is the length; with no cap either, one mean service time.
//! Requests at the node that are not the router's (other replicas, direct clients) are taken to
//! free at half a mean service time each: their progress is unknown.
//!
//! Worked example: a llama.cpp node with 2 slots, 20 ms a step, answers of 200 tokens usually.
//! Its two requests have streamed 150 and 20 tokens: they free in 50 × 20 ms = 1 s and
//! 180 × 20 ms = 3.6 s. A request with nobody ahead of it starts in 1 s; with one waiter ahead
//! of it in the pool, in 3.6 s; with two, when the first of them, which took the slot at 1 s
//! and holds it as a new request usually does (4 s with its prefill and answer), frees it: 5 s.

use tokio::time::Instant;

use super::headroom::{self, service_s, NodeSignals};
use super::load::LoadView;
use super::progress::Running;

/// The fallback when a signal has not been seen yet (as `fleet::headroom`).
const DEFAULT_STEP_S: f64 = 0.02;

/// A node's measured speeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Prompt tokens prefilled per second.
    pub prefill_tps: f64,
    /// One decode step (one output token of each running request), seconds.
    pub step_s: f64,
    /// Mean time a request holds a slot, seconds.
    pub service_s: f64,
}

impl Rates {
    pub fn of(sig: &NodeSignals, load: LoadView) -> Rates {
        Rates {
            prefill_tps: headroom::prefill_tps(sig, load),
            step_s: sig.itl_s.filter(|s| *s > 0.0).unwrap_or(DEFAULT_STEP_S),
            service_s: service_s(sig),
        }
    }
}

/// Seconds from `now` until request `r` ends, `typical` being the node's usual answer length.
pub fn remaining_s(r: &Running, typical: Option<f64>, rates: &Rates, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(r.started).as_secs_f64();
    let prefill = if r.first_token {
        0.0
    } else {
        (f64::from(r.prefill_tokens) / rates.prefill_tps + rates.step_s - elapsed).max(0.0)
    };
    let streamed = f64::from(r.streamed);
    let cap = (r.max_tokens > 0).then(|| (f64::from(r.max_tokens) - streamed).max(1.0));
    let left = match (typical, cap) {
        (Some(t), cap) => {
            let usual = (t - streamed).max(t / 4.0).max(1.0);
            cap.map_or(usual, |c| usual.min(c))
        }
        (None, Some(cap)) => cap,
        (None, None) => return prefill + rates.service_s,
    };
    prefill + left * rates.step_s
}

/// Seconds from `now` until each busy slot of the node frees, soonest first: the router's
/// `running` requests, and `others` requests not its own.
pub fn frees_in(
    running: &[Running],
    others: f64,
    typical: Option<f64>,
    rates: &Rates,
    now: Instant,
) -> Vec<f64> {
    let mut frees: Vec<f64> = running.iter().map(|r| remaining_s(r, typical, rates, now)).collect();
    let others = others.max(0.0).round() as usize;
    frees.extend(std::iter::repeat_n(rates.service_s / 2.0, others));
    frees.sort_by(f64::total_cmp);
    frees
}

/// Of a node's `frees`, those that let a new request in: when `need` of them must free before
/// one more fits (its requests beyond its usable slots, plus one), the `need`-th and later.
/// Empty when more must free than the node has busy slots (too far off to wait for).
pub fn usable(frees: &[f64], need: usize) -> &[f64] {
    frees.get(need.max(1) - 1..).unwrap_or(&[])
}

/// When a request could start on a node whose first usable free is `node_first`, with `ahead`
/// requests waiting before it for the pool whose usable frees, all nodes together, are `pool`
/// (sorted): not before the node frees a slot, nor before one has freed for each request
/// ahead of it. Each request ahead takes the soonest free slot and holds it `hold_s` (what a
/// new request usually holds one), so a queue longer than the busy slots still has a start.
/// `None` when nothing frees at all.
pub fn start_s(pool: &[f64], node_first: f64, ahead: usize, hold_s: f64) -> Option<f64> {
    let mut frees = pool.to_vec();
    for _ in 0..ahead.min(frees.len() * MAX_ROUNDS) {
        let again = frees.remove(0) + hold_s.max(0.0);
        frees.insert(frees.partition_point(|&f| f <= again), again);
    }
    if ahead > pool.len() * MAX_ROUNDS {
        return None;
    }
    frees.first().map(|p| p.max(node_first))
}

/// Most times each busy slot is predicted to turn over for the requests ahead: past that the
/// prediction is too far off to wait for.
const MAX_ROUNDS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rates() -> Rates {
        Rates { prefill_tps: 1000.0, step_s: 0.02, service_s: 4.0 }
    }

    fn running(now: Instant, streamed: u32, max_tokens: u32) -> Running {
        Running { started: now, prefill_tokens: 500, max_tokens, streamed, first_token: streamed > 0 }
    }

    #[tokio::test(start_paused = true)]
    async fn the_worked_example() {
        let now = Instant::now();
        let two = [running(now, 150, 1000), running(now, 20, 1000)];
        let frees = frees_in(&two, 0.0, Some(200.0), &rates(), now);
        assert!((frees[0] - 1.0).abs() < 1e-9 && (frees[1] - 3.6).abs() < 1e-9, "{frees:?}");
        assert_eq!(start_s(&frees, frees[0], 0, 5.0), Some(frees[0]));
        assert_eq!(start_s(&frees, frees[0], 1, 5.0), Some(frees[1]));
        // Two ahead on two slots: the first of them frees its slot again 5 s after taking it.
        assert_eq!(start_s(&frees, frees[0], 2, 5.0), Some(6.0));
        assert_eq!(start_s(&frees, frees[0], 3, 5.0), Some(8.6));
        assert_eq!(start_s(&frees, frees[0], 17, 5.0), None, "eight turns of every slot: too far off");
        assert_eq!(start_s(&[], 0.0, 0, 5.0), None);
    }

    #[tokio::test(start_paused = true)]
    async fn remaining_time_by_what_is_known() {
        let now = Instant::now();
        let r = rates();
        // Not yet at its first token, 200 ms in: 0.5 s prefill + a step - 0.2 s, then its cap.
        let fresh = Running { first_token: false, streamed: 0, ..running(now, 0, 10) };
        let later = now + Duration::from_millis(200);
        assert!((remaining_s(&fresh, None, &r, later) - (0.32 + 10.0 * 0.02)).abs() < 1e-9);
        // The usual length shortens a large cap; the cap bounds a long usual length.
        assert!((remaining_s(&running(now, 10, 32_000), Some(110.0), &r, now) - 2.0).abs() < 1e-9);
        assert!((remaining_s(&running(now, 10, 60), Some(500.0), &r, now) - 1.0).abs() < 1e-9);
        // Past its usual length: a quarter of it more.
        assert!((remaining_s(&running(now, 300, 32_000), Some(200.0), &r, now) - 1.0).abs() < 1e-9);
        // Nothing known: one mean service time.
        assert!((remaining_s(&running(now, 3, 0), None, &r, now) - 4.0).abs() < 1e-9);
        // Others free at half a service time each, sorted in with the router's own.
        // (A request before its first token: 0.52 s of prefill, then its cap of 500.)
        let frees = frees_in(&[running(now, 0, 500)], 2.0, None, &r, now);
        assert_eq!(frees[..2], [2.0, 2.0]);
        assert!((frees[2] - 10.52).abs() < 1e-9, "{frees:?}");
    }

    #[test]
    fn usable_frees_skip_those_that_only_make_room() {
        let frees = [1.0, 2.0, 3.0];
        assert_eq!(usable(&frees, 1), &[1.0, 2.0, 3.0]);
        // A node one over its usable slots (a reserve, or an engine queue) needs two to free.
        assert_eq!(usable(&frees, 2), &[2.0, 3.0]);
        assert!(usable(&frees, 4).is_empty());
        // A later node's first usable free bounds the start even with nobody ahead.
        assert_eq!(start_s(&[1.0, 2.0], 2.0, 0, 4.0), Some(2.0));
    }

    #[test]
    fn rates_fall_back_when_unmeasured() {
        let r = Rates::of(&NodeSignals::default(), LoadView::default());
        assert_eq!((r.prefill_tps, r.step_s, r.service_s), (10_000.0, 0.02, 2.0));
        let sig = NodeSignals { prefill_tps: Some(800.0), itl_s: Some(0.01), ..NodeSignals::default() };
        assert_eq!(Rates::of(&sig, LoadView::default()).prefill_tps, 800.0);
    }
}
