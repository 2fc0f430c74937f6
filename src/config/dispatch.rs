//! The `dispatch:` section: how a plan is walked (deadlines, attempts, the retry budget,
//! backoff, upstream connections) and the circuit breakers. Only what the operator writes,
//! its defaults and its ranges; `dispatch` does the walking.

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Bound, Range};
use super::Problem;

/// Circuit breaker settings (one breaker per backend, model and node).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Open after this many failures in a row.
    pub consecutive_failures: u32,
    /// Or open when the failure share over `window_secs` reaches this (with `min_requests`).
    pub error_rate: f64,
    /// Fewest requests in the window before `error_rate` counts.
    pub min_requests: u32,
    /// The window `error_rate` is measured over.
    pub window_secs: u64,
    /// How long an open breaker waits before letting one probe through.
    pub open_secs: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: 5,
            error_rate: 0.5,
            min_requests: 20,
            window_secs: 30,
            open_secs: 10,
        }
    }
}

/// How dispatch walks a plan.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DispatchConfig {
    /// First-token deadline = task TTFT SLO × this factor.
    pub ttft_deadline_factor: f64,
    /// Most targets tried for one request.
    pub max_attempts: u32,
    /// Retries may be at most this share of requests (plus `retry_budget_min_per_sec`).
    pub retry_budget_ratio: f64,
    /// Retries always allowed per second, on top of `retry_budget_ratio`.
    pub retry_budget_min_per_sec: f64,
    /// Full-jitter exponential backoff between targets of the same class.
    pub backoff_base_ms: u64,
    /// The longest backoff between targets.
    pub backoff_max_ms: u64,
    /// TCP/TLS connect timeout.
    pub connect_timeout_ms: u64,
    /// An upstream stream silent for this long after its first token is broken.
    pub stream_idle_timeout_ms: u64,
    /// Idle upstream connections kept open per host, warm for the next request; the rest are
    /// closed as soon as they are free (so a burst's sockets and buffers are given back).
    pub pool_max_idle_per_host: usize,
    /// An idle upstream connection is closed after this long.
    pub pool_idle_timeout_ms: u64,
    /// Hosted requests sharing one connection at most (HTTP/2 streams; providers advertise 100);
    /// a request past it opens another connection.
    pub hosted_streams_per_connection: usize,
    /// Connections to one hosted origin at most; past them a request waits in the open
    /// (`spillway_upstream_waiting`) until a slot frees or its deadline ends the attempt.
    pub hosted_max_connections: usize,
    /// Circuit breakers (one per backend, model and node).
    pub breaker: BreakerConfig,
    /// Calls made beside live traffic (canaries, gate items, judges, shadows) in flight at
    /// once; beyond it a shadow is dropped (counted as `busy`) and the others wait.
    pub max_synthetic_in_flight: usize,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            ttft_deadline_factor: 2.0,
            max_attempts: 4,
            retry_budget_ratio: 0.2,
            retry_budget_min_per_sec: 10.0,
            backoff_base_ms: 10,
            backoff_max_ms: 200,
            connect_timeout_ms: 2000,
            stream_idle_timeout_ms: 30_000,
            pool_max_idle_per_host: 256,
            pool_idle_timeout_ms: 90_000,
            hosted_streams_per_connection: 100,
            hosted_max_connections: 64,
            breaker: BreakerConfig::default(),
            max_synthetic_in_flight: 64,
        }
    }
}

impl DispatchConfig {
    /// The ranges of the section's numbers (keys below `dispatch`).
    pub const RANGES: &'static [Range] = &[
        Range::at_least("ttft_deadline_factor", 1.0),
        Range::at_least("max_attempts", 1.0),
        Range::between("retry_budget_ratio", 0.0, 1.0),
        Range::at_least("retry_budget_min_per_sec", 0.0),
        Range::new("breaker.error_rate", Bound::Excl(0.0), Bound::Incl(1.0)),
        Range::at_least("breaker.consecutive_failures", 1.0),
        Range::between("hosted_streams_per_connection", 1.0, 10_000.0),
        Range::between("hosted_max_connections", 1.0, 10_000.0),
    ];

    /// Ranges, and that the backoff's base does not exceed its longest wait.
    pub fn check(&self) -> Vec<Problem> {
        let values = [
            ("ttft_deadline_factor", self.ttft_deadline_factor),
            ("max_attempts", self.max_attempts as f64),
            ("retry_budget_ratio", self.retry_budget_ratio),
            ("retry_budget_min_per_sec", self.retry_budget_min_per_sec),
            ("breaker.error_rate", self.breaker.error_rate),
            ("breaker.consecutive_failures", self.breaker.consecutive_failures as f64),
            ("hosted_streams_per_connection", self.hosted_streams_per_connection as f64),
            ("hosted_max_connections", self.hosted_max_connections as f64),
        ];
        let mut problems = range::check("dispatch", Self::RANGES, &values);
        if self.backoff_base_ms > self.backoff_max_ms {
            problems.push(Problem::new("dispatch.backoff_base_ms", "must not exceed backoff_max_ms"));
        }
        problems
    }
}
