//! The `state:` section: what router replicas share (Redis for counters and announcements)
//! and how often each reads the operator state again. Only what the operator writes, its
//! defaults and its checks; `state` and `operator` use it.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Range, Says};
use super::Problem;

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
    /// The ranges of the section's numbers (keys below `state`).
    pub const RANGES: &'static [Range] =
        &[Range::between("operator_poll_ms", 100.0, 10_000.0).says(Says::OutOfRange)];

    /// One way to give Redis, a Redis URL, and the range of the poll.
    pub fn check(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.redis_url.is_some() && self.redis_url_env.is_some() {
            problems.push(Problem::new("state.redis_url_env", "give redis_url or redis_url_env, not both"));
        }
        if let Some(url) = &self.redis_url {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                problems.push(Problem::new(
                    "state.redis_url",
                    format!("`{url}` must start with redis:// or rediss://"),
                ));
            }
        }
        problems.extend(range::check(
            "state",
            Self::RANGES,
            &[("operator_poll_ms", self.operator_poll_ms as f64)],
        ));
        problems
    }

    pub fn operator_poll(&self) -> Duration {
        Duration::from_millis(self.operator_poll_ms)
    }
}
