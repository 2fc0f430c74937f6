//! GPU time: one row per self-hosted node and minute, saying whether the node was serving and
//! what its GPUs cost, so that reports can split GPU hours into busy and idle.
//!
//! A node counts as busy in a minute when any sample taken in it saw work: vLLM's
//! `num_requests_running` above zero, the NVML agent's GPU utilisation above zero, or a request
//! of this router in flight on it. A node seen at any moment of a minute is paid for the whole
//! minute (GPUs are rented by the hour, not by the request). [`MinuteTracker`] is pure: it turns
//! samples into finished minutes and does no I/O; the sampling loop lives in `server`.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Milliseconds in a minute.
pub const MINUTE_MS: i64 = 60_000;

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
}

impl NodeMinute {
    /// What the node costs an hour: GPUs × hourly price (zero when unpriced). Sums of minutes
    /// stay exact when kept in these units and divided by 60 once, at the end.
    pub fn hourly_rate(&self) -> Decimal {
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
    pub backend: String,
    pub node: String,
    pub gpu_count: i64,
    pub gpu_hourly_usd: Option<Decimal>,
    pub busy: bool,
}

/// Folds samples into minutes; a minute is finished when a sample of a later minute arrives
/// (or at [`MinuteTracker::finish`]).
#[derive(Debug, Default)]
pub struct MinuteTracker {
    minute_ms: Option<i64>,
    /// Node key → its minute so far.
    open: BTreeMap<String, NodeMinute>,
}

impl MinuteTracker {
    /// Record what each node looked like at `at_ms`; returns the minutes this sample closed.
    pub fn observe(&mut self, at_ms: i64, samples: impl IntoIterator<Item = NodeSample>) -> Vec<NodeMinute> {
        let minute = minute_of(at_ms);
        let closed = match self.minute_ms {
            Some(current) if minute > current => self.finish(),
            _ => Vec::new(),
        };
        // A clock that steps back keeps adding to the open minute rather than reopening one.
        let minute = *self.minute_ms.get_or_insert(minute);
        for s in samples {
            let row = self.open.entry(s.node.clone()).or_insert_with(|| NodeMinute {
                minute_ms: minute,
                backend: s.backend.clone(),
                node: s.node.clone(),
                gpu_count: s.gpu_count,
                gpu_hourly_usd: s.gpu_hourly_usd,
                busy: false,
            });
            row.busy |= s.busy;
            // The latest price and GPU count of the minute win (an annotation may change).
            row.gpu_count = s.gpu_count;
            row.gpu_hourly_usd = s.gpu_hourly_usd;
        }
        closed
    }

    /// Close the open minute (at shutdown): a node seen in it is paid for all of it.
    pub fn finish(&mut self) -> Vec<NodeMinute> {
        self.minute_ms = None;
        std::mem::take(&mut self.open).into_values().collect()
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
        }
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
            backend: s.backend,
            node: s.node,
            gpu_count: s.gpu_count,
            gpu_hourly_usd: s.gpu_hourly_usd,
            busy: true,
        }
    }

    #[test]
    fn minutes_before_the_epoch_round_down() {
        assert_eq!(minute_of(-1), -60_000);
        assert_eq!(minute_of(119_999), 60_000);
    }
}
