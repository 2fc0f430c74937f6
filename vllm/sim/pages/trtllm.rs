//! The simulated node as `trtllm-serve`'s Prometheus page, and its JSON iteration stats.
//!
//! Names, help texts and default buckets follow TensorRT-LLM's `tensorrt_llm/metrics/
//! collector.py` (`MetricsCollector`), labels `model_name` and `engine_type` as
//! `tests/fixtures/engines/trtllm.prom`. `trtllm-serve` mounts this page at
//! `/prometheus/metrics`; its `/metrics` answers a JSON array of the engine's iteration
//! statistics ([`Page::iteration_stats`], camelCase as the executor's `IterationStats`).
//! Per-request series move when a request finishes (the collector logs them from the
//! finished request's timings); the iteration gauges after every scheduler step.

use super::vllm::{ITL_BUCKETS, REQUEST_BUCKETS, TTFT_BUCKETS};
use super::{Admission, Families, Finished, Load, NodeFacts, Page, Step};
use prometheus::{Gauge, Histogram, IntCounter, IntCounterVec, IntGauge};
use serde_json::{json, Value};
use std::sync::Mutex;

const PREFILL_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0,
    2560.0,
];

/// The latest iteration, for the JSON stats.
#[derive(Default)]
struct Iteration {
    iter: u64,
    latency_ms: f64,
    load: Load,
    step: Step,
    completed: u64,
    lookups: u64,
    hits: u64,
}

/// Handles to the TensorRT-LLM series the simulated node updates.
pub struct TrtllmPage {
    families: Families,
    num_gpu_blocks: usize,
    block_size: usize,
    max_num_seqs: usize,
    last: Mutex<Iteration>,
    success: IntCounterVec,
    e2e: Histogram,
    ttft: Histogram,
    tpot: Histogram,
    queue_time: Histogram,
    prefill_time: Histogram,
    prompt_tokens: IntCounter,
    generation_tokens: IntCounter,
    cached_tokens: IntCounter,
    completed: IntCounter,
    hit_rate: Gauge,
    utilization: Gauge,
    running: IntGauge,
    waiting: IntGauge,
    free_blocks: IntGauge,
    used_blocks: IntGauge,
    context: IntGauge,
    generation: IntGauge,
    scheduled: IntGauge,
}

impl TrtllmPage {
    pub fn new(facts: &NodeFacts) -> TrtllmPage {
        let f = Families::new(&[("model_name", facts.model.as_str()), ("engine_type", "trtllm")]);
        let fixed = |name: &str, help: &str, v: usize| f.int_gauge(name, help).set(v as i64);
        fixed("trtllm_max_num_active_requests", "Maximum number of active requests", facts.max_num_seqs);
        fixed("trtllm_kv_cache_max_blocks", "Maximum number of KV cache blocks", facts.num_gpu_blocks);
        fixed("trtllm_kv_cache_tokens_per_block", "Number of tokens per KV cache block", facts.block_size);
        let hist = |name: &str, help: &str, buckets: &[f64]| f.histogram(name, help, buckets);
        TrtllmPage {
            num_gpu_blocks: facts.num_gpu_blocks,
            block_size: facts.block_size,
            max_num_seqs: facts.max_num_seqs,
            last: Mutex::new(Iteration::default()),
            success: f.int_counter_vec(
                "trtllm_request_success_total",
                "Count of successfully processed requests.",
                &["finished_reason"],
            ),
            e2e: hist(
                "trtllm_e2e_request_latency_seconds",
                "Histogram of end to end request latency in seconds.",
                REQUEST_BUCKETS,
            ),
            ttft: hist(
                "trtllm_time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            ),
            tpot: hist(
                "trtllm_time_per_output_token_seconds",
                "Histogram of time per output token in seconds.",
                ITL_BUCKETS,
            ),
            queue_time: hist(
                "trtllm_request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                REQUEST_BUCKETS,
            ),
            prefill_time: hist(
                "trtllm_request_prefill_time_seconds",
                "Histogram of prefill (context) phase duration in seconds (first_token_time - first_scheduled_time).",
                PREFILL_BUCKETS,
            ),
            prompt_tokens: f.int_counter(
                "trtllm_prompt_tokens_total",
                "Cumulative number of prompt (input) tokens processed.",
            ),
            generation_tokens: f.int_counter(
                "trtllm_generation_tokens_total",
                "Cumulative number of generation (output) tokens produced.",
            ),
            cached_tokens: f.int_counter(
                "trtllm_prompt_cached_tokens_total",
                "Process-lifetime total prompt tokens served from KV cache.",
            ),
            completed: f.int_counter(
                "trtllm_num_requests_completed_total",
                "Total number of completed requests across iterations",
            ),
            hit_rate: f.gauge("trtllm_kv_cache_hit_rate", "KV cache hit rate"),
            utilization: f.gauge("trtllm_kv_cache_utilization", "KV cache utilization"),
            running: f.int_gauge("trtllm_num_requests_running", "Number of active requests"),
            waiting: f.int_gauge("trtllm_num_requests_waiting", "Number of queued requests"),
            free_blocks: f.int_gauge("trtllm_kv_cache_free_blocks", "Number of free KV cache blocks"),
            used_blocks: f.int_gauge("trtllm_kv_cache_used_blocks", "Number of used KV cache blocks"),
            context: f.int_gauge("trtllm_num_context_requests", "Number of context (prefill) requests"),
            generation: f.int_gauge("trtllm_num_generation_requests", "Number of generation (decode) requests"),
            scheduled: f.int_gauge("trtllm_num_scheduled_requests", "Number of scheduled requests"),
            families: f,
        }
    }
}

impl Page for TrtllmPage {
    fn load(&self, l: &Load) {
        self.running.set(l.running as i64);
        self.waiting.set(l.waiting as i64);
        self.utilization.set(l.kv_usage);
        self.used_blocks.set(l.used_blocks as i64);
        self.free_blocks.set(self.num_gpu_blocks.saturating_sub(l.used_blocks) as i64);
        self.last.lock().expect("iteration").load = *l;
    }

