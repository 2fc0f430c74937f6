//! The `telemetry:` section: how often and how patiently the fleet's metrics are scraped, and
//! whether replicas share their readings. Only what the operator writes, its defaults and its
//! ranges; `telemetry` does the scraping.

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Bound, Range};
use super::Problem;

/// How the fleet's telemetry is scraped.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Scrape period per node.
    pub interval_ms: u64,
    /// Each period is stretched or shrunk by up to this share, at random, so scrapes spread out.
    pub jitter: f64,
    /// Per-scrape timeout.
    pub timeout_ms: u64,
    /// A node whose last good scrape is older than this is treated as full.
    pub stale_after_ms: u64,
    /// How far an engine's gauges may trail its true state: of a reading, the router takes as
    /// its own the most of its requests in flight over this long before it (`fleet::load`).
    pub gauge_lag_ms: u64,
    /// `/readyz` answers 503 until every local pool has a fresh reading or this long has passed
    /// since the start (0: ready at once).
    pub startup_wait_ms: u64,
    /// Longest wait between scrapes of a failing node (doubling from `interval_ms`).
    pub backoff_max_ms: u64,
    /// With Redis (`state.redis_url`): replicas share their readings, and each node is scraped
    /// by `scrape_replicas` of them only. Without Redis, or `false`: every replica scrapes
    /// every node.
    pub share_readings: bool,
    /// How many replicas scrape each node when readings are shared (1 to 16).
    pub scrape_replicas: u32,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            interval_ms: 1000,
            jitter: 0.1,
            timeout_ms: 800,
            stale_after_ms: 5000,
            gauge_lag_ms: 5000,
            startup_wait_ms: 5000,
            backoff_max_ms: 10_000,
            share_readings: true,
            scrape_replicas: 2,
        }
    }
}

impl TelemetryConfig {
    /// The ranges of the section's numbers (keys below `telemetry`).
    pub const RANGES: &'static [Range] = &[
        Range::at_least("interval_ms", 50.0),
        Range::between("jitter", 0.0, 0.5),
        Range::new("gauge_lag_ms", Bound::Open, Bound::Incl(60_000.0)),
        Range::new("startup_wait_ms", Bound::Open, Bound::Incl(600_000.0)),
        Range::between("scrape_replicas", 1.0, 16.0),
    ];

    /// Ranges, and that a node goes stale only after more than one period.
    pub fn check(&self) -> Vec<Problem> {
        let values = [
            ("interval_ms", self.interval_ms as f64),
            ("jitter", self.jitter),
            ("gauge_lag_ms", self.gauge_lag_ms as f64),
            ("startup_wait_ms", self.startup_wait_ms as f64),
            ("scrape_replicas", self.scrape_replicas as f64),
        ];
        let mut problems = range::check("telemetry", Self::RANGES, &values);
        if self.stale_after_ms <= self.interval_ms {
            problems.push(Problem::new("telemetry.stale_after_ms", "must be longer than interval_ms"));
        }
        problems
    }
}
