//! The `anthropic` sim's prompt cache, worked out from the request's `cache_control`
//! breakpoints as Anthropic documents it: each marked block ends a prefix (tools, then
//! system, then messages) that is written to the cache; a later request reads back the
//! longest prefix it has seen before, looked for at its own breakpoints and up to 20 blocks
//! before each; what lies between that and its last breakpoint is written. Prefixes shorter
//! than the model's minimum (1024 tokens here) are not cached. Entries never expire (a sim
//! runs for minutes). Pure but for the set of prefixes it keeps.

use super::text::{prompt_tokens, stable_hash};
use std::collections::HashSet;

/// Shortest prefix that is cached, in tokens.
pub const MIN_TOKENS: u32 = 1024;

/// How far before a breakpoint a cached prefix is looked for, in blocks.
pub const LOOKBACK_BLOCKS: usize = 20;

/// The end of one content block of a prompt: its byte offset, and whether it carries
/// `cache_control`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEnd {
    pub at: usize,
    pub marked: bool,
}

/// Prompt tokens read from the cache and written to it by one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUse {
    pub read: u32,
    pub written: u32,
}

/// The prefixes written so far, by hash.
#[derive(Debug, Default)]
pub struct BreakpointCache {
    prefixes: HashSet<u64>,
}

impl BreakpointCache {
    /// What `prompt` (whose blocks end at `blocks`, in order) reads and writes, and remember
    /// the prefixes it writes.
    pub fn account(&mut self, prompt: &str, blocks: &[BlockEnd]) -> CacheUse {
        let tokens = |i: usize| prompt_tokens(&prompt[..blocks[i].at]);
        let hash = |i: usize| stable_hash(&prompt[..blocks[i].at]);
        let marks: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].marked).collect();
        let read = marks
            .iter()
            .filter_map(|&m| {
                let from = m.saturating_sub(LOOKBACK_BLOCKS - 1);
                (from..=m).rev().find(|&j| self.prefixes.contains(&hash(j))).map(tokens)
            })
            .max()
            .unwrap_or(0);
        let eligible: Vec<usize> = marks.into_iter().filter(|&m| tokens(m) >= MIN_TOKENS).collect();
        let written = eligible.last().map_or(0, |&last| tokens(last).saturating_sub(read));
        self.prefixes.extend(eligible.into_iter().map(hash));
        CacheUse { read, written }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt of blocks of `sizes` characters (4 a token), the `marked` ones marked.
    fn prompt(sizes: &[usize], marked: &[usize]) -> (String, Vec<BlockEnd>) {
        let mut text = String::new();
        let mut ends = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            text.extend(std::iter::repeat_n(char::from(b'a' + i as u8), *size));
            ends.push(BlockEnd { at: text.len(), marked: marked.contains(&i) });
        }
        (text, ends)
    }

    #[test]
    fn a_breakpoint_writes_its_prefix_and_the_next_turn_reads_it_back() {
        let mut cache = BreakpointCache::default();
        // 2,000 + 2,000 + 400 tokens; marks on the first two.
        let (text, ends) = prompt(&[8_000, 8_000, 1_600], &[0, 1]);
        assert_eq!(cache.account(&text, &ends), CacheUse { read: 0, written: 4_000 });
        assert_eq!(cache.account(&text, &ends), CacheUse { read: 4_000, written: 0 });
        // The next turn marks only its own last block: found by looking back, 4,400 - 4,000 new.
        let (text, ends) = prompt(&[8_000, 8_000, 1_600, 400], &[3]);
        assert_eq!(cache.account(&text, &ends), CacheUse { read: 4_000, written: 500 });
    }

    #[test]
    fn no_mark_no_cache_and_short_prefixes_are_not_cached() {
        let mut cache = BreakpointCache::default();
        let (text, ends) = prompt(&[8_000, 8_000], &[]);
        assert_eq!(cache.account(&text, &ends), CacheUse::default());
        let (text, ends) = prompt(&[4_000, 8_000], &[0]);
        assert_eq!(cache.account(&text, &ends), CacheUse::default(), "1,000 tokens: below the minimum");
        assert_eq!(cache.account(&text, &ends), CacheUse::default());
        let (text, ends) = prompt(&[4_000, 8_000], &[0, 1]);
        assert_eq!(cache.account(&text, &ends), CacheUse { read: 0, written: 3_000 });
    }

    #[test]
    fn a_changed_prefix_misses_and_lookback_is_twenty_blocks() {
        let mut cache = BreakpointCache::default();
        let (text, ends) = prompt(&[8_000, 100], &[0]);
        cache.account(&text, &ends);
        let (mut changed, ends) = prompt(&[8_000, 100], &[1]);
        changed.replace_range(0..1, "z");
        assert_eq!(cache.account(&changed, &ends), CacheUse { read: 0, written: 2_025 });
        // 21 blocks after the cached one, the last mark is too far to find it.
        let mut sizes = vec![8_000];
        sizes.extend([4; 21]);
        let (text, ends) = prompt(&sizes, &[21]);
        assert_eq!(cache.account(&text, &ends).read, 0);
        let (text, ends) = prompt(&sizes[..20], &[19]);
        assert_eq!(cache.account(&text, &ends).read, 2_000);
    }
}
