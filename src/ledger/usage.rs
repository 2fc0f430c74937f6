//! GPU time: one row per self-hosted node and minute, saying whether the node was serving, how
//! much of its sequence capacity it used and what its GPUs cost, so that reports can split GPU
//! hours into busy and idle and measure utilisation against capacity.
//!
//! A node counts as busy in a minute when any sample taken in it saw work: vLLM's
//! `num_requests_running` above zero, the NVML agent's GPU utilisation above zero, or a request
//! of this router in flight on it. A node seen at any moment of a minute is paid for the whole
//! minute (GPUs are rented by the hour, not by the request). Its [`Occupancy`] is sample-and-hold:
//! each sample's running count and slots hold until the node's next sample, split exactly at
//! minute boundaries; a node missing from a sweep holds nothing over the gap.
//! [`MinuteTracker`] is pure: it turns samples into finished minutes and does no I/O; the
//! sampling loop lives in `control::gpu_time`.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::canonical::{BackendName, NodeKey};

pub use super::occupancy::Occupancy;

/// Milliseconds in a minute.
pub(crate) const MINUTE_MS: i64 = 60_000;

/// One node's minute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMinute {
    /// Start of the minute, unix milliseconds UTC (a multiple of 60,000).
    pub minute_ms: i64,
    /// The vLLM pool (backend name).
    pub backend: String,
    /// The node key, as in [`super::LedgerRecord::node`].
    pub node: String,
    pub gpu_count: i64,
    /// Price of one GPU hour; `None` when the node is unpriced.
    pub gpu_hourly_usd: Option<Decimal>,
    pub busy: bool,
    /// Running × time and capacity × time in the minute; `None` for rows written before they
    /// were recorded.
    pub occupancy: Option<Occupancy>,
}

impl NodeMinute {
    /// What the node costs an hour: GPUs × hourly price (zero when unpriced). Sums of minutes
    /// stay exact when kept in these units and divided by 60 once, at the end.
    pub(crate) fn hourly_rate(&self) -> Decimal {
        self.gpu_hourly_usd.map_or(Decimal::ZERO, |p| p * Decimal::from(self.gpu_count))
    }

    /// What this minute of this node cost: the hourly rate ÷ 60.
    pub fn cost(&self) -> Decimal {
        self.hourly_rate() / Decimal::from(60)
    }
}

/// The start of the minute that holds `at_ms`.
pub fn minute_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

/// One sample of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSample {
    pub backend: BackendName,
    pub node: NodeKey,
    pub gpu_count: i64,
    pub gpu_hourly_usd: Option<Decimal>,
    pub busy: bool,
    /// Sequences running on the node now.
    pub running: f64,
    /// Sequences it can run at once (its slots).
    pub capacity: f64,
}

/// A node's latest sample, held until its next one.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Held {
    at_ms: i64,
    running: f64,
    capacity: f64,
}

impl Held {
    /// What this sample adds to the minute starting at `minute_ms`, held until `until_ms`.
    fn within(&self, minute_ms: i64, until_ms: i64) -> Occupancy {
        let from = self.at_ms.max(minute_ms);
        let until = until_ms.min(minute_ms + MINUTE_MS);
        Occupancy::held(self.running, self.capacity, until - from)
    }
}

/// Folds samples into minutes; a minute is finished when a sample of a later minute arrives
/// (or at [`MinuteTracker::finish`]).
#[derive(Debug, Default)]
pub(crate) struct MinuteTracker {
    minute_ms: Option<i64>,
    /// Node key → its minute so far.
    open: BTreeMap<NodeKey, NodeMinute>,
    /// Node key → its latest sample, as of the last sweep.
    held: BTreeMap<NodeKey, Held>,
}

impl MinuteTracker {
    /// Record what each node looked like at `at_ms`; returns the minutes this sample closed.
    /// `samples` is a sweep of every node: a node held from the last sweep but missing from
    /// this one adds no occupancy for the gap.
    pub fn observe(&mut self, at_ms: i64, samples: impl IntoIterator<Item = NodeSample>) -> Vec<NodeMinute> {
        let samples: Vec<NodeSample> = samples.into_iter().collect();
        let minute = minute_of(at_ms);
        let closed = match self.minute_ms {
            Some(current) if minute > current => {
                // Samples of the last sweep hold to the end of the open minute, then it closes.
                for s in &samples {
                    if let (Some(h), Some(row)) = (self.held.get(&s.node), self.open.get_mut(&s.node)) {
                        row.occupancy =
                            Some(row.occupancy.unwrap_or_default().plus(h.within(current, at_ms)));
                    }
                }
                self.close()
            }
            _ => Vec::new(),
        };
        // A clock that steps back keeps adding to the open minute rather than reopening one.
        let minute = *self.minute_ms.get_or_insert(minute);
        let mut held = BTreeMap::new();
        for s in samples {
            let row = self.open.entry(s.node.clone()).or_insert_with(|| NodeMinute {
                minute_ms: minute,
                backend: s.backend.to_string(),
                node: s.node.to_string(),
                gpu_count: s.gpu_count,
                gpu_hourly_usd: s.gpu_hourly_usd,
                busy: false,
                occupancy: None,
            });
            row.busy |= s.busy;
            // The latest price and GPU count of the minute win (an annotation may change).
            row.gpu_count = s.gpu_count;
            row.gpu_hourly_usd = s.gpu_hourly_usd;
            let part = self.held.get(&s.node).map(|h| h.within(minute, at_ms)).unwrap_or_default();
            row.occupancy = Some(row.occupancy.unwrap_or_default().plus(part));
            held.insert(s.node, Held { at_ms, running: s.running, capacity: s.capacity });
        }
        self.held = held;
        closed
    }

