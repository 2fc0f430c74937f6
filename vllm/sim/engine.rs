//! The vLLM performance model, as a plain state machine with no I/O and no clock.
//!
//! `EngineCore::step` is one scheduler iteration of a continuous-batching engine: make room in
//! the KV cache for every running sequence's next token (preempting the newest sequences when
//! blocks run out, as vLLM's recompute preemption does), admit waiting sequences in FIFO order
//! while there is a free seat (`max_num_seqs`) and enough free KV blocks, charge prefill time
//! for the prompt tokens that the prefix cache did not already hold, and emit one token for
//! every running sequence. It returns what happened and how long the step took; the async
//! driver in `engine_loop.rs` sleeps that long and forwards the tokens. Keeping it pure keeps
//! admission, KV accounting and step time exactly testable.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Engine sizing and speed (the `--max-num-seqs`, `--num-gpu-blocks`, … flags).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub max_num_seqs: usize,
    pub num_gpu_blocks: usize,
    pub block_size: usize,
    pub prefill_us_per_token: f64,
    pub itl_base_ms: f64,
    pub itl_per_seq_ms: f64,
    pub prefix_caching: bool,
}

/// Why a sequence finished (vLLM's `finished_reason` label values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One request as the engine sees it.
#[derive(Clone, Debug)]
pub struct SeqSpec {
    pub id: u64,
    pub prompt_tokens: u32,
    /// Chained hashes of the prompt's full blocks (see `text::block_hashes`).
    pub block_hashes: Vec<u64>,
    /// Tokens to generate.
    pub output_tokens: u32,
    /// True when `output_tokens` came from the request's `max_tokens` (finish = length).
    pub limited: bool,
}

#[derive(Debug)]
struct Seq {
    spec: SeqSpec,
    generated: u32,
    shared: Vec<u64>,
    private: usize,
}

impl Seq {
    fn context(&self) -> usize {
        (self.spec.prompt_tokens + self.generated) as usize
    }
    fn held(&self) -> usize {
        self.shared.len() + self.private
    }
}

#[derive(Debug)]
struct CacheEntry {
    refs: u32,
    last_used: u64,
}

/// A sequence admitted (or re-admitted after preemption) in this step.
#[derive(Clone, Debug, PartialEq)]
pub struct Admitted {
    pub id: u64,
    pub prompt_tokens: u32,
    /// Prompt tokens found in the prefix cache (not re-prefilled).
    pub cached_tokens: u32,
    pub readmitted: bool,
}

/// What one step did.
#[derive(Debug, Default)]
pub struct StepOutput {
    pub admitted: Vec<Admitted>,
    /// Sequences that produced one token, in running order.
    pub tokens: Vec<u64>,
    pub finished: Vec<(u64, FinishReason)>,
    pub preempted: Vec<u64>,
    pub duration: Duration,
}

/// The scheduler and KV-cache state of one simulated engine.
#[derive(Debug)]
pub struct EngineCore {
    cfg: EngineConfig,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    cache: HashMap<u64, CacheEntry>,
    private_used: usize,
    shared_used: usize,
    tick: u64,
}

impl EngineCore {
    pub fn new(cfg: EngineConfig) -> EngineCore {
        EngineCore {
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cache: HashMap::new(),
            private_used: 0,
            shared_used: 0,
            tick: 0,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.cfg.block_size)
    }

    /// Whether a request of this size could ever run on an empty engine.
    pub fn fits_ever(&self, prompt_tokens: u32, output_tokens: u32) -> bool {
        self.blocks_for((prompt_tokens + output_tokens) as usize) <= self.cfg.num_gpu_blocks
    }

    /// Queue a request at the back of the FIFO waiting queue.
    pub fn submit(&mut self, spec: SeqSpec) {
        self.waiting.push_back(Seq { spec, generated: 0, shared: Vec::new(), private: 0 });
    }

    /// Drop a request wherever it is (client went away), freeing its blocks.
    pub fn abort(&mut self, id: u64) {
        if let Some(i) = self.running.iter().position(|s| s.spec.id == id) {
            let s = self.running.remove(i);
            self.release(&s);
        } else {
            self.waiting.retain(|s| s.spec.id != id);
        }
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }
    /// Blocks held by running sequences.
    pub fn used_blocks(&self) -> usize {
        self.private_used + self.shared_used
    }
    /// KV-cache usage in [0, 1] (`vllm:kv_cache_usage_perc`).
    pub fn kv_usage(&self) -> f64 {
        self.used_blocks() as f64 / self.cfg.num_gpu_blocks.max(1) as f64
    }

    fn available(&self) -> usize {
        self.cfg.num_gpu_blocks.saturating_sub(self.used_blocks())
    }

