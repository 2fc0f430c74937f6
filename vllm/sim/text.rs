//! Deterministic text and token accounting for the simulator.
//!
//! Every simulated backend needs the same three things: a token count for a prompt (the
//! crude but stable "chars / 4, rounded up"), a chain of hashes over the prompt's KV blocks
//! (so that prefix caching can be simulated without a tokenizer), and output words drawn
//! from an RNG seeded by `--seed` and the prompt, so that the same seed and prompt always
//! give the same reply. One word is one token. Nothing here does I/O or reads a clock.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Characters that stand for one prompt token.
pub const CHARS_PER_TOKEN: usize = 4;

const WORDS: &[&str] = &[
    "the",
    "model",
    "answers",
    "with",
    "a",
    "short",
    "and",
    "clear",
    "reply",
    "about",
    "your",
    "request",
    "while",
    "tokens",
    "flow",
    "from",
    "simulated",
    "GPU",
    "fleet",
    "to",
    "client",
    "latency",
    "stays",
    "low",
    "cache",
    "blocks",
    "fill",
    "then",
    "free",
    "again",
    "spill",
    "over",
    "hosted",
    "providers",
    "when",
    "queue",
    "grows",
    "long",
    "router",
    "keeps",
    "SLO",
    "in",
    "mind",
    "every",
    "step",
    "of",
    "way",
    "data",
    "is",
    "safe",
    "here",
    "now",
];

/// Prompt tokens for `text`: chars / 4 rounded up, at least 1.
pub fn prompt_tokens(text: &str) -> u32 {
    let chars = text.chars().count();
    chars.div_ceil(CHARS_PER_TOKEN).max(1) as u32
}

/// Chained hashes of the prompt's *full* KV blocks of `block_size` tokens: hash `i` covers
/// the whole prefix up to the end of block `i`, like vLLM's prefix-cache block hashes.
pub fn block_hashes(text: &str, block_size: usize) -> Vec<u64> {
    let chars: Vec<char> = text.chars().collect();
    let chunk = block_size.max(1) * CHARS_PER_TOKEN;
    let full = chars.len() / chunk;
    let mut out = Vec::with_capacity(full);
    let mut parent = 0u64;
    for i in 0..full {
        let mut h = DefaultHasher::new();
        parent.hash(&mut h);
        chars[i * chunk..(i + 1) * chunk].hash(&mut h);
        parent = h.finish();
        out.push(parent);
    }
    out
}

/// A stable 64-bit hash of a string (SipHash with fixed keys).
pub fn stable_hash(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Characters in one token of a fixed reply (`--reply`, `--tool-call-args`).
pub const FIXED_TOKEN_CHARS: usize = 6;

/// Deterministic word source for one reply, or the pieces of a fixed text.
pub struct TextGen {
    rng: StdRng,
    emitted: u32,
    fixed: Option<std::collections::VecDeque<String>>,
}

impl TextGen {
    /// A generator for one reply to `prompt` under `seed`.
    pub fn new(seed: u64, prompt: &str) -> TextGen {
        TextGen { rng: StdRng::seed_from_u64(seed ^ stable_hash(prompt)), emitted: 0, fixed: None }
    }

    /// A generator that replays `text` in pieces of [`FIXED_TOKEN_CHARS`] characters.
    pub fn fixed(text: &str) -> TextGen {
        let chars: Vec<char> = text.chars().collect();
        let pieces = chars.chunks(FIXED_TOKEN_CHARS).map(|c| c.iter().collect()).collect();
        TextGen { rng: StdRng::seed_from_u64(0), emitted: 0, fixed: Some(pieces) }
    }

    /// Tokens a fixed text has left (`None` for generated words, which never run out).
    pub fn fixed_len(&self) -> Option<u32> {
        self.fixed.as_ref().map(|f| f.len() as u32)
    }

    /// The next token's text (a word, with a leading space after the first).
    pub fn next_token(&mut self) -> String {
        if let Some(fixed) = &mut self.fixed {
            self.emitted += 1;
            return fixed.pop_front().unwrap_or_default();
        }
        let w = WORDS[self.rng.gen_range(0..WORDS.len())];
        self.emitted += 1;
        if self.emitted == 1 {
            w.to_string()
        } else {
            format!(" {w}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_tokens_round_up() {
        assert_eq!(prompt_tokens(""), 1);
        assert_eq!(prompt_tokens("abcd"), 1);
        assert_eq!(prompt_tokens("abcde"), 2);
    }

    #[test]
    fn block_hashes_share_prefix() {
        let a = "x".repeat(64 * 3 + 10);
        let mut b = "x".repeat(64 * 2);
        b.push_str(&"y".repeat(64));
        let ha = block_hashes(&a, 16);
        let hb = block_hashes(&b, 16);
        assert_eq!(ha.len(), 3);
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
    }

    #[test]
    fn a_fixed_text_comes_back_whole_in_pieces() {
        let mut g = TextGen::fixed(r#"{"city":"Zürich"}"#);
        assert_eq!(g.fixed_len(), Some(3));
        let pieces: Vec<String> = (0..3).map(|_| g.next_token()).collect();
        assert_eq!(pieces, [r#"{"city"#, r#"":"Zür"#, r#"ich"}"#]);
    }

    #[test]
    fn same_seed_same_text() {
        let run = |seed| {
            let mut g = TextGen::new(seed, "hi");
            (0..10).map(|_| g.next_token()).collect::<String>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }
}
