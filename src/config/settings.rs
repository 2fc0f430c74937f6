//! Router-wide settings: policy per data class, dispatch and breakers, limits, telemetry and
//! shared state. Types and defaults only.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::yes;

/// Hard rules per data class.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// What each data class allows, by its name.
    #[serde(default)]
    pub data_classes: BTreeMap<String, DataClassPolicy>,
}

/// What a data class allows. `public` and `internal` exist without being listed and allow
/// everything unless listed otherwise.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataClassPolicy {
    /// Regions a backend must be in; unset: any region.
    #[serde(default)]
    pub regions: Option<Vec<String>>,
    /// May hosted (non-vLLM) backends see this data?
    #[serde(default = "yes")]
    pub allow_hosted: bool,
    /// Longest a backend may keep the data (its `terms.retention_days`; zero data retention
    /// counts as 0). Unset: any.
    #[serde(default)]
    pub max_retention_days: Option<u32>,
    /// Only backends whose terms say `trains_on_data: false`.
    #[serde(default)]
    pub no_training: bool,
    /// Only backends whose terms say `zero_data_retention: true`.
    #[serde(default)]
    pub zero_data_retention: bool,
}

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
            breaker: BreakerConfig::default(),
            max_synthetic_in_flight: 64,
        }
    }
}

/// Protection of the router itself: what one request and one client connection may take.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted (bytes); larger gets 413.
    pub max_body_bytes: usize,
    /// Most requests in flight at once; beyond it clients get 429 with `Retry-After`. A request
    /// takes its permit only once its body is in, so a slow sender never holds one.
    pub max_concurrency: usize,
    /// A request's headers must arrive within this long of their first byte, or the connection
    /// is closed.
    pub header_read_timeout_ms: u64,
    /// A request's body must arrive within this long of its headers, or the client gets 408.
    pub body_read_timeout_ms: u64,
    /// A kept-alive client connection with no request for this long is closed.
    pub idle_timeout_ms: u64,
    /// Largest request head (request line and headers, bytes); larger gets 431.
    pub max_header_bytes: usize,
    /// Most header fields in one request; more gets 431.
    pub max_headers: usize,
    /// Most open connections from one client address; 0: no limit. Connections over it are
    /// closed as soon as they are accepted.
    pub max_connections_per_client: usize,
    /// After SIGTERM (or ctrl-c): how long the router keeps accepting and serving new requests,
    /// with `/readyz` answering 503, before it stops accepting and drains (0 to 300000 ms).
    /// Kubernetes keeps sending new connections to a terminating pod for a few seconds; a
    /// second signal skips the rest of the delay.
    pub shutdown_delay_ms: u64,
    /// After the shutdown delay: how long requests in flight (streams included) may take to finish before
    /// every connection still open is closed and the ledger is flushed.
    pub drain_timeout_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body_bytes: 1 << 20,
            max_concurrency: 1024,
            header_read_timeout_ms: 5_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 75_000,
            max_header_bytes: 32 << 10,
            max_headers: 100,
            max_connections_per_client: 0,
            shutdown_delay_ms: 5_000,
            drain_timeout_ms: 25_000,
        }
    }
}

impl LimitsConfig {
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.body_read_timeout_ms)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    pub fn shutdown_delay(&self) -> Duration {
        Duration::from_millis(self.shutdown_delay_ms)
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }
}

/// Client keys issued through `spillway keys` or `/admin/keys`, kept in the ledger store.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IssuedKeysConfig {
    /// How often a router reads the issued keys from the store again (100 to 5000 ms), so a
    /// key revoked through any replica is refused by every replica within this time.
    pub refresh_ms: u64,
}

impl Default for IssuedKeysConfig {
    fn default() -> Self {
        IssuedKeysConfig { refresh_ms: 2_000 }
    }
}

impl IssuedKeysConfig {
    pub fn refresh(&self) -> Duration {
        Duration::from_millis(self.refresh_ms)
    }
}

/// Canaries: a small synthetic request to every fallback backend on an interval, so that an
/// exit nothing has used for months is known to work (or known broken) before an outage.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CanaryConfig {
    /// Seconds between rounds; 0 turns canaries off.
    pub interval_secs: u64,
    /// The user message sent.
    pub prompt: String,
    /// Output tokens asked for.
    pub max_tokens: u32,
}

impl Default for CanaryConfig {
    fn default() -> Self {
        CanaryConfig { interval_secs: 3_600, prompt: "Reply with the single word OK.".into(), max_tokens: 4 }
    }
}

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

