//! The typed configuration: what an operator writes in YAML, and nothing else.
//!
//! Every struct rejects unknown keys, secrets appear only as the *names* of environment
//! variables, and money is a decimal. Each section has a file of its own with its types, their
//! defaults, the ranges of its numbers (`range`) and its own check; loading (`load`) reports
//! every problem with its key path, and `validate` runs each section's check and the checks
//! where sections meet (references). `schema` derives the file's JSON schema from these types
//! and the sections' ranges.

mod access_log;
mod affinity;
mod backend;
mod balancing;
mod batch;
mod budgets;
mod canary;
mod check;
mod dispatch;
mod evaluation;
pub mod golden;
mod ids;
mod ledger;
mod limits;
mod load;
mod policy;
mod queue;
mod range;
mod schema;
pub mod secrets;
mod state;
mod structure;
mod task;
mod telemetry;
mod terms;
pub mod tls;
mod tree;
mod validate;

use schemars::JsonSchema;
use serde::Deserialize;

pub use access_log::{AccessLogConfig, AccessLogLevel};
pub use affinity::AffinityConfig;
pub use backend::*;
pub use balancing::{BalancingConfig, SlowSignalConfig, StickySpillConfig};
pub use batch::BatchConfig;
pub use budgets::{BudgetsConfig, FailMode, KeyLimits, WhenRedisDown};
pub use canary::CanaryConfig;
pub use dispatch::{BreakerConfig, DispatchConfig};
pub use ids::{BackendId, TaskId};
pub use ledger::{LedgerConfig, SpoolSettings};
pub use limits::{IssuedKeysConfig, LimitsConfig};
pub use load::{load_file, parse, parse_in, Problem};
pub use policy::{DataClassPolicy, PolicyConfig, BUILTIN_DATA_CLASSES};
pub use queue::QueueConfig;
pub use range::{Bound, Range};
pub use schema::{chart_schema, ranges, schema};
pub use state::StateConfig;
pub use task::*;
pub use telemetry::TelemetryConfig;
pub use terms::DataTerms;
pub use tls::TlsConfig;

/// A Spillway config file (`docs/reference.md`, "Config reference").
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Spillway config")]
pub struct Config {
    /// Address the router listens on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Environment variables that each hold one bearer key clients may send. Empty: no auth.
    #[serde(default)]
    pub client_keys_env: Vec<String>,
    /// Client keys issued through `spillway keys` (kept in the ledger store), beside these.
    #[serde(default)]
    pub issued_keys: IssuedKeysConfig,
    /// The vLLM pools and hosted APIs requests can go to.
    pub backends: Vec<BackendConfig>,
    /// What clients name in `model`: each task's backends, strategy and SLO.
    pub tasks: Vec<TaskConfig>,
    /// Hard rules per data class.
    #[serde(default)]
    pub policy: PolicyConfig,
    /// How plans are walked: deadlines, attempts, retries, backoff, breakers.
    #[serde(default)]
    pub dispatch: DispatchConfig,
    /// What one request and one client connection may take of the router.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// How the fleet's metrics are scraped.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// How requests wait for a slot on a full local pool instead of spilling.
    #[serde(default)]
    pub queue: QueueConfig,
    /// State shared between router replicas.
    #[serde(default)]
    pub state: StateConfig,
    /// Adaptive balancing: PID availability per hosted backend, and affinity windows.
    #[serde(default)]
    pub balancing: BalancingConfig,
    /// Where a request's affinity key comes from: session headers, the prompt's start.
    #[serde(default)]
    pub affinity: AffinityConfig,
    /// Where the cost ledger is kept.
    #[serde(default)]
    pub ledger: LedgerConfig,
    /// Batch jobs: limits, file retention, and how lines share the fleet.
    #[serde(default)]
    pub batch: BatchConfig,
    /// Certificate authorities trusted for upstreams beside the built-in roots.
    #[serde(default)]
    pub tls: TlsConfig,
    /// Synthetic requests to fallback backends on an interval.
    #[serde(default)]
    pub canary: CanaryConfig,
    /// The one line per answered request.
    #[serde(default)]
    pub access_log: AccessLogConfig,
    /// Limits and USD budgets per client key and per team.
    #[serde(default)]
    pub budgets: BudgetsConfig,
    /// Environment variable holding the bearer token of the admin API (`/admin/...`). Unset:
    /// the admin API is off.
    #[serde(default)]
    pub admin_token_env: Option<String>,
    /// The file this config was loaded from (set by [`load_file`]; reloads read it again).
    #[serde(skip)]
    pub source: Option<std::path::PathBuf>,
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_string()
}

/// `name` as one URL path segment: everything but the unreserved characters percent-encoded
/// (a `/` or `:` in a deployment name or a model ARN stays inside its segment).
pub fn path_segment(name: &str) -> String {
    const RESERVED: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    percent_encoding::utf8_percent_encode(name, RESERVED).to_string()
}

pub(crate) fn yes() -> bool {
    true
}

impl Config {
    pub fn backend(&self, name: &str) -> Option<&BackendConfig> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// The task a client's `model` names: by its name, else by one of its aliases.
    pub fn task(&self, name: &str) -> Option<&TaskConfig> {
        self.tasks
            .iter()
            .find(|t| t.name == name)
            .or_else(|| self.tasks.iter().find(|t| t.aliases.iter().any(|a| a == name)))
    }

    /// Every environment variable name the config refers to, with the key path that names it.
    pub fn env_refs(&self) -> Vec<(String, String)> {
        let mut refs = Vec::new();
        for (i, name) in self.client_keys_env.iter().enumerate() {
            refs.push((format!("client_keys_env[{i}]"), name.clone()));
        }
        for (i, b) in self.backends.iter().enumerate() {
            if let Some(env) = &b.api_key_env {
                refs.push((format!("backends[{i}].api_key_env"), env.clone()));
            }
        }
        for (key, env) in [
            ("state.redis_url_env", &self.state.redis_url_env),
            ("ledger.url_env", &self.ledger.url_env),
            ("admin_token_env", &self.admin_token_env),
        ] {
            if let Some(env) = env {
                refs.push((key.to_string(), env.clone()));
            }
        }
        refs
    }
}
