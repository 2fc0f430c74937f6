//! A request's affinity: which of the client's identities keyed it, and the 64-bit hash that
//! planning, the ledger and the logs carry. The key text itself stays in the front door that
//! read it (`api::affinity`); nothing past it sees more than this value, so no log line or
//! ledger row can hold a session id, a user id or a prompt.

use std::fmt;

/// What the affinity key was taken from, first found first (`api::affinity::derive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AffinitySource {
    /// The `x-spillway-project` header.
    Project,
    /// One of `affinity.session_headers` (`x-session-id`, `x-claude-code-session-id`, …).
    SessionHeader,
    /// The body's OpenAI `prompt_cache_key`.
    PromptCacheKey,
    /// The body's OpenAI `user`, or Anthropic `metadata.user_id`.
    User,
    /// The name of the client key the request authenticated with.
    ClientKey,
    /// The task and the start of the first system and first user message.
    PromptPrefix,
}

impl AffinitySource {
    pub const ALL: [AffinitySource; 6] = [
        AffinitySource::Project,
        AffinitySource::SessionHeader,
        AffinitySource::PromptCacheKey,
        AffinitySource::User,
        AffinitySource::ClientKey,
        AffinitySource::PromptPrefix,
    ];

    /// Its name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            AffinitySource::Project => "project",
            AffinitySource::SessionHeader => "session_header",
            AffinitySource::PromptCacheKey => "prompt_cache_key",
            AffinitySource::User => "user",
            AffinitySource::ClientKey => "client_key",
            AffinitySource::PromptPrefix => "prompt_prefix",
        }
    }
}

impl fmt::Display for AffinitySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request's affinity key, as far as anything past the front door knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Affinity {
    pub source: AffinitySource,
    /// xxh3-64 of the key: the same on every router replica, so they agree on the node and the
    /// chain without shared state.
    pub hash: u64,
}

impl Affinity {
    /// The hash as 16 lowercase hex digits (the ledger's `affinity_hash`, the debug log's).
    pub fn hex(&self) -> String {
        format!("{:016x}", self.hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_hex_are_fixed_width_and_distinct() {
        let names: Vec<&str> = AffinitySource::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            ["project", "session_header", "prompt_cache_key", "user", "client_key", "prompt_prefix"]
        );
        let a = Affinity { source: AffinitySource::User, hash: 0xab };
        assert_eq!(a.hex(), "00000000000000ab");
        assert_eq!(Affinity { hash: u64::MAX, ..a }.hex(), "ffffffffffffffff");
        assert_eq!(AffinitySource::PromptPrefix.to_string(), "prompt_prefix");
    }
}
