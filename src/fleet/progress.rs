//! How far along each of the router's own requests on a node is: what it asked (the prompt the
//! node must prefill, `max_tokens`), when it was sent, whether its first token has come and how
//! many tokens it has streamed since. The router knows these exactly, unlike the engine's
//! gauges, so when a node is full it can predict when a slot frees there (`fleet::slot_free`)
//! and whether waiting for it beats paying a hosted provider.
//!
//! Each node also learns how long its answers usually are (a moving average of the output
//! tokens of the router's requests that ended there), since `max_tokens` is a cap, not a
//! length: coding agents ask for 32 000 and get a few hundred.
//!
//! A request's progress is updated with atomics as its events pass (no lock per token); the
//! node's list of them is locked only when a request starts or ends and when planning reads it
//! for a full node.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::time::Instant;

use super::prefix_cache::PrefixKeys;
use crate::canonical::Event;

/// One request in flight, as its events update it.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    prefill_tokens: AtomicU32,
    max_tokens: AtomicU32,
    streamed: AtomicU32,
    /// Microseconds from `started` to the first token, plus one; 0 while none has come.
    first_token_us: AtomicU64,
    /// What the node may hold of it, for the node to learn from when it ends.
    touch: OnceLock<Touch>,
    /// Prompt tokens the engine reported cached (`u32::MAX`: no usage yet).
    reported_cached: AtomicU32,
}

/// What a request may find in its node's prefix cache (`fleet::prefix_cache`), as dispatch
/// predicted it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Touch {
    pub keys: PrefixKeys,
    pub prompt_tokens: u32,
    pub predicted_cached: u32,
    /// The node's engine restarts when it was sent (`NodeSignals::restarts`).
    pub generation: u32,
}

/// A plain copy of one request's progress, for planning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Running {
    pub started: Instant,
    /// Prompt tokens the node must prefill for it (those it does not have cached).
    pub prefill_tokens: u32,
    /// Its output cap (0: unknown).
    pub max_tokens: u32,
    /// Output tokens streamed so far.
    pub streamed: u32,
    pub first_token: bool,
}

impl Progress {
    pub(crate) fn new(started: Instant) -> Progress {
        Progress {
            started,
            prefill_tokens: AtomicU32::new(0),
            max_tokens: AtomicU32::new(0),
            streamed: AtomicU32::new(0),
            first_token_us: AtomicU64::new(0),
            touch: OnceLock::new(),
            reported_cached: AtomicU32::new(u32::MAX),
        }
    }

    /// What the node may hold of the request (set once, when it is sent).
    pub fn touch(&self, touch: Touch) {
        let _ = self.touch.set(touch);
    }

    /// Once it has ended: what the node held of it as predicted, the tokens it now holds
    /// (prompt and answer), and the cached tokens the engine reported; `None` when it was not
    /// described or no token came (the node may not have prefilled it).
    pub(crate) fn learnt(&self) -> Option<(Touch, u32, Option<u32>)> {
        let touch = *self.touch.get()?;
        if self.first_token_us.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let reported = Some(self.reported_cached.load(Ordering::Relaxed)).filter(|&n| n != u32::MAX);
        Some((touch, touch.prompt_tokens.saturating_add(self.streamed()), reported))
    }

    /// What the request asks of the node.
    pub fn describe(&self, prefill_tokens: u32, max_tokens: u32) {
        self.prefill_tokens.store(prefill_tokens, Ordering::Relaxed);
        self.max_tokens.store(max_tokens, Ordering::Relaxed);
    }

