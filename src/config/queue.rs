//! The `queue:` section: how requests wait for a slot on a full local pool instead of spilling
//! (`route::wait` decides whether a slot frees in time; `serve::wait` holds them). Only what the
//! operator writes, its defaults and its ranges.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Range};
use super::Problem;

/// The router-side queue in front of each local pool.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Whether a request may wait for a local slot at all (false: a full pool spills at once).
    pub enabled: bool,
    /// Most requests waiting for one pool at once; beyond it a request spills (0 to 10000).
    pub max_waiting: u32,
    /// Longest a request waits for a slot, whatever its SLO allows (ms, 1 to 600000).
    pub max_wait_ms: u64,
    /// Share of a pool's queue one session or one client key may hold (0 to 1; at least one
    /// request each), so one agent cannot fill it.
    pub max_share: f64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { enabled: true, max_waiting: 256, max_wait_ms: 60_000, max_share: 0.25 }
    }
}

impl QueueConfig {
    /// The ranges of the section's numbers (keys below `queue`).
    pub const RANGES: &'static [Range] = &[
        Range::between("max_waiting", 0.0, 10_000.0),
        Range::between("max_wait_ms", 1.0, 600_000.0),
        Range::between("max_share", 0.0, 1.0),
    ];

    pub fn check(&self) -> Vec<Problem> {
        let values = [
            ("max_waiting", f64::from(self.max_waiting)),
            ("max_wait_ms", self.max_wait_ms as f64),
            ("max_share", self.max_share),
        ];
        range::check("queue", Self::RANGES, &values)
    }

    pub fn max_wait(&self) -> Duration {
        Duration::from_millis(self.max_wait_ms)
    }

    /// Most requests one session or one client key may have waiting for one pool.
    pub fn per_holder(&self) -> usize {
        ((f64::from(self.max_waiting) * self.max_share).floor() as usize).max(1)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    const HEAD: &str = "backends: [{name: p, kind: local, endpoints: ['http://a'], model: m}]\ntasks: [{name: t, backends: [p], slo: {ttft_ms: 1000}}]\n";

    #[test]
    fn defaults_ranges_and_the_share_per_holder() {
        let c = parse(HEAD).unwrap();
        assert!(c.queue.enabled);
        assert_eq!((c.queue.max_waiting, c.queue.per_holder()), (256, 64));
        let c = parse(&format!("{HEAD}queue: {{max_waiting: 3, max_share: 0.1}}")).unwrap();
        assert_eq!(c.queue.per_holder(), 1, "at least one each");
        let err = parse(&format!("{HEAD}queue: {{max_share: 2}}")).unwrap_err();
        let err = format!("{err:?}");
        assert!(err.contains("queue.max_share"), "{err}");
        let err = parse(&format!("{HEAD}queue: {{max_wait: 5}}")).unwrap_err();
        let err = format!("{err:?}");
        assert!(err.contains("max_wait"), "{err}");
    }
}
