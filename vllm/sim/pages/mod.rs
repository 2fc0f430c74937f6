//! What a simulated self-hosted node shows of itself, per serving engine (`--engine`): one
//! Prometheus page per engine, every one fed by the same engine model.
//!
//! The engine loop (`engine_loop.rs`) reports what happens (a request arrives, is admitted,
//! gets a token, finishes; the scheduler steps; the load changes) to a [`Page`], and each
//! engine's page turns those facts into that engine's real series, under its own names,
//! labels, buckets and counting points, and lacks what that engine lacks (llama.cpp has no
//! latency histograms, TGI no TTFT). The router's readers in `src/fleet/engines/` and the
//! recorded pages in `tests/fixtures/engines/` are the reference for names. `info.rs` holds
//! the JSON identity endpoints (`/version`, `/props`, `/info`); `families.rs` the shared
//! registration of Prometheus families.

mod families;
pub mod info;
pub mod llamacpp;
pub mod sglang;
pub mod tgi;
pub mod trtllm;
pub mod vllm;

use super::engine::FinishReason;
use crate::fleet::engines::Engine;
use std::sync::Arc;

pub use families::Families;

/// The node's fixed sizing, as the pages and identity endpoints print it.
#[derive(Clone, Debug)]
pub struct NodeFacts {
    pub model: String,
    pub max_num_seqs: usize,
    pub num_gpu_blocks: usize,
    pub block_size: usize,
    pub prefix_caching: bool,
    /// vLLM only: the V0-era names (`--legacy-metrics`).
    pub legacy_names: bool,
}

impl NodeFacts {
    /// Tokens the KV cache holds when full.
    pub fn kv_tokens(&self) -> usize {
        self.num_gpu_blocks * self.block_size
    }
}

/// The scheduler's state after a change.
#[derive(Clone, Copy, Debug, Default)]
pub struct Load {
    pub running: usize,
    pub waiting: usize,
    pub used_blocks: usize,
    /// `used_blocks` over the GPU's blocks, in [0, 1].
    pub kv_usage: f64,
}

/// One scheduler iteration that ran sequences.
#[derive(Clone, Copy, Debug, Default)]
pub struct Step {
    pub secs: f64,
    /// Sequences that got one token (the batch).
    pub scheduled: usize,
    /// Sequences admitted (prefilled) in this step.
    pub prefilling: usize,
    /// Prompt tokens prefilled in this step (not found in the prefix cache).
    pub prefill_tokens: u64,
}

/// A request admitted for the first time (not a re-admission after preemption).
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub queue_secs: f64,
}

/// A token handed to its request.
#[derive(Clone, Copy, Debug)]
pub enum Token {
    /// The first: time since arrival, and since admission (the prefill).
    First { ttft: f64, prefill_secs: f64, prompt_tokens: u32, cached_tokens: u32 },
    /// A later one: time since the previous token.
    Next { gap: f64 },
}

/// A request that finished (its last token is out).
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    pub reason: FinishReason,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub generated: u32,
    /// Arrival to last token.
    pub e2e: f64,
    pub queue_secs: f64,
    pub ttft: f64,
    /// First token to last.
    pub decode_secs: f64,
}

/// One engine's view of the simulated node. Every hook but [`Page::load`] and
/// [`Page::encode`] may be ignored by an engine that does not count that fact.
pub trait Page: Send + Sync {
    /// A request reached the engine (it waits until admitted).
    fn arrived(&self, _prompt_tokens: u32, _max_tokens: u32) {}
    /// Running, waiting and KV use changed.
    fn load(&self, load: &Load);
    fn stepped(&self, _step: &Step) {}
    fn admitted(&self, _a: &Admission) {}
    fn preempted(&self, _n: usize) {}
    fn token(&self, _t: &Token) {}
    fn finished(&self, _f: &Finished) {}
    /// A request's client went away before it finished.
    fn aborted(&self) {}
    /// The Prometheus text exposition.
    fn encode(&self) -> String;
    /// TensorRT-LLM only: the iteration statistics that `trtllm-serve` answers on `/metrics`.
    fn iteration_stats(&self) -> Option<serde_json::Value> {
        None
    }
}

/// The page of `engine` for a node of `facts`.
pub fn page(engine: Engine, facts: &NodeFacts) -> Arc<dyn Page> {
    match engine {
        Engine::Vllm => Arc::new(vllm::VllmPage::new(facts)),
        Engine::Sglang => Arc::new(sglang::SglangPage::new(facts)),
        Engine::Llamacpp => Arc::new(llamacpp::LlamacppPage::new(facts)),
        Engine::Trtllm => Arc::new(trtllm::TrtllmPage::new(facts)),
        Engine::Tgi => Arc::new(tgi::TgiPage::new(facts)),
    }
}

/// Where `engine`'s server answers with Prometheus text: where the router reads it.
pub fn metrics_path(engine: Engine) -> &'static str {
    crate::fleet::engines::info::metrics_path(Some(engine))
}

/// Every page, fed the same facts, reads back through the router's reader for its engine.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::engines::{detect, read};

    fn facts() -> NodeFacts {
        NodeFacts {
            model: "m".into(),
            max_num_seqs: 2,
            num_gpu_blocks: 100,
            block_size: 16,
            prefix_caching: true,
            legacy_names: false,
        }
    }

    /// Three arrive, two run, one finishes after two tokens.
    fn feed(p: &dyn Page) {
        for _ in 0..3 {
            p.arrived(32, 2);
        }
        p.load(&Load { running: 2, waiting: 1, used_blocks: 10, kv_usage: 0.1 });
        for _ in 0..2 {
            p.admitted(&Admission { prompt_tokens: 32, cached_tokens: 16, queue_secs: 0.01 });
        }
        p.stepped(&Step { secs: 0.02, scheduled: 2, prefilling: 2, prefill_tokens: 32 });
        let first = Token::First { ttft: 0.03, prefill_secs: 0.02, prompt_tokens: 32, cached_tokens: 16 };
        p.token(&first);
        p.token(&first);
        p.token(&Token::Next { gap: 0.01 });
        let reason = FinishReason::Stop;
        let (e2e, queue_secs, ttft, decode_secs) = (0.04, 0.01, 0.03, 0.01);
        let f = Finished {
            reason,
            prompt_tokens: 32,
            cached_tokens: 16,
            generated: 2,
            e2e,
            queue_secs,
            ttft,
            decode_secs,
        };
        p.finished(&f);
    }

    #[test]
    fn each_page_is_its_engines_and_reads_back() {
        for engine in Engine::ALL {
            let p = page(engine, &facts());
            feed(p.as_ref());
            let text = p.encode();
            assert_eq!(detect(&text), Some(engine), "{text}");
            let s = read(engine, &text).unwrap();
            assert_eq!((s.running, s.waiting), (Some(2.0), Some(1.0)), "{engine}");
            assert!(s.generation_tokens.is_some_and(|g| g > 0.0), "{engine}: {s:?}");
            let lacks_ttft = matches!(engine, Engine::Llamacpp | Engine::Tgi);
            assert_eq!(s.ttft.is_none(), lacks_ttft, "{engine}");
            assert_eq!(p.iteration_stats().is_some(), engine == Engine::Trtllm, "{engine}");
        }
    }
}