    fn stepped(&self, s: &Step) {
        self.scheduled.set(s.scheduled as i64);
        self.context.set(s.prefilling as i64);
        self.generation.set(s.scheduled.saturating_sub(s.prefilling) as i64);
        let mut it = self.last.lock().expect("iteration");
        it.iter += 1;
        it.latency_ms = s.secs * 1000.0;
        it.step = *s;
        it.completed = 0;
    }

    fn admitted(&self, a: &Admission) {
        let mut it = self.last.lock().expect("iteration");
        it.lookups += a.prompt_tokens as u64;
        it.hits += a.cached_tokens as u64;
        if it.lookups > 0 {
            self.hit_rate.set(it.hits as f64 / it.lookups as f64);
        }
    }

    fn finished(&self, f: &Finished) {
        self.success.with_label_values(&[f.reason.as_str()]).inc();
        self.e2e.observe(f.e2e);
        self.ttft.observe(f.ttft);
        if f.generated > 1 {
            self.tpot.observe(f.decode_secs / (f.generated - 1) as f64);
        }
        self.queue_time.observe(f.queue_secs);
        self.prefill_time.observe(f.ttft - f.queue_secs);
        self.prompt_tokens.inc_by(f.prompt_tokens as u64);
        self.generation_tokens.inc_by(f.generated as u64);
        self.cached_tokens.inc_by(f.cached_tokens as u64);
        self.completed.inc();
        self.last.lock().expect("iteration").completed += 1;
    }

    fn encode(&self) -> String {
        self.families.encode()
    }

    fn iteration_stats(&self) -> Option<Value> {
        let it = self.last.lock().expect("iteration");
        if it.iter == 0 {
            return Some(json!([]));
        }
        let hit_rate = if it.lookups > 0 { it.hits as f64 / it.lookups as f64 } else { 0.0 };
        Some(json!([{
            "iter": it.iter,
            "iterLatencyMS": it.latency_ms,
            "numActiveRequests": it.load.running,
            "numQueuedRequests": it.load.waiting,
            "numCompletedRequests": it.completed,
            "maxNumActiveRequests": self.max_num_seqs,
            "kvCacheStats": {
                "maxNumBlocks": self.num_gpu_blocks,
                "freeNumBlocks": self.num_gpu_blocks.saturating_sub(it.load.used_blocks),
                "usedNumBlocks": it.load.used_blocks,
                "tokensPerBlock": self.block_size,
                "cacheHitRate": hit_rate,
            },
            "inflightBatchingStats": {
                "numScheduledRequests": it.step.scheduled,
                "numContextRequests": it.step.prefilling,
                "numGenRequests": it.step.scheduled.saturating_sub(it.step.prefilling),
                "numCtxTokens": it.step.prefill_tokens,
            },
        }]))
    }
}
