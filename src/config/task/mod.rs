//! What a task is: the name clients send as `model`, its backends in preference order, how
//! they are ordered, its SLO, data class and default priority. The types; `check` says what
//! types cannot.

pub(super) mod check;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a task orders its backends.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Live weights: each hosted backend's PID availability (a local pool: 1 while a node has
    /// headroom, else 0) filled in preference order, then a sticky weighted chain per
    /// affinity key and window. With everything healthy it is the preference order.
    #[default]
    Adaptive,
    /// Configured preference order; backends whose breaker is open go last.
    Priority,
    /// Weighted random order (weights from `weights`, equal when unset).
    Weighted,
    /// Cheapest first, by the request's estimated cost.
    Cost,
}

/// The latency target of a task.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Time to first token, milliseconds.
    pub ttft_ms: u64,
    /// A local node takes a request only if its predicted TTFT stays under
    /// `ttft_ms × (1 − margin)`.
    #[serde(default = "default_margin")]
    pub margin: f64,
    /// Share of requests that must meet `ttft_ms` (burn-rate alerts measure against it).
    #[serde(default = "default_objective")]
    pub objective: f64,
    /// Share of requests that must not fail for a reason that is not the client's.
    #[serde(default = "default_availability")]
    pub availability: f64,
}

fn default_objective() -> f64 {
    0.99
}

fn default_availability() -> f64 {
    0.999
}

fn default_margin() -> f64 {
    0.2
}

/// How much a request matters when there is not room for everything.
#[derive(
    Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash, Default, PartialOrd, Ord,
)]
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
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    /// What clients put in `model`.
    pub name: String,
    /// Other names clients may put in `model` for this task (for example
    /// `claude-sonnet-4-6`, for clients that offer only model ids they know); listed by
    /// `GET /v1/models` beside the name.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Backends in preference order.
    pub backends: Vec<String>,
    /// How the backends are ordered for each request.
    #[serde(default)]
    pub strategy: Strategy,
    /// Relative weights for `strategy: weighted`, by backend name.
    #[serde(default)]
    pub weights: BTreeMap<String, f64>,
    /// A `policy.data_classes` key, `public` or `internal`.
    #[serde(default = "default_data_class")]
    pub data_class: String,
    /// The latency and availability targets.
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
    /// The evaluation gate: a golden set each backend must pass before it serves this task.
    #[serde(default)]
    pub gate: Option<GateConfig>,
    /// Shadow traffic: a sampled share of requests also sent to the task's other backends.
    #[serde(default)]
    pub shadow: Option<ShadowConfig>,
    /// Prompt variants: a system prompt file per backend name or backend kind, put before the
    /// request's own messages when that backend serves (live traffic, gate runs, shadows).
    #[serde(default)]
    pub prompt_variants: BTreeMap<String, PathBuf>,
    /// The variants' text by the same keys, read when the config is loaded.
    #[serde(skip)]
    pub variant_texts: BTreeMap<String, String>,
    /// Place prompt-cache breakpoints (a backend's `prompt_cache`) in this task's requests
    /// (default true); false: none are placed, a client's own are still sent as written.
    #[serde(default = "crate::config::yes")]
    pub prompt_cache: bool,
    /// A tool that runs inside a provider (OpenAI's `web_search`, …) in a request served by a
    /// backend that cannot run it: `drop` it (named in `x-spillway-dropped-tools`) or `refuse`
    /// the request.
    #[serde(default)]
    pub unsupported_tools: UnsupportedTools,
}

/// What to do with a tool the serving backend cannot run.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum UnsupportedTools {
    /// Send the request without it, and say so in `x-spillway-dropped-tools`.
    #[default]
    Drop,
    /// Refuse the request with 400, naming the tool.
    Refuse,
}

/// A task's evaluation gate.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// The golden set: JSONL, one item per line (relative paths: from the config file).
    pub golden: PathBuf,
    /// Share of items that must pass.
    #[serde(default = "default_min_pass")]
    pub min_pass: f64,
    /// The 95th percentile of answer latency must be at most this, milliseconds.
    #[serde(default)]
    pub max_p95_ms: Option<u64>,
    /// A backend serves the task only with a passing result for its current fingerprint.
    /// `false`: results are recorded and shown but do not decide routing.
    #[serde(default = "crate::config::yes")]
    pub required: bool,
    /// Items in flight at once during a run.
    #[serde(default = "default_gate_concurrency")]
    pub concurrency: u32,
    /// The backend that scores answers for `judge` graders (it must be allowed this task's
    /// data class).
    #[serde(default)]
    pub judge: Option<String>,
}

fn default_min_pass() -> f64 {
    0.9
}

fn default_gate_concurrency() -> u32 {
    4
}

/// A task's shadow traffic.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShadowConfig {
    /// Share of requests shadowed (0 to 1).
    pub rate: f64,
    /// Which backends get shadows; unset: every other backend of the task.
    #[serde(default)]
    pub backends: Option<Vec<String>>,
    /// How a shadow answer is graded, with the primary's answer as the reference: any
    /// golden-set grader; unset: `similar` (word overlap of at least 0.5).
    #[serde(default)]
    pub grader: Option<crate::config::golden::Grader>,
}

fn default_data_class() -> String {
    "internal".to_string()
}
