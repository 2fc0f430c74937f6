//! The typed configuration: what an operator writes in YAML, and nothing else.
//!
//! Every struct rejects unknown keys, secrets appear only as the *names* of environment
//! variables, and money is a decimal. Loading (`load`) reports every problem with its key
//! path; `validate` checks what types alone cannot (references, ranges, URLs).

mod load;
mod validate;

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::Deserialize;

pub use load::{load_file, parse, Problem};

/// The whole file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the router listens on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Environment variables that each hold one bearer key clients may send. Empty: no auth.
    #[serde(default)]
    pub client_keys_env: Vec<String>,
    pub backends: Vec<BackendConfig>,
    pub tasks: Vec<TaskConfig>,
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub dispatch: DispatchConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_string()
}

/// The wire format and nature of a backend.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A pool of self-hosted vLLM nodes (OpenAI-compatible wire format).
    Vllm,
    Openai,
    Anthropic,
    Gemini,
    /// Any other OpenAI-compatible endpoint, treated as hosted.
    OpenaiCompatible,
}

impl BackendKind {
    /// Self-hosted GPUs (the fleet) rather than a hosted API.
    pub fn is_local(self) -> bool {
        self == BackendKind::Vllm
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Vllm => "vllm",
            BackendKind::Openai => "openai",
            BackendKind::Anthropic => "anthropic",
            BackendKind::Gemini => "gemini",
            BackendKind::OpenaiCompatible => "openai_compatible",
        }
    }

    /// The public API address used when `base_url` is not given.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            BackendKind::Openai => Some("https://api.openai.com/v1"),
            BackendKind::Anthropic => Some("https://api.anthropic.com"),
            BackendKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            BackendKind::Vllm | BackendKind::OpenaiCompatible => None,
        }
    }
}

/// Prices per million tokens, in US dollars.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: Decimal,
    /// Defaults to `input_per_mtok` when the provider has no cache discount.
    #[serde(default)]
    pub cached_input_per_mtok: Option<Decimal>,
    pub output_per_mtok: Decimal,
}

/// One backend: a vLLM pool or a hosted API with one model.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    pub name: String,
    pub kind: BackendKind,
    /// Node addresses of a vLLM pool (or of a multi-node OpenAI-compatible backend), without `/v1`.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// API base URL of a hosted backend; defaults to the provider's public API.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the environment variable that holds the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    pub model: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub price: Option<Price>,
    /// Most requests the router keeps in flight on one node (or endpoint); beyond it the node
    /// counts as full and the request moves on. Unset: no limit.
    #[serde(default)]
    pub max_inflight_per_node: Option<u32>,
    /// Ask the upstream for a streamed answer even when the client did not (default true), so
    /// that the first-token deadline and failover work the same for both.
    #[serde(default = "yes")]
    pub stream_upstream: bool,
}

fn yes() -> bool {
    true
}

/// How a task orders its backends.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Configured preference order; backends whose breaker is open go last.
    #[default]
    Priority,
    /// Weighted random order (weights from `weights`, equal when unset).
    Weighted,
    /// Cheapest first, by the request's estimated cost.
    Cost,
}

/// The latency target of a task.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Time to first token, milliseconds.
    pub ttft_ms: u64,
}

/// A task: what clients name in `model`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    pub name: String,
    /// Backends in preference order.
    pub backends: Vec<String>,
    #[serde(default)]
    pub strategy: Strategy,
    /// Relative weights for `strategy: weighted`, by backend name.
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    #[serde(default = "default_data_class")]
    pub data_class: String,
    pub slo: Slo,
    /// Cap on output tokens; a client asking for more is capped to it.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Client key env names allowed to use this task; unset: every key.
    #[serde(default)]
    pub allowed_keys: Option<Vec<String>>,
}

fn default_data_class() -> String {
    "internal".to_string()
}

/// Hard rules per data class.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    #[serde(default)]
    pub data_classes: BTreeMap<String, DataClassPolicy>,
}

/// What a data class allows. `public` and `internal` exist without being listed and allow
/// everything unless listed otherwise.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataClassPolicy {
    /// Regions a backend must be in; unset: any region.
    #[serde(default)]
    pub regions: Option<Vec<String>>,
    /// May hosted (non-vLLM) backends see this data?
    #[serde(default = "yes")]
    pub allow_hosted: bool,
}

/// Circuit breaker settings (one breaker per backend, model and node).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Open after this many failures in a row.
    pub consecutive_failures: u32,
    /// Or open when the failure share over `window_secs` reaches this (with `min_requests`).
    pub error_rate: f64,
    pub min_requests: u32,
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
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DispatchConfig {
    /// First-token deadline = task TTFT SLO × this factor.
    pub ttft_deadline_factor: f64,
    /// Most targets tried for one request.
    pub max_attempts: u32,
    /// Retries may be at most this share of requests (plus `retry_budget_min_per_sec`).
    pub retry_budget_ratio: f64,
    pub retry_budget_min_per_sec: f64,
    /// Full-jitter exponential backoff between targets of the same class.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    pub connect_timeout_ms: u64,
    /// An upstream stream silent for this long after its first token is broken.
    pub stream_idle_timeout_ms: u64,
    pub breaker: BreakerConfig,
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
            breaker: BreakerConfig::default(),
        }
    }
}

/// Protection of the router itself.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted (bytes); larger gets 413.
    pub max_body_bytes: usize,
    /// Most requests in flight at once; beyond it clients get 429 with `Retry-After`.
    pub max_concurrency: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig { max_body_bytes: 1 << 20, max_concurrency: 1024 }
    }
}

impl Config {
    pub fn backend(&self, name: &str) -> Option<&BackendConfig> {
        self.backends.iter().find(|b| b.name == name)
    }

    pub fn task(&self, name: &str) -> Option<&TaskConfig> {
        self.tasks.iter().find(|t| t.name == name)
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
        refs
    }
}
