//! What a scenario's traffic is: open-loop streams of requests (`workload:`), closed-loop agent
//! sessions (`sessions:`) and batch jobs (`batches:`), with the token-count distributions they
//! draw from. Data only: `workload.rs` and the engine's batch runner read them.

use serde::Deserialize;

use super::Secs;
use crate::config::Priority;

/// A token count distribution: log-normal with this mean and standard deviation, clamped.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Dist {
    pub mean: f64,
    #[serde(default)]
    pub sd: f64,
    #[serde(default = "one")]
    pub min: f64,
    #[serde(default = "big")]
    pub max: f64,
}

pub(super) fn one() -> f64 {
    1.0
}

fn big() -> f64 {
    128_000.0
}

/// Arrival rate: a constant (requests per second) or `[[time, rps], …]`, linear in between.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Rate {
    Constant(f64),
    Points(Vec<(Secs, f64)>),
}

/// One stream of requests to one task.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Stream {
    pub task: String,
    pub rps: Rate,
    pub prompt_tokens: Dist,
    pub output_tokens: Dist,
    /// Distinct projects (affinity keys); popularity falls off as `1 / rank^zipf`.
    #[serde(default = "default_projects")]
    pub projects: u32,
    #[serde(default = "one")]
    pub zipf: f64,
    /// Share of each prompt that is the project's own stable prefix (what caches can keep).
    #[serde(default = "default_prefix")]
    pub prefix_share: f64,
    /// Priority of the stream's requests; the task's default when unset.
    #[serde(default)]
    pub priority: Option<Priority>,
    /// Share of requests that are the client's own mistake (400: not retried, not counted
    /// against any backend).
    #[serde(default)]
    pub client_error_rate: f64,
}

fn default_projects() -> u32 {
    100
}

/// Closed-loop agent sessions (`sessions:`): each session sends its turns one after another,
/// the next one `think` after the last one's answer, resending its preamble and its whole
/// history every turn, as a coding agent does. Unlike a `workload` stream, when a turn comes
/// depends on how fast the last one was answered.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionStream {
    pub task: String,
    /// Sessions in all.
    pub count: u32,
    /// Sessions running at once: the next one starts when one ends (default: all at once).
    #[serde(default)]
    pub concurrency: Option<u32>,
    pub turns: u32,
    /// A preamble every session of the stream sends first (the same instructions and tool
    /// list), tokens: warm on every node that served any of the sessions.
    #[serde(default)]
    pub shared_tokens: u32,
    /// Each session's own context on its first turn (its own instructions, files), tokens.
    #[serde(default)]
    pub own_tokens: u32,
    /// What each turn adds to the history before it is sent (the user's message, tool
    /// results), tokens.
    pub turn_tokens: Dist,
    pub output_tokens: Dist,
    /// From an answer's end to the session's next turn.
    #[serde(default)]
    pub think: Secs,
    /// When the first sessions start.
    #[serde(default)]
    pub at: Secs,
    /// Priority of its turns; the task's default when unset.
    #[serde(default)]
    pub priority: Option<Priority>,
}

fn default_prefix() -> f64 {
    0.6
}

/// A batch job submitted during the run (`POST /v1/batches`): `lines` requests to `task`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BatchJob {
    pub task: String,
    /// When it is submitted.
    pub at: Secs,
    pub lines: u64,
    pub prompt_tokens: Dist,
    pub output_tokens: Dist,
    /// Its completion window.
    #[serde(default = "day")]
    pub window: Secs,
    /// The endpoint of its lines, which says whose batch API can take them.
    #[serde(default = "chat_endpoint")]
    pub endpoint: String,
}

fn chat_endpoint() -> String {
    "/v1/chat/completions".into()
}

fn day() -> Secs {
    Secs(86_400.0)
}
