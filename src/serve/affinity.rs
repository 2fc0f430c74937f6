//! A request's affinity key, taken from what its client already sends, so that a project, a
//! session or a conversation keeps landing on the node (and keeps the hosted chain) that holds
//! its prompt cache without the client learning a Spillway header. First found wins:
//!
//! 1. the `x-spillway-project` header;
//! 2. a session header (`affinity.session_headers`: `x-session-id`, `x-claude-code-session-id`);
//! 3. the body's OpenAI `prompt_cache_key`;
//! 4. the body's OpenAI `user` or Anthropic `metadata.user_id` (the canonical `user`);
//! 5. the client key's name;
//! 6. else the task and the first `affinity.prefix_bytes` of the first system and the first user
//!    message (a completion's or an embedding's first input text stands in for the latter).
//!
//! Pure: no I/O, no clock. The answer is the source and the key's xxh3-64 hash; the key text
//! never leaves this module, so no log line or ledger row can show it.

use std::borrow::Cow;

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::Headers;
use crate::canonical::{Affinity, AffinitySource, ChatRequest, Role};
use crate::config::AffinityConfig;

/// The header that names a project, ahead of every other source.
pub const PROJECT_HEADER: &str = "x-spillway-project";

/// The affinity of a request to `task` from a client with key `client_key`; `None` when the
/// client sent no identity and the prompt has nothing to key on (or `prefix_bytes` is 0).
/// Empty values count as absent.
pub fn derive<'a>(
    headers: &'a dyn Headers,
    request: &'a ChatRequest,
    client_key: Option<&'a str>,
    task: &str,
    settings: &AffinityConfig,
) -> Option<Affinity> {
    let header = |name: &str| present(headers.header(name));
    let field = |value: Option<&'a str>| present(value.map(str::as_bytes));
    let identity = header(PROJECT_HEADER)
        .map(|key| (AffinitySource::Project, key))
        .or_else(|| {
            let session = settings.session_headers.iter().find_map(|name| header(name));
            session.map(|key| (AffinitySource::SessionHeader, key))
        })
        .or_else(|| {
            field(request.prompt_cache_key.as_deref()).map(|key| (AffinitySource::PromptCacheKey, key))
        })
        .or_else(|| field(request.user.as_deref()).map(|key| (AffinitySource::User, key)))
        .or_else(|| present(client_key.map(str::as_bytes)).map(|key| (AffinitySource::ClientKey, key)));
    match identity {
        Some((source, key)) => Some(Affinity { source, hash: xxh3_64(key) }),
        None => prompt_prefix(request, task, settings.prefix_bytes as usize),
    }
}

/// A value, unless it is empty.
fn present(value: Option<&[u8]>) -> Option<&[u8]> {
    value.filter(|v| !v.is_empty())
}

/// The hash of the task and the first `bound` bytes of the first system and first user text,
/// each written as its length (8 bytes, little-endian) and its bytes, so no two different
/// triples run together into one input.
fn prompt_prefix(request: &ChatRequest, task: &str, bound: usize) -> Option<Affinity> {
    let system = request.messages.first_text(Role::System);
    let system = system.as_deref().unwrap_or("");
    let input = || request.operation.input().and_then(|i| i.texts().into_iter().next()).map(Cow::Borrowed);
    let user = request.messages.first_text(Role::User).or_else(input);
    let user = user.as_deref().unwrap_or("");
    if bound == 0 || (system.is_empty() && user.is_empty()) {
        return None;
    }
    let mut hasher = Xxh3::new();
    for part in [task, cut(system, bound), cut(user, bound)] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    Some(Affinity { source: AffinitySource::PromptPrefix, hash: hasher.digest() })
}

/// At most the first `max` bytes of `text`, ending on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
#[path = "affinity_tests.rs"]
mod tests;