    /// Make `n` physical blocks free, evicting least recently used unreferenced cached blocks.
    fn make_physical_room(&mut self, n: usize) {
        while self.cfg.num_gpu_blocks - self.private_used - self.cache.len() < n {
            let victim = self
                .cache
                .iter()
                .filter(|(_, e)| e.refs == 0)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(h, _)| *h);
            match victim {
                Some(h) => {
                    self.cache.remove(&h);
                }
                None => break,
            }
        }
    }

    fn release(&mut self, s: &Seq) {
        self.private_used -= s.private;
        for h in &s.shared {
            if let Some(e) = self.cache.get_mut(h) {
                e.refs -= 1;
                if e.refs == 0 {
                    self.shared_used -= 1;
                }
            }
        }
    }

    /// Try to admit `s`; returns the cached prompt tokens, or gives `s` back.
    fn try_admit(&mut self, mut s: Seq) -> Result<(Seq, u32), Seq> {
        let bs = self.cfg.block_size;
        let total = self.blocks_for(s.context() + 1);
        let hashes: &[u64] = if self.cfg.prefix_caching { &s.spec.block_hashes } else { &[] };
        let mut hits = hashes.iter().take_while(|h| self.cache.contains_key(h)).count();
        if hits * bs >= s.context() {
            hits = hits.saturating_sub(1); // at least one token is always computed
        }
        let activate = hashes.iter().filter(|h| self.cache.get(h).is_none_or(|e| e.refs == 0)).count();
        let private = total.saturating_sub(hashes.len());
        if activate + private > self.available() {
            return Err(s);
        }
        self.tick += 1;
        for h in hashes {
            match self.cache.get_mut(h) {
                Some(e) => {
                    if e.refs == 0 {
                        self.shared_used += 1;
                    }
                    e.refs += 1;
                    e.last_used = self.tick;
                }
                None => {
                    self.make_physical_room(1);
                    self.cache.insert(*h, CacheEntry { refs: 1, last_used: self.tick });
                    self.shared_used += 1;
                }
            }
        }
        self.make_physical_room(private);
        self.private_used += private;
        s.shared = hashes.to_vec();
        s.private = private;
        Ok((s, (hits * bs) as u32))
    }

    /// Ensure the running sequence at `i` has a slot for its next token.
    fn grow(&mut self, i: usize) -> bool {
        let need = self.blocks_for(self.running[i].context() + 1);
        if need <= self.running[i].held() {
            return true;
        }
        if self.available() == 0 {
            return false;
        }
        self.make_physical_room(1);
        self.private_used += 1;
        self.running[i].private += 1;
        true
    }

    /// Run one scheduler iteration.
    pub fn step(&mut self) -> StepOutput {
        let mut out = StepOutput::default();
        // 1. Room for every running sequence's next token; preempt the newest if needed.
        let mut i = 0;
        while i < self.running.len() {
            if self.grow(i) {
                i += 1;
                continue;
            }
            let victim = self.running.pop().expect("running is not empty");
            self.release(&victim);
            out.preempted.push(victim.spec.id);
            self.waiting.push_front(Seq { shared: Vec::new(), private: 0, ..victim });
        }
        // 2. FIFO admission (no admission in a step that had to preempt).
        let mut prefill_tokens = 0u64;
        while out.preempted.is_empty() && self.running.len() < self.cfg.max_num_seqs {
            let Some(s) = self.waiting.pop_front() else { break };
            match self.try_admit(s) {
                Ok((s, cached)) => {
                    prefill_tokens += (s.context() as u64).saturating_sub(cached as u64);
                    out.admitted.push(Admitted {
                        id: s.spec.id,
                        prompt_tokens: s.spec.prompt_tokens,
                        cached_tokens: cached,
                        readmitted: s.generated > 0,
                    });
                    self.running.push(s);
                }
                Err(s) => {
                    self.waiting.push_front(s);
                    break;
                }
            }
        }
        if self.running.is_empty() {
            return out;
        }
        // 3. Step time: decode cost grows with the batch, plus prefill of uncached tokens.
        let ms = self.cfg.itl_base_ms + self.cfg.itl_per_seq_ms * self.running.len() as f64;
        let us = ms * 1000.0 + self.cfg.prefill_us_per_token * prefill_tokens as f64;
        out.duration = Duration::from_micros(us.max(0.0) as u64);
        // 4. One token per running sequence; finish those that are done.
        let mut k = 0;
        while k < self.running.len() {
            let s = &mut self.running[k];
            s.generated += 1;
            out.tokens.push(s.spec.id);
            if s.generated >= s.spec.output_tokens {
                let reason = if s.spec.limited { FinishReason::Length } else { FinishReason::Stop };
                let s = self.running.remove(k);
                self.release(&s);
                out.finished.push((s.spec.id, reason));
            } else {
                k += 1;
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
