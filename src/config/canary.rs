//! The `canary:` section: a small synthetic request to every fallback backend on an interval.
//! Only what the operator writes, its defaults and its checks; `canary` sends them.

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Range};
use super::Problem;

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

impl CanaryConfig {
    /// The ranges of the section's numbers (keys below `canary`).
    pub const RANGES: &'static [Range] = &[Range::at_least("max_tokens", 1.0)];

    pub fn check(&self) -> Vec<Problem> {
        let mut problems = range::check("canary", Self::RANGES, &[("max_tokens", self.max_tokens as f64)]);
        if self.prompt.trim().is_empty() {
            problems.push(Problem::new("canary.prompt", "must not be empty"));
        }
        problems
    }
}
