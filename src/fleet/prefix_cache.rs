//! What a node's prefix cache likely holds of a request, learnt from what the router sent there
//! and what the engine said it found cached, so planning can price a turn's prefill on each
//! node: warm (only the new tokens), cold (the whole prompt), or the shared preamble only.
//!
//! Two keys say what a node may hold of a request ([`PrefixKeys`]):
//!
//! - the **session** (the affinity key's hash): a conversation's earlier turns, its prompt and
//!   answer, are held only where they ran;
//! - the **preamble** (the leading system prompt and the tools' names and descriptions): many
//!   sessions send the same one (every Claude Code user does), so it is warm on every node that
//!   served any of them.
//!
//! A node's [`Memory`] keeps, per key, how many tokens it served under it, least recently used
//! first out past [`MAX_KEYS`]. It forgets everything when the node's engine restarts (its
//! `generation`, the telemetry's restart count, changes): a restarted engine's cache is cold,
//! and its keys are trusted again only once it serves them. It also learns how far its guesses
//! hold (`trust`): of the tokens it predicted cached for a request, the share the engine
//! reported cached (llama.cpp `prompt_tokens_details.cached_tokens`, vLLM and SGLang when
//! enabled), a moving average, so an engine whose cache evicts early (few slots, a small
//! cache) is priced as it behaves. An engine that never reports a cached token teaches nothing.
//!
//! Pure: no clock, no lock; the node's counters hold one behind a mutex (`fleet::load`).

use std::collections::HashMap;

use crate::canonical::ChatRequest;

/// Most keys a node remembers.
pub const MAX_KEYS: usize = 4096;

/// Weight of the newest report in the node's trust.
const TRUST_WEIGHT: f64 = 0.2;

/// Keeps preamble hashes apart from session hashes in one table.
const PREAMBLE_SALT: u64 = 0x5052_4541_4d42_4c45;

/// What a node holds of one request, as far as the router knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Prompt tokens it likely holds.
    pub tokens: u32,
    /// Whether it holds the session's own earlier turns (not only a preamble many share):
    /// where the session should go on.
    pub own: bool,
}

/// What a node may hold of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixKeys {
    /// The affinity key's hash: the session's (project's, conversation's) earlier turns.
    pub session: Option<u64>,
    /// The shared preamble's hash and its tokens.
    pub preamble: Option<(u64, u32)>,
}

impl PrefixKeys {
    /// The keys of `request`, whose affinity key hashes to `affinity`. The preamble is the
    /// leading system messages and the tools' names and descriptions, counted in tokens as
    /// `ChatRequest::estimated_prompt_tokens` counts them.
    pub fn of(request: &ChatRequest, affinity: Option<u64>) -> PrefixKeys {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut chars = 0;
        request.messages.leading_system(|text| {
            hasher.update(text.as_bytes());
            hasher.update(&[0]);
            chars += text.len() + 4;
        });
        for tool in &request.tools {
            hasher.update(tool.name.as_bytes());
            hasher.update(&[1]);
            hasher.update(tool.description.as_deref().unwrap_or("").as_bytes());
            hasher.update(&[2]);
        }
        let preamble = (chars > 0).then(|| (hasher.digest(), (chars / 4) as u32));
        PrefixKeys { session: affinity, preamble }
    }

    pub fn is_empty(&self) -> bool {
        self.session.is_none() && self.preamble.is_none()
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    tokens: u32,
    used: u64,
}

/// One node's memory of the prefixes it served.
#[derive(Debug, Default)]
pub struct Memory {
    entries: HashMap<u64, Entry>,
    /// Ticks once per request served, for least-recently-used eviction.
    clock: u64,
    /// The engine's restart count the entries belong to.
    generation: u32,
    /// Of the tokens predicted cached, the share the engine reported cached; `None` until it
    /// reported a cached token at all.
    trust: Option<f64>,
}

impl Memory {
    /// Tokens of a request of `prompt` tokens with these keys that the node holds, as far as
    /// the router knows, the node's engine being in its `generation`-th run: `None` when the
    /// request has no keys (planning uses the node's own hit rate then). At least one token is
    /// always left to prefill.
    pub fn cached(&self, keys: &PrefixKeys, prompt: u32, generation: u32) -> Option<Held> {
        if keys.is_empty() {
            return None;
        }
        if generation != self.generation {
            return Some(Held::default());
        }
        let session = keys.session.and_then(|k| self.entries.get(&k)).map(|e| e.tokens);
        let preamble = keys.preamble.filter(|(h, _)| self.entries.contains_key(&(h ^ PREAMBLE_SALT)));
        let known = session.max(preamble.map(|(_, t)| t)).unwrap_or(0).min(prompt.saturating_sub(1));
        let tokens = (f64::from(known) * self.trust.unwrap_or(1.0)).round() as u32;
        Some(Held { tokens, own: session.is_some_and(|t| t > 0) })
    }

