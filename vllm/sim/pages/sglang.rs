//! The simulated node as SGLang's `/metrics` page (`--enable-metrics`).
//!
//! Names, labels and buckets as `tests/fixtures/engines/sglang.prom` (from SGLang's
//! `srt/metrics/collector.py`): the scheduler's gauges and queue-time histogram carry
//! `model_name`, `engine_type="unified"`, `tp_rank` and `pp_rank`; the tokenizer manager's
//! latency histograms and token counters carry `model_name` and `engine_type` only. As in
//! SGLang, the token and request counters move when a request finishes (the tokenizer manager
//! counts them then), TTFT at the first token, the queue time at admission, and
//! `cache_hit_rate` is that of the last prefill; there is no cache-config or success family.

use super::{Admission, Families, Finished, Load, NodeFacts, Page, Step, Token};
use prometheus::{Gauge, Histogram, IntCounter, IntCounterVec, IntGauge};

const TTFT_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
const ITL_BUCKETS: &[f64] =
    &[0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08];
const E2E_BUCKETS: &[f64] = &[0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0];
const QUEUE_BUCKETS: &[f64] = &[0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0];

/// Handles to the SGLang series the simulated node updates.
pub struct SglangPage {
    families: Families,
    block_size: usize,
    running: IntGauge,
    queued: IntGauge,
    used_tokens: IntGauge,
    token_usage: Gauge,
    gen_throughput: Gauge,
    cache_hit_rate: Gauge,
    queue_time: Histogram,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    prompt_tokens: IntCounter,
    generation_tokens: IntCounter,
    cached_tokens: IntCounterVec,
    requests: IntCounter,
}

impl SglangPage {
    pub fn new(facts: &NodeFacts) -> SglangPage {
        let model = facts.model.as_str();
        let tok = Families::new(&[("model_name", model), ("engine_type", "unified")]);
        let sched = tok.with(&[
            ("model_name", model),
            ("engine_type", "unified"),
            ("tp_rank", "0"),
            ("pp_rank", "0"),
        ]);
        sched
            .int_gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
            .set(facts.kv_tokens() as i64);
        sched.int_gauge(
            "sglang:num_grammar_queue_reqs",
            "The number of requests in the grammar waiting queue.",
        );
        SglangPage {
            block_size: facts.block_size,
            running: sched.int_gauge("sglang:num_running_reqs", "The number of running requests."),
            queued: sched.int_gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
            used_tokens: sched.int_gauge("sglang:num_used_tokens", "The number of used tokens."),
            token_usage: sched.gauge("sglang:token_usage", "The token usage."),
            gen_throughput: sched.gauge("sglang:gen_throughput", "The generation throughput (token/s)."),
            cache_hit_rate: sched.gauge("sglang:cache_hit_rate", "The prefix cache hit rate."),
            queue_time: sched.histogram(
                "sglang:queue_time_seconds",
                "Histogram of queueing time in seconds.",
                QUEUE_BUCKETS,
            ),
            ttft: tok.histogram(
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            ),
            itl: tok.histogram(
                "sglang:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                ITL_BUCKETS,
            ),
            e2e: tok.histogram(
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                E2E_BUCKETS,
            ),
            prompt_tokens: tok
                .int_counter("sglang:prompt_tokens_total", "Number of prefill tokens processed."),
            generation_tokens: tok
                .int_counter("sglang:generation_tokens_total", "Number of generation tokens processed."),
            cached_tokens: tok.int_counter_vec(
                "sglang:cached_tokens_total",
                "Number of cached prompt tokens by source (device/host/storage).",
                &["cache_source"],
            ),
            requests: tok.int_counter("sglang:num_requests_total", "Number of requests processed."),
            families: tok,
        }
    }
}

impl Page for SglangPage {
    fn load(&self, l: &Load) {
        self.running.set(l.running as i64);
        self.queued.set(l.waiting as i64);
        self.used_tokens.set((l.used_blocks * self.block_size) as i64);
        self.token_usage.set(l.kv_usage);
        if l.running == 0 {
            self.gen_throughput.set(0.0);
        }
    }

    fn stepped(&self, s: &Step) {
        if s.secs > 0.0 {
            self.gen_throughput.set(s.scheduled as f64 / s.secs);
        }
    }

    fn admitted(&self, a: &Admission) {
        self.queue_time.observe(a.queue_secs);
        if a.prompt_tokens > 0 {
            self.cache_hit_rate.set(a.cached_tokens as f64 / a.prompt_tokens as f64);
        }
    }

    fn token(&self, t: &Token) {
        match *t {
            Token::First { ttft, .. } => self.ttft.observe(ttft),
            Token::Next { gap } => self.itl.observe(gap),
        }
    }

    fn finished(&self, f: &Finished) {
        self.prompt_tokens.inc_by(f.prompt_tokens as u64);
        self.generation_tokens.inc_by(f.generated as u64);
        self.cached_tokens.with_label_values(&["device"]).inc_by(f.cached_tokens as u64);
        self.requests.inc();
        self.e2e.observe(f.e2e);
    }

    fn encode(&self) -> String {
        self.families.encode()
    }
}
