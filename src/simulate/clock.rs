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
pub(crate) type Micros = u64;

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
pub(crate) const EPOCH_UNIX_SECS: u64 = 1_767_225_600;

impl Clock {
    pub fn new() -> Clock {
        Clock { base: Instant::now() }
    }

    pub fn instant(&self, t: Micros) -> Instant {
        self.base + Duration::from_micros(t)
    }

    /// Unix seconds at virtual time `t`.
    pub(crate) fn unix_secs(&self, t: Micros) -> u64 {
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
///
/// A calendar queue: events due within the current millisecond wait in a small heap ordered by
/// (time, push order); later ones within `RING` milliseconds are appended to their
/// millisecond's bucket and heaped when the clock reaches it; the rest wait in an overflow
/// heap. Pops come out exactly as from one heap, at a few comparisons each however many
/// requests are in flight.
#[derive(Debug)]
pub struct Queue<E> {
    current: BinaryHeap<Reverse<Entry<E>>>,
    ring: Vec<Vec<Reverse<Entry<E>>>>,
    in_ring: usize,
    overflow: BinaryHeap<Reverse<Entry<E>>>,
    /// The millisecond whose events are in `current`.
    bucket: u64,
    seq: u64,
}

type Entry<E> = (Micros, u64, Slot<E>);

/// Buckets are 2^10 µs (about a millisecond); the ring spans 2^14 of them (about 16 s).
const SHIFT: u32 = 10;
const RING: u64 = 1 << 14;

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
        Queue {
            current: BinaryHeap::new(),
            ring: (0..RING).map(|_| Vec::new()).collect(),
            in_ring: 0,
            overflow: BinaryHeap::new(),
            bucket: 0,
            seq: 0,
        }
    }

    pub fn push(&mut self, at: Micros, event: E) {
        self.seq += 1;
        let entry = Reverse((at, self.seq, Slot(event)));
        let b = at >> SHIFT;
        if b <= self.bucket {
            self.current.push(entry);
        } else if b < self.bucket + RING {
            self.ring[(b % RING) as usize].push(entry);
            self.in_ring += 1;
        } else {
            self.overflow.push(entry);
        }
    }

    /// Move the clock to the next bucket that holds anything; false when nothing is left.
    fn advance(&mut self) -> bool {
        let next_overflow = self.overflow.peek().map(|Reverse((at, _, _))| at >> SHIFT);
        self.bucket = match (self.in_ring, next_overflow) {
            (0, None) => return false,
            (0, Some(b)) => b.max(self.bucket + 1),
            _ => self.bucket + 1,
        };
        let due = std::mem::take(&mut self.ring[(self.bucket % RING) as usize]);
        self.in_ring -= due.len();
        self.current.extend(due);
        while self.overflow.peek().is_some_and(|Reverse((at, _, _))| at >> SHIFT <= self.bucket) {
            let e = self.overflow.pop().expect("peeked");
            self.current.push(e);
        }
        true
    }

    /// When the earliest event is due.
    pub(crate) fn peek_at(&mut self) -> Option<Micros> {
        loop {
            if let Some(Reverse((at, _, _))) = self.current.peek() {
                return Some(*at);
            }
            if !self.advance() {
                return None;
            }
        }
    }

    pub fn pop(&mut self) -> Option<(Micros, E)> {
        self.peek_at()?;
        self.current.pop().map(|Reverse((at, _, Slot(e)))| (at, e))
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
        assert_eq!(q.peek_at(), Some(1));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(1, "a"), (3, "x"), (5, "b"), (5, "c")]);
    }

    #[test]
    fn the_calendar_pops_as_one_heap_would() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (mut q, mut heap) = (Queue::new(), BinaryHeap::new());
        let (mut now, mut seq, mut popped) = (0u64, 0u64, 0);
        for _ in 0..200_000 {
            if rng.gen_bool(0.55) {
                // Now, soon, within the ring, or far off (ticks, timeline events).
                let at = now
                    + [0, rng.gen_range(0..3_000), rng.gen_range(0..5_000_000), rng.gen_range(0..90_000_000)]
                        [rng.gen_range(0..4)];
                seq += 1;
                q.push(at, seq);
                heap.push(Reverse((at, seq)));
            } else {
                let want = heap.pop().map(|Reverse((at, seq))| (at, seq));
                assert_eq!(q.pop(), want);
                if let Some((at, _)) = want {
                    now = at;
                    popped += 1;
                }
            }
        }
        while let Some(Reverse(want)) = heap.pop() {
            assert_eq!(q.pop(), Some(want));
        }
        assert_eq!(q.pop(), None);
        assert!(popped > 50_000);
    }
}
