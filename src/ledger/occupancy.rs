//! How much of a node's sequence capacity a minute used: running sequences × time and slots ×
//! time, in sequence-milliseconds, summed from the GPU-time samples. A pool's utilisation is the
//! ratio of the two sums over a period (`report::utilisation`), so that a node running 4 of its
//! 16 slots reads as a quarter used, not as busy. Pure: no clock, no I/O.

use serde::{Deserialize, Serialize};

/// One node-minute's running × time and capacity × time. `None` on a [`super::usage::NodeMinute`]
/// means the row was written before these were recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Occupancy {
    /// Σ running sequences × milliseconds held.
    pub running_seq_ms: i64,
    /// Σ slots × milliseconds held: what the node could have run in the same time.
    pub capacity_seq_ms: i64,
}

impl Occupancy {
    /// `running` of `capacity` slots, held for `ms` milliseconds. Running is clamped to
    /// `[0, capacity]` (a share of capacity cannot pass 1); a negative span counts nothing.
    pub fn held(running: f64, capacity: f64, ms: i64) -> Occupancy {
        let ms = ms.max(0) as f64;
        let capacity = if capacity.is_finite() { capacity.max(0.0) } else { 0.0 };
        let running = if running.is_finite() { running.clamp(0.0, capacity) } else { 0.0 };
        Occupancy {
            running_seq_ms: (running * ms).round() as i64,
            capacity_seq_ms: (capacity * ms).round() as i64,
        }
    }

    /// The two spans one after the other.
    pub fn plus(self, other: Occupancy) -> Occupancy {
        Occupancy {
            running_seq_ms: self.running_seq_ms + other.running_seq_ms,
            capacity_seq_ms: self.capacity_seq_ms + other.capacity_seq_ms,
        }
    }

    /// Two replicas' rows for the same node-minute watched the same gauges: keep the one that
    /// watched more of the minute (more capacity time), never their sum. A row without the
    /// figures (`None`) gives way to one with them. The store's upsert applies the same rule.
    pub fn merge(stored: Option<Occupancy>, incoming: Option<Occupancy>) -> Option<Occupancy> {
        match (stored, incoming) {
            (Some(s), Some(i)) if i.capacity_seq_ms > s.capacity_seq_ms => Some(i),
            (Some(s), _) => Some(s),
            (None, i) => i,
        }
    }

    /// Running over capacity; `None` when no capacity time was seen.
    pub fn share(&self) -> Option<f64> {
        (self.capacity_seq_ms > 0).then(|| self.running_seq_ms as f64 / self.capacity_seq_ms as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occ(running_seq_ms: i64, capacity_seq_ms: i64) -> Occupancy {
        Occupancy { running_seq_ms, capacity_seq_ms }
    }

    #[test]
    fn held_is_running_and_slots_times_milliseconds() {
        assert_eq!(Occupancy::held(4.0, 16.0, 30_000), occ(120_000, 480_000));
        assert_eq!(Occupancy::held(20.0, 16.0, 1_000), occ(16_000, 16_000), "clamped to capacity");
        assert_eq!(Occupancy::held(-1.0, 16.0, 1_000), occ(0, 16_000));
        assert_eq!(Occupancy::held(f64::NAN, 8.0, 1_000), occ(0, 8_000));
        assert_eq!(Occupancy::held(4.0, 16.0, -5), occ(0, 0), "a clock that stepped back adds nothing");
        assert_eq!(Occupancy::held(0.5, 2.0, 3), occ(2, 6), "rounded to whole sequence-milliseconds");
    }

    #[test]
    fn plus_and_share() {
        let a = Occupancy::held(4.0, 16.0, 30_000).plus(Occupancy::held(6.0, 16.0, 30_000));
        assert_eq!(a, occ(300_000, 960_000));
        assert_eq!(a.share(), Some(0.3125));
        assert_eq!(Occupancy::default().share(), None);
    }

    #[test]
    fn replicas_merge_to_the_row_that_watched_more() {
        let (half, whole) = (occ(100, 480_000), occ(300, 960_000));
        assert_eq!(Occupancy::merge(Some(half), Some(whole)), Some(whole));
        assert_eq!(Occupancy::merge(Some(whole), Some(half)), Some(whole));
        assert_eq!(
            Occupancy::merge(Some(whole), Some(occ(1, 960_000))),
            Some(whole),
            "a tie keeps the stored"
        );
        assert_eq!(Occupancy::merge(None, Some(half)), Some(half));
        assert_eq!(Occupancy::merge(Some(half), None), Some(half));
        assert_eq!(Occupancy::merge(None, None), None);
    }
}
