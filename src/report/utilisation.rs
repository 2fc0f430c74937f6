//! A pool's utilisation as finance needs it: the share of its sequence capacity that ran, Σ
//! running × time over Σ slots × time from the node-minutes' occupancy, beside the busy share
//! (node-minutes in which anything ran, weighted by GPUs) that it replaces as the headline.
//! Node-minutes written before occupancy was recorded carry none: the capacity figure covers the
//! rest, and a pool with none at all falls back to its busy share, saying so (`basis`). Pure.

use serde::Serialize;

use crate::ledger::usage::NodeMinute;

/// What a pool's `utilisation` figure is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UtilisationBasis {
    /// Running sequences × time over capacity × time.
    #[default]
    Capacity,
    /// No node-minute carried occupancy: the busy-minute share stands in.
    BusyShare,
}

impl UtilisationBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            UtilisationBasis::Capacity => "capacity",
            UtilisationBasis::BusyShare => "busy_share",
        }
    }
}

/// One pool's figures over a period.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolUtilisation {
    /// The headline: capacity share, or the busy share where there is no capacity figure.
    pub utilisation: f64,
    pub basis: UtilisationBasis,
    /// GPU-weighted share of node-minutes that were busy.
    pub busy_share: f64,
    /// Node-minutes without occupancy (written before it was recorded).
    pub unmeasured_node_minutes: u64,
}

/// Sums one pool's node-minutes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    gpu_minutes_busy: i64,
    gpu_minutes_all: i64,
    running_seq_ms: i64,
    capacity_seq_ms: i64,
    measured: u64,
    unmeasured: u64,
}

impl Tally {
    pub fn add(&mut self, m: &NodeMinute) {
        self.gpu_minutes_all += m.gpu_count;
        if m.busy {
            self.gpu_minutes_busy += m.gpu_count;
        }
        match m.occupancy {
            Some(o) => {
                self.running_seq_ms += o.running_seq_ms;
                self.capacity_seq_ms += o.capacity_seq_ms;
                self.measured += 1;
            }
            None => self.unmeasured += 1,
        }
    }

    pub fn finish(&self) -> PoolUtilisation {
        let busy_share = if self.gpu_minutes_all > 0 {
            self.gpu_minutes_busy as f64 / self.gpu_minutes_all as f64
        } else {
            0.0
        };
        let capacity = (self.measured > 0 && self.capacity_seq_ms > 0)
            .then(|| self.running_seq_ms as f64 / self.capacity_seq_ms as f64);
        let (utilisation, basis) = match capacity {
            Some(u) => (u, UtilisationBasis::Capacity),
            None => (busy_share, UtilisationBasis::BusyShare),
        };
        PoolUtilisation { utilisation, basis, busy_share, unmeasured_node_minutes: self.unmeasured }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::usage::{MinuteTracker, NodeSample, Occupancy};

    const T0: i64 = 1_700_000_040_000; // a minute boundary

    fn sample(node: &str, running: f64) -> NodeSample {
        NodeSample {
            backend: "pool".into(),
            node: node.into(),
            gpu_count: 1,
            gpu_hourly_usd: None,
            busy: running > 0.0,
            running,
            capacity: 16.0,
        }
    }

    fn tally(minutes: &[NodeMinute]) -> PoolUtilisation {
        let mut t = Tally::default();
        minutes.iter().for_each(|m| t.add(m));
        t.finish()
    }

    /// The worked example: two nodes of 16 slots sampled every 10 s for two minutes. Node a runs
    /// 4 sequences for the first 60 s, then 6; node b runs 4 throughout, then nothing for its
    /// last 30 s. Every node-minute is busy, so the busy share says 100 %; capacity says
    /// (4×60 + 6×60 + 4×90 + 0×30) / (16 × 240) = 960 / 3840 = 25 %.
    #[test]
    fn two_nodes_running_four_then_six_of_sixteen_use_a_quarter() {
        let mut tracker = MinuteTracker::default();
        let mut minutes = Vec::new();
        for step in 0..=12 {
            let s = i64::from(step) * 10_000;
            let a = if s < 60_000 { 4.0 } else { 6.0 };
            let b = if s < 90_000 { 4.0 } else { 0.0 };
            minutes.extend(tracker.observe(T0 + s, [sample("a", a), sample("b", b)]));
        }
        minutes.extend(tracker.finish());
        let occupancy: Vec<_> = minutes.iter().map(|m| (m.node.as_str(), m.minute_ms, m.occupancy)).collect();
        let occ = |running_seq_ms, capacity_seq_ms| Some(Occupancy { running_seq_ms, capacity_seq_ms });
        assert_eq!(
            occupancy,
            [
                ("a", T0, occ(240_000, 960_000)),
                ("b", T0, occ(240_000, 960_000)),
                ("a", T0 + 60_000, occ(360_000, 960_000)),
                ("b", T0 + 60_000, occ(120_000, 960_000)),
                ("a", T0 + 120_000, occ(0, 0)),
                ("b", T0 + 120_000, occ(0, 0)),
            ]
        );
        let u = tally(&minutes);
        assert_eq!((u.utilisation, u.basis), (0.25, UtilisationBasis::Capacity));
        // Node b's sample at 120 s opens a minute of its own and is idle: 5 of 6 were busy.
        assert_eq!(u.busy_share, 5.0 / 6.0);
        assert_eq!(u.unmeasured_node_minutes, 0);
    }

    fn minute(i: i64, busy: bool, occupancy: Option<Occupancy>) -> NodeMinute {
        NodeMinute {
            minute_ms: T0 + i * 60_000,
            backend: "pool".into(),
            node: "a".into(),
            gpu_count: 2,
            gpu_hourly_usd: None,
            busy,
            occupancy,
        }
    }

    #[test]
    fn old_rows_fall_back_to_the_busy_share_and_are_counted() {
        let old =
            [minute(0, true, None), minute(1, false, None), minute(2, true, None), minute(3, true, None)];
        let u = tally(&old);
        assert_eq!((u.utilisation, u.basis, u.busy_share), (0.75, UtilisationBasis::BusyShare, 0.75));
        assert_eq!(u.unmeasured_node_minutes, 4);

        // A period across the upgrade: the capacity figure covers the measured minutes only.
        let new = Occupancy { running_seq_ms: 3 * 60_000, capacity_seq_ms: 12 * 60_000 };
        let mixed =
            [minute(0, true, None), minute(1, true, Some(new)), minute(2, false, Some(Occupancy::default()))];
        let u = tally(&mixed);
        assert_eq!(
            (u.utilisation, u.basis, u.unmeasured_node_minutes),
            (0.25, UtilisationBasis::Capacity, 1)
        );
        assert_eq!(u.busy_share, 2.0 / 3.0);
    }

    #[test]
    fn no_capacity_time_is_no_capacity_figure() {
        let u = tally(&[minute(0, false, Some(Occupancy::default()))]);
        assert_eq!((u.utilisation, u.basis), (0.0, UtilisationBasis::BusyShare));
        assert_eq!(tally(&[]), PoolUtilisation { basis: UtilisationBasis::BusyShare, ..Default::default() });
    }
}