    fn close(&mut self) -> Vec<NodeMinute> {
        self.minute_ms = None;
        std::mem::take(&mut self.open).into_values().collect()
    }

    /// Close the open minute (at shutdown): a node seen in it is paid for all of it. Its
    /// occupancy runs to the last sample; nothing is held past it.
    pub fn finish(&mut self) -> Vec<NodeMinute> {
        self.held.clear();
        self.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(node: &str, busy: bool) -> NodeSample {
        NodeSample {
            backend: "pool".into(),
            node: node.into(),
            gpu_count: 2,
            gpu_hourly_usd: Some("2.50".parse().unwrap()),
            busy,
            running: if busy { 1.0 } else { 0.0 },
            capacity: 16.0,
        }
    }

    fn running(node: &str, running: f64) -> NodeSample {
        NodeSample { running, busy: running > 0.0, ..sample(node, false) }
    }

    fn occ(running_seq_ms: i64, capacity_seq_ms: i64) -> Option<Occupancy> {
        Some(Occupancy { running_seq_ms, capacity_seq_ms })
    }

    #[test]
    fn a_minute_is_busy_when_any_sample_saw_work() {
        let mut t = MinuteTracker::default();
        let base = 1_700_000_040_000; // a minute boundary
        assert!(t.observe(base + 1_000, [sample("a", false), sample("b", false)]).is_empty());
        assert!(t.observe(base + 30_000, [sample("a", true), sample("b", false)]).is_empty());
        assert!(t.observe(base + 59_999, [sample("a", false)]).is_empty());
        let closed = t.observe(base + 60_000, [sample("a", false)]);
        assert_eq!(closed.len(), 2);
        assert_eq!((closed[0].node.as_str(), closed[0].busy, closed[0].minute_ms), ("a", true, base));
        assert_eq!((closed[1].node.as_str(), closed[1].busy), ("b", false));
        let last = t.finish();
        assert_eq!((last.len(), last[0].minute_ms, last[0].busy), (1, base + 60_000, false));
        assert!(t.finish().is_empty());
    }

    #[test]
    fn minute_cost_is_gpus_times_hourly_over_sixty() {
        let mut m = t_minute();
        assert_eq!(m.hourly_rate(), "5.00".parse::<Decimal>().unwrap());
        assert_eq!(m.cost().round_dp(6), "0.083333".parse::<Decimal>().unwrap());
        m.gpu_hourly_usd = None;
        assert_eq!(m.cost(), Decimal::ZERO);
    }

    fn t_minute() -> NodeMinute {
        let s = sample("a", true);
        NodeMinute {
            minute_ms: 0,
            backend: s.backend.to_string(),
            node: s.node.to_string(),
            gpu_count: s.gpu_count,
            gpu_hourly_usd: s.gpu_hourly_usd,
            busy: true,
            occupancy: None,
        }
    }

    #[test]
    fn each_sample_holds_until_the_next_split_at_the_minute() {
        let mut t = MinuteTracker::default();
        let base = 1_700_000_040_000; // a minute boundary
        assert!(t.observe(base + 10_000, [running("a", 4.0)]).is_empty());
        assert!(t.observe(base + 40_000, [running("a", 6.0)]).is_empty());
        // 4 held for 30 s, then 6 held for the minute's last 20 s and 5 s of the next.
        let closed = t.observe(base + 65_000, [running("a", 2.0)]);
        assert_eq!(closed[0].occupancy, occ(4 * 30_000 + 6 * 20_000, 16 * 50_000));
        let last = t.finish();
        assert_eq!((last[0].minute_ms, last[0].occupancy), (base + 60_000, occ(6 * 5_000, 16 * 5_000)));
    }

    #[test]
    fn a_gap_in_the_sweeps_holds_nothing_and_a_clock_step_back_adds_nothing() {
        let mut t = MinuteTracker::default();
        let base = 1_700_000_040_000;
        t.observe(base, [running("a", 3.0), running("b", 5.0)]);
        t.observe(base + 10_000, [running("a", 3.0)]); // b missing: its 10 s are unknown
        t.observe(base + 20_000, [running("a", 1.0), running("b", 5.0)]); // b back, held from now
        t.observe(base + 15_000, [running("a", 8.0), running("b", 5.0)]); // clock stepped back
        t.observe(base + 25_000, [running("a", 0.0), running("b", 0.0)]);
        let closed = t.finish();
        // a: 3 for 20 s, nothing back in time, then 8 from 15 s to 25 s; b: 5 from 15 s to 25 s.
        assert_eq!(closed[0].occupancy, occ(3 * 20_000 + 8 * 10_000, 16 * 30_000));
        assert_eq!(closed[1].occupancy, occ(5 * 10_000, 16 * 10_000));
    }

    #[test]
    fn minutes_before_the_epoch_round_down() {
        assert_eq!(minute_of(-1), -60_000);
        assert_eq!(minute_of(119_999), 60_000);
    }
}
