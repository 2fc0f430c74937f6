//! The virtual clock: a queue of future events ordered by time, ties broken by the order they
//! were scheduled, and the conversion from virtual microseconds to the `Instant`s that
//! planning, breakers and telemetry take as `now`.
//!
//! It exists so that an hour of traffic runs in seconds and two runs with the same seed are
//! identical: nothing here reads a clock or sleeps. The only real `Instant` is the `base` taken
//! once per run; every other instant is `base + offset`, so results never depend on it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tokio::time::Instant;

/// Microseconds since the start of a run.
pub type Micros = u64;

pub fn from_secs(s: f64) -> Micros {
    (s.max(0.0) * 1e6).round() as Micros
}

pub fn from_ms(ms: f64) -> Micros {
    (ms.max(0.0) * 1e3).round() as Micros
}

pub fn secs(t: Micros) -> f64 {
    t as f64 / 1e6
}

/// Converts virtual time into the instants the router's code takes.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Instant,
}

/// The wall clock the simulated router believes in at the start (2026-01-01T00:00:00Z): it
/// drives affinity windows and quota minutes, and is fixed so that runs repeat exactly.
pub const EPOCH_UNIX_SECS: u64 = 1_767_225_600;

impl Clock {
    pub fn new() -> Clock {
        Clock { base: Instant::now() }
    }

    pub fn instant(&self, t: Micros) -> Instant {
        self.base + Duration::from_micros(t)
    }

    /// Unix seconds at virtual time `t`.
    pub fn unix_secs(&self, t: Micros) -> u64 {
        EPOCH_UNIX_SECS + t / 1_000_000
    }

    /// Unix milliseconds at virtual time `t`.
    pub fn unix_ms(&self, t: Micros) -> u64 {
        EPOCH_UNIX_SECS * 1000 + t / 1000
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Future events, earliest first; events at the same time in the order they were pushed.
#[derive(Debug)]
pub struct Queue<E> {
    heap: BinaryHeap<Reverse<(Micros, u64, Slot<E>)>>,
    seq: u64,
}

/// Wraps an event so the heap orders by (time, sequence) only.
#[derive(Debug)]
struct Slot<E>(E);

impl<E> PartialEq for Slot<E> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<E> Eq for Slot<E> {}
impl<E> PartialOrd for Slot<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Slot<E> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<E> Queue<E> {
    pub fn new() -> Self {
        Queue { heap: BinaryHeap::new(), seq: 0 }
    }

    pub fn push(&mut self, at: Micros, event: E) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, Slot(event))));
    }

    pub fn pop(&mut self) -> Option<(Micros, E)> {
        self.heap.pop().map(|Reverse((at, _, Slot(e)))| (at, e))
    }
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_push_order() {
        let mut q = Queue::new();
        q.push(5, "b");
        q.push(1, "a");
        q.push(5, "c");
        q.push(3, "x");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(1, "a"), (3, "x"), (5, "b"), (5, "c")]);
    }
}