    /// The node served a request with these keys in its engine's `generation`-th run: `tokens`
    /// of it (prompt and answer) are now in its cache.
    pub fn served(&mut self, keys: &PrefixKeys, tokens: u32, generation: u32) {
        if generation != self.generation {
            self.entries.clear();
            self.generation = generation;
        }
        self.clock += 1;
        let used = self.clock;
        if let Some(session) = keys.session {
            self.entries.insert(session, Entry { tokens, used });
        }
        if let Some((hash, preamble)) = keys.preamble {
            self.entries.insert(hash ^ PREAMBLE_SALT, Entry { tokens: preamble.min(tokens), used });
        }
        while self.entries.len() > MAX_KEYS {
            let oldest = self.entries.iter().min_by_key(|(_, e)| e.used).map(|(&k, _)| k);
            oldest.map(|k| self.entries.remove(&k));
        }
    }

    /// The engine reported `actual` tokens of a request cached where `predicted` were.
    pub fn reported(&mut self, predicted: u32, actual: u32) {
        if actual > 0 && self.trust.is_none() {
            self.trust = Some(1.0);
        }
        let Some(trust) = self.trust.as_mut() else { return };
        if predicted > 0 {
            let share = (f64::from(actual) / f64::from(predicted)).min(1.0);
            *trust += TRUST_WEIGHT * (share - *trust);
        }
    }

    /// Of the tokens predicted cached, the share the engine reported, once it reported any.
    pub fn trust(&self) -> Option<f64> {
        self.trust
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Role;

    /// `tokens` held, with the session's own turns.
    fn own(tokens: u32) -> Option<Held> {
        Some(Held { tokens, own: true })
    }

    /// `tokens` held, none of them the session's own (a shared preamble, or nothing).
    fn shared(tokens: u32) -> Option<Held> {
        Some(Held { tokens, own: false })
    }

    const SESSION: PrefixKeys = PrefixKeys { session: Some(7), preamble: Some((99, 400)) };
    const OTHER_SESSION: PrefixKeys = PrefixKeys { session: Some(8), preamble: Some((99, 400)) };

    #[test]
    fn a_session_is_warm_where_it_ran_and_its_preamble_wherever_any_session_ran() {
        let mut node = Memory::default();
        assert_eq!(node.cached(&SESSION, 1000, 0), shared(0), "cold: never served");
        assert_eq!(node.cached(&PrefixKeys::default(), 1000, 0), None, "no keys: unknown");
        node.served(&SESSION, 1200, 0);
        // The next turn holds the last turn's prompt and answer, and leaves one token to prefill.
        assert_eq!(node.cached(&SESSION, 1500, 0), own(1200));
        assert_eq!(node.cached(&SESSION, 900, 0), own(899));
        // Another session with the same preamble finds the preamble only.
        assert_eq!(node.cached(&OTHER_SESSION, 1500, 0), shared(400));
        // A restarted engine is cold until it serves the key again.
        assert_eq!(node.cached(&SESSION, 1500, 1), shared(0));
        node.served(&OTHER_SESSION, 600, 1);
        assert_eq!(node.cached(&SESSION, 1500, 1), shared(400), "the preamble again, the session not");
    }

    #[test]
    fn reported_cache_hits_teach_how_far_the_guesses_hold() {
        let mut node = Memory::default();
        node.served(&SESSION, 1000, 0);
        // An engine that reports no cached tokens teaches nothing.
        node.reported(1000, 0);
        assert_eq!(node.trust(), None);
        assert_eq!(node.cached(&SESSION, 2000, 0), own(1000));
        // One that reports half of what was predicted moves trust a fifth of the way to 0.5.
        node.reported(1000, 500);
        assert_eq!(node.trust(), Some(0.9));
        assert_eq!(node.cached(&SESSION, 2000, 0), own(900));
        // Once it reports, a miss counts.
        node.reported(1000, 0);
        assert!((node.trust().unwrap() - 0.72).abs() < 1e-9);
    }

    #[test]
    fn the_least_recently_served_keys_go_first() {
        let mut node = Memory::default();
        for k in 0..MAX_KEYS as u64 + 10 {
            node.served(&PrefixKeys { session: Some(k), preamble: None }, 100, 0);
        }
        assert_eq!(node.entries.len(), MAX_KEYS);
        assert_eq!(node.cached(&PrefixKeys { session: Some(0), preamble: None }, 500, 0), shared(0));
        let newest = PrefixKeys { session: Some(MAX_KEYS as u64 + 9), preamble: None };
        assert_eq!(node.cached(&newest, 500, 0), own(100));
    }

    #[test]
    fn the_preamble_is_the_leading_system_prompt_and_the_tools() {
        use crate::canonical::{Message, Tool};
        let request = |system: &str, tool: &str| ChatRequest {
            messages: vec![Message::new(Role::System, system), Message::new(Role::User, "hi")].into(),
            tools: vec![Tool {
                name: tool.into(),
                description: None,
                parameters: serde_json::json!({}).into(),
            }],
            ..Default::default()
        };
        let a = PrefixKeys::of(&request(&"x".repeat(400), "read"), Some(1));
        let b = PrefixKeys::of(&request(&"x".repeat(400), "read"), Some(2));
        let c = PrefixKeys::of(&request(&"x".repeat(400), "write"), Some(1));
        assert_eq!(a.preamble, b.preamble);
        assert_eq!(a.preamble.unwrap().1, 101);
        assert_ne!(a.preamble, c.preamble);
        assert_eq!((a.session, b.session), (Some(1), Some(2)));
    }
}
