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
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    #[serde(default)]
    pub state: StateConfig,
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
    /// vLLM pools: port of the NVML agent beside each node (`spillway agent`), if one runs.
    #[serde(default)]
    pub agent_port: Option<u16>,
    /// vLLM pools: share of capacity kept free in normal operation, released when a hosted
    /// backend fails so its traffic can come home.
    #[serde(default = "default_reserve")]
    pub reserve: f64,
    /// vLLM pools: sequences one node runs at once (vLLM's `--max-num-seqs`), its capacity.
    #[serde(default = "default_max_running")]
    pub max_running: u32,
    /// vLLM pools: what every node must report; a node that differs is quarantined.
    #[serde(default)]
    pub pin: Option<Pin>,
    /// vLLM pools: find nodes in Kubernetes instead of (or besides) `endpoints`.
    #[serde(default)]
    pub discovery: Option<Discovery>,
    /// Hosted backends: per-minute limits, counted with this backend's tokenizer.
    #[serde(default)]
    pub quota: Option<Quota>,
    /// How this backend's tokens are counted (quotas, capacity plan).
    #[serde(default)]
    pub tokenizer: Option<Tokenizer>,
}

fn default_reserve() -> f64 {
    0.2
}

fn default_max_running() -> u32 {
    256
}

/// Pinned metadata of a vLLM pool. Unset fields are not checked.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// Weights digest (`spillway.dev/weights-digest`), e.g. `sha256:…`.
    #[serde(default)]
    pub weights: Option<String>,
    /// Quantisation (`spillway.dev/quantization`, or the KV `cache_dtype`), e.g. `fp8`.
    #[serde(default)]
    pub quantization: Option<String>,
    /// Serving engine version (`spillway.dev/engine-version`, or vLLM's `/version`).
    #[serde(default)]
    pub engine: Option<String>,
}

/// Where a pool's nodes come from besides `endpoints`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Discovery {
    pub kubernetes: KubernetesDiscovery,
}

/// Ready pods matching a label selector in a namespace.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesDiscovery {
    pub namespace: String,
    /// Label selector, e.g. `app=vllm,pool=llama-8b`.
    pub selector: String,
    /// Port of vLLM's HTTP server on each pod.
    #[serde(default = "default_vllm_port")]
    pub port: u16,
    /// Watch `pods` (default) or `endpointslices`.
    #[serde(default)]
    pub resource: KubeResource,
}

fn default_vllm_port() -> u16 {
    8000
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum KubeResource {
    #[default]
    Pods,
    Endpointslices,
}

/// Per-minute limits of a hosted backend.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Requests per minute.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens (input + output cap) per minute, in this backend's tokens.
    #[serde(default)]
    pub tpm: Option<u64>,
}

/// A backend's token counter.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// OpenAI's o200k_base (GPT-4o and later), exact.
    O200kBase,
    /// OpenAI's cl100k_base (GPT-4, GPT-3.5), exact.
    Cl100kBase,
    /// Claude models: calibrated estimate (no public tokenizer).
    ClaudeEstimate,
    /// Gemini models: calibrated estimate.
    GeminiEstimate,
    /// Llama 3 family (vLLM pools): calibrated estimate.
    LlamaEstimate,
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
    /// A local node takes a request only if its predicted TTFT stays under
    /// `ttft_ms × (1 − margin)`.
    #[serde(default = "default_margin")]
    pub margin: f64,
}

fn default_margin() -> f64 {
    0.2
}

/// How much a request matters when there is not room for everything.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// A person is waiting: may queue on a full fleet as a last resort, uses all of a quota.
    Interactive,
    /// The default.
    #[default]
    Standard,
    /// Shed first: fills the fleet less and stops earlier on hosted quotas.
    Batch,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Standard, Priority::Batch];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Standard => "standard",
            Priority::Batch => "batch",
        }
    }

    pub fn parse(s: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The share of a pool kept free for this class, given the pool's reserve now: batch
    /// leaves another fifth of what remains, so it spills (and is shed) before the others.
    pub fn local_reserve(self, reserve: f64) -> f64 {
        match self {
            Priority::Batch => 1.0 - (1.0 - reserve) * 0.8,
            _ => reserve,
        }
    }

    /// The share of a hosted backend's per-minute quota this class may use.
    pub fn quota_ceiling(self) -> f64 {
        match self {
            Priority::Interactive => 1.0,
            Priority::Standard => 0.9,
            Priority::Batch => 0.7,
        }
    }
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
    /// Priority of requests that do not send `x-spillway-priority`.
    #[serde(default)]
    pub priority: Priority,
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

/// How the fleet's telemetry is scraped.
#[derive(Debug, Clone, Deserialize, PartialEq)]
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
    /// Longest wait between scrapes of a failing node (doubling from `interval_ms`).
    pub backoff_max_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            interval_ms: 1000,
            jitter: 0.1,
            timeout_ms: 800,
            stale_after_ms: 5000,
            backoff_max_ms: 10_000,
        }
    }
}

/// State shared between router replicas.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Redis URL for shared quota counters, e.g. `redis://127.0.0.1:6379`. Unset: local counters.
    #[serde(default)]
    pub redis_url: Option<String>,
    /// Or the name of an environment variable that holds it (when it carries a password).
    #[serde(default)]
    pub redis_url_env: Option<String>,
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