/// Adaptive balancing: PID availability per hosted backend, and affinity windows.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BalancingConfig {
    /// How often availability is recomputed from the interval's outcomes.
    pub interval_secs: u64,
    /// `E` in `score = successes − E × errors + 1`: 200 targets about 0.5 % errors.
    pub error_weight: f64,
    /// Proportional gain of the PID (on the traffic-normalised score).
    pub kp: f64,
    /// Integral gain.
    pub ki: f64,
    /// Derivative gain.
    pub kd: f64,
    /// A project keeps its fallback chain for this long (prompt caches stay warm).
    pub affinity_window_secs: u64,
    /// How many successes one slow answer (first token later than the task's TTFT SLO)
    /// cancels in the availability score, as `error_weight` does for an error.
    pub slow_weight: f64,
    /// The per-snapshot slowness signal and where a provider written off for slowness goes
    /// (`route::slowness`).
    pub slow_signal: SlowSignalConfig,
    /// Which projects a full pool keeps, and for how long a spilled one stays spilled.
    pub sticky_spill: StickySpillConfig,
}

/// The fast slowness signal (`route::slowness`).
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SlowSignalConfig {
    /// Slow answers (first token after the task's SLO) the open interval needs before the
    /// snapshot shows the provider at availability 0; 0 turns the signal and the mark off.
    pub min_slow: u64,
    /// The share of the open interval's answers (errors included) that must be slow.
    pub share: f64,
    /// A hosted backend that is down and written off for slowness goes after the local pool
    /// in the chains of the projects outside that pool's share.
    pub after_fleet: bool,
}

impl Default for SlowSignalConfig {
    fn default() -> Self {
        SlowSignalConfig { min_slow: 2, share: 0.5, after_fleet: true }
    }
}

/// Sticky spill (`route::sticky`): a pool that cannot take every project takes a fixed share
/// of them first.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StickySpillConfig {
    /// Off: every request is admitted or spilled on its own, as before.
    pub enabled: bool,
    /// Half the width of the band around the reserve line where the share holds: it grows
    /// back below `1 − margin` (clear headroom) and shrinks above `1 + margin`.
    pub margin: f64,
    /// A spilled project comes back no sooner than this after the pool was last full.
    pub hold_secs: u64,
    /// How fast the share shrinks while the pool is full (fraction per second).
    pub down_per_sec: f64,
    /// How fast it grows back with clear headroom (share per second).
    pub up_per_sec: f64,
    /// The share of its own projects' requests (those it takes first) a pool may refuse
    /// between two steps before it counts as full for them.
    pub refused_max: f64,
    /// When a pool at a share of 1 turns full by refusing its projects, and at least this
    /// many of their requests were planned since the last step, the share drops at once to
    /// what the pool can take of them (its slots outside the reserve over the time a request
    /// holds one, against the rate they arrived at) rather than by `down_per_sec`; 0: never.
    pub cut_min_requests: u64,
    /// With none of its projects refused and the pool at or below this fraction of the line
    /// where it grows back, the share returns toward the one that would fill the pool to
    /// that line without waiting out `hold_secs`; 0: never.
    pub return_below: f64,
    /// The time constant of that return, in seconds (0: at once).
    pub return_secs: u64,
}

impl Default for StickySpillConfig {
    fn default() -> Self {
        StickySpillConfig {
            enabled: true,
            margin: 0.15,
            hold_secs: 60,
            down_per_sec: 0.02,
            up_per_sec: 0.005,
            refused_max: 0.3,
            cut_min_requests: 30,
            return_below: 0.6,
            return_secs: 30,
        }
    }
}

impl Default for BalancingConfig {
    fn default() -> Self {
        BalancingConfig {
            interval_secs: 30,
            error_weight: 200.0,
            kp: 0.02,
            ki: 0.05,
            kd: 0.0,
            affinity_window_secs: 300,
            slow_weight: 20.0,
            slow_signal: SlowSignalConfig::default(),
            sticky_spill: StickySpillConfig::default(),
        }
    }
}

/// Where a request's affinity key comes from after `x-spillway-project` (`api::affinity`).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AffinityConfig {
    /// Request headers that carry a client's session id, tried in this order after
    /// `x-spillway-project` (names are case-insensitive).
    pub session_headers: Vec<String>,
    /// A request with no identity at all is keyed by its task and the first this many bytes of
    /// its first system and first user message (cut on a character boundary); 0: it has no
    /// key and spreads at random.
    pub prefix_bytes: u32,
}

impl Default for AffinityConfig {
    fn default() -> Self {
        AffinityConfig {
            session_headers: vec!["x-session-id".into(), "x-claude-code-session-id".into()],
            prefix_bytes: 1024,
        }
    }
}