    /// An event of its answer passed: output counts one token (engines stream one a chunk);
    /// the usage, when it comes, gives the exact count.
    pub fn observe(&self, event: &Event) {
        if event.is_output() {
            self.streamed.fetch_add(1, Ordering::Relaxed);
            // The clock is read for the first token only.
            if self.first_token_us.load(Ordering::Relaxed) == 0 {
                let us = self.started.elapsed().as_micros() as u64 + 1;
                let _ = self.first_token_us.compare_exchange(0, us, Ordering::Relaxed, Ordering::Relaxed);
            }
        } else if let Event::Usage(usage) = event {
            self.streamed.fetch_max(usage.output_tokens, Ordering::Relaxed);
            self.reported_cached.store(usage.cached_input_tokens, Ordering::Relaxed);
        }
    }

    pub fn streamed(&self) -> u32 {
        self.streamed.load(Ordering::Relaxed)
    }

    pub fn read(&self) -> Running {
        Running {
            started: self.started,
            prefill_tokens: self.prefill_tokens.load(Ordering::Relaxed),
            max_tokens: self.max_tokens.load(Ordering::Relaxed),
            streamed: self.streamed.load(Ordering::Relaxed),
            first_token: self.first_token_us.load(Ordering::Relaxed) > 0,
        }
    }
}

/// The router's requests in flight on a node, and the usual length of its answers.
pub type NodeRunning = (Vec<Running>, Option<f64>);

/// A node's requests in flight and the usual length of its answers.
#[derive(Debug, Default)]
pub(crate) struct NodeProgress {
    running: Mutex<Vec<Arc<Progress>>>,
    /// Mean output tokens of recent answers (f64 bits; 0: none yet).
    typical_output: AtomicU64,
}

/// Weight of the newest answer in the node's mean length.
const LENGTH_WEIGHT: f64 = 0.2;

impl NodeProgress {
    pub(crate) fn start(&self, progress: Arc<Progress>) {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).push(progress);
    }

    /// A request ended; an answer that streamed anything teaches the node's usual length.
    pub(crate) fn end(&self, progress: &Arc<Progress>) {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| !Arc::ptr_eq(p, progress));
        let streamed = f64::from(progress.streamed());
        if streamed > 0.0 {
            let _ = self.typical_output.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                let old = f64::from_bits(bits);
                let new = if old > 0.0 { old + LENGTH_WEIGHT * (streamed - old) } else { streamed };
                Some(new.to_bits())
            });
        }
    }

    /// Copies of the requests in flight, and the usual answer length if one is known.
    pub(crate) fn read(&self) -> NodeRunning {
        let running =
            self.running.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|p| p.read()).collect();
        let typical = f64::from_bits(self.typical_output.load(Ordering::Relaxed));
        (running, (typical > 0.0).then_some(typical))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Usage;

    #[tokio::test(start_paused = true)]
    async fn progress_counts_output_and_takes_the_usage_as_exact() {
        let node = NodeProgress::default();
        let p = Arc::new(Progress::new(Instant::now()));
        p.describe(900, 64);
        node.start(Arc::clone(&p));
        assert!(!node.read().0[0].first_token);
        p.observe(&Event::TextDelta("a".into()));
        p.observe(&Event::TextDelta("b".into()));
        let (running, typical) = node.read();
        assert_eq!(
            (running[0].prefill_tokens, running[0].max_tokens, running[0].streamed, running[0].first_token),
            (900, 64, 2, true)
        );
        assert_eq!(typical, None);
        p.observe(&Event::Usage(Usage { output_tokens: 10, ..Usage::default() }));
        node.end(&p);
        assert_eq!(node.read(), (Vec::new(), Some(10.0)));
        // The next answer of 20 moves the mean a fifth of the way.
        let q = Arc::new(Progress::new(Instant::now()));
        node.start(Arc::clone(&q));
        q.observe(&Event::Usage(Usage { output_tokens: 20, ..Usage::default() }));
        node.end(&q);
        assert_eq!(node.read().1, Some(12.0));
        // One that streamed nothing (refused, cancelled before output) teaches nothing.
        let r = Arc::new(Progress::new(Instant::now()));
        node.start(Arc::clone(&r));
        node.end(&r);
        assert_eq!(node.read().1, Some(12.0));
    }
}
