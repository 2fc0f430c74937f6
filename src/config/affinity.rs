//! The `affinity:` section: where a request's affinity key comes from when the client sends
//! no `x-spillway-project` (session headers, the prompt's start). Only what the operator
//! writes, its defaults and its check; `api::affinity` derives the key.

use schemars::JsonSchema;
use serde::Deserialize;

use super::Problem;

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

impl AffinityConfig {
    /// Each session header must be a valid HTTP header name (any case).
    pub fn check(&self) -> Vec<Problem> {
        let bad = |name: &&String| http::HeaderName::from_bytes(name.as_bytes()).is_err();
        let at = |(i, name): (usize, &String)| {
            Problem::new(
                format!("affinity.session_headers[{i}]"),
                format!("`{name}` is not an HTTP header name"),
            )
        };
        self.session_headers.iter().enumerate().filter(|(_, n)| bad(n)).map(at).collect()
    }
}