/// Where the cost ledger is kept.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LedgerConfig {
    /// Write one row per request and per node-minute (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `sqlite://path` (default `sqlite://spillway.db`) or `postgres://…` for many replicas.
    #[serde(default)]
    pub url: Option<String>,
    /// Or the name of an environment variable that holds the URL (when it carries a password).
    #[serde(default)]
    pub url_env: Option<String>,
    /// The local crash spool: rows are fsynced here before the store has them.
    #[serde(default)]
    pub spool: SpoolSettings,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig { enabled: true, url: None, url_env: None, spool: SpoolSettings::default() }
    }
}

/// The ledger's local crash spool (`ledger.spool`).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SpoolSettings {
    /// Spool each row to a local file, fsynced, before the store has it (default true).
    pub enabled: bool,
    /// The spool directory. Default: beside a SQLite ledger (`<file>.spool`); for PostgreSQL
    /// `spillway-spool-<hash of the URL>` in the temporary directory (`/tmp`, an emptyDir in the
    /// chart, which outlives a container restart).
    pub dir: Option<String>,
    /// Most bytes on disk (default 64 MiB); past it rows go on in memory only (an alert, never
    /// a blocked request).
    pub max_bytes: u64,
    /// At most one fsync per this many milliseconds (default 20) unless 256 rows wait.
    pub fsync_interval_ms: u64,
}

impl Default for SpoolSettings {
    fn default() -> Self {
        SpoolSettings { enabled: true, dir: None, max_bytes: 64 << 20, fsync_interval_ms: 20 }
    }
}

impl SpoolSettings {
    /// The spool directory for a ledger at `url`; `None` when the spool is off or the ledger
    /// is an in-memory SQLite database (nothing survives a crash there anyway).
    pub fn dir_for(&self, url: &str) -> Option<std::path::PathBuf> {
        if !self.enabled || url.contains(":memory:") {
            return None;
        }
        if let Some(dir) = &self.dir {
            return Some(dir.into());
        }
        match url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
            Some(path) => {
                let path = path.split('?').next().unwrap_or(path);
                Some(format!("{path}.spool").into())
            }
            None => {
                use sha2::{Digest, Sha256};
                let digest = Sha256::digest(url.as_bytes());
                let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
                Some(std::env::temp_dir().join(format!("spillway-spool-{hash}")))
            }
        }
    }
}

impl LedgerConfig {
    pub const DEFAULT_URL: &'static str = "sqlite://spillway.db";

    /// Where the ledger is: `url`, else the value of `url_env` read through `env`, else the
    /// default. `Err` names the unset variable.
    pub fn resolve_url(&self, env: impl Fn(&str) -> Option<String>) -> Result<String, String> {
        match (&self.url, &self.url_env) {
            (Some(url), _) => Ok(url.clone()),
            (None, Some(name)) => env(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("ledger.url_env: environment variable {name} is not set")),
            (None, None) => Ok(Self::DEFAULT_URL.to_string()),
        }
    }
}

/// State shared between router replicas.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Redis URL for shared quota counters, e.g. `redis://127.0.0.1:6379`. Unset: local counters.
    #[serde(default)]
    pub redis_url: Option<String>,
    /// Or the name of an environment variable that holds it (when it carries a password).
    #[serde(default)]
    pub redis_url_env: Option<String>,
    /// How often a router reads the operator state (holds, forced breakers, canary results,
    /// gate verdicts, accepted pins) from the ledger store again, in ms (100 to 10000). With
    /// Redis a change reaches every replica at once; without it, within this time.
    #[serde(default = "default_operator_poll_ms")]
    pub operator_poll_ms: u64,
}

fn default_operator_poll_ms() -> u64 {
    2_000
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig { redis_url: None, redis_url_env: None, operator_poll_ms: default_operator_poll_ms() }
    }
}

impl StateConfig {
    pub fn operator_poll(&self) -> Duration {
        Duration::from_millis(self.operator_poll_ms)
    }
}

/// How much the router writes about each HTTP request it answers (the access line).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogConfig {
    /// The level of the per-request line (`info`, `debug`, or `off`: none). It is written only
    /// where `RUST_LOG` lets that level through.
    pub level: AccessLogLevel,
    /// The share of answered requests that get a line, from 0 to 1. Answers with a 5xx status
    /// always get one.
    pub sample: f64,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig { level: AccessLogLevel::Info, sample: 1.0 }
    }
}

/// The level of the access line.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogLevel {
    /// Logged at `info`.
    Info,
    /// Logged at `debug`.
    Debug,
    /// No access line.
    Off,
}
