//! The vLLM `/metrics` exposition of the simulated node, under vLLM's real series names.
//!
//! Spillway's telemetry loop scrapes these exact names, so they must match what real vLLM
//! prints (see `tests/fixtures/vllm/*.prom`): `model_name` (and, on the V1 engine, `engine`)
//! labels, `_total` already part of counter names, histograms with vLLM's buckets.
//! `--legacy-metrics` switches to the V0-era names (`vllm:gpu_cache_usage_perc`,
//! `vllm:time_per_output_token_seconds`) without the `engine` label, so that the router's
//! handling of both generations can be tested. Families are registered once, here.

use super::{Admission, Families, Finished, Load, NodeFacts, Page, Token};
use prometheus::{Gauge, Histogram, IntCounter, IntCounterVec, IntGauge};

pub(super) const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
];
pub(super) const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
pub(super) const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
];

/// Handles to every series the simulated vLLM engine updates.
pub struct VllmPage {
    families: Families,
    running: IntGauge,
    waiting: IntGauge,
    kv_usage: Gauge,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    queue_time: Histogram,
    prompt_tokens: IntCounter,
    generation_tokens: IntCounter,
    prefix_queries: IntCounter,
    prefix_hits: IntCounter,
    success: IntCounterVec,
    preemptions: IntCounter,
}

impl VllmPage {
    /// Register all families for the node; `facts.legacy_names` selects the V0 names.
    pub fn new(facts: &NodeFacts) -> VllmPage {
        let model = facts.model.as_str();
        let f = if facts.legacy_names {
            Families::new(&[("model_name", model)])
        } else {
            Families::new(&[("model_name", model), ("engine", "0")])
        };
        let (kv_name, itl_name) = if facts.legacy_names {
            ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds")
        } else {
            ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds")
        };
        let success = f.int_counter_vec(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            &["finished_reason"],
        );
        for reason in ["stop", "length", "abort"] {
            success.with_label_values(&[reason]);
        }
        let info = f.with(&[]).gauge_vec(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            &["block_size", "cache_dtype", "enable_prefix_caching", "num_gpu_blocks"],
        );
        info.with_label_values(&[
            facts.block_size.to_string().as_str(),
            "auto",
            if facts.prefix_caching { "True" } else { "False" },
            facts.num_gpu_blocks.to_string().as_str(),
        ])
        .set(1.0);

        VllmPage {
            running: f
                .int_gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
            waiting: f.int_gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
            kv_usage: f.gauge(kv_name, "KV-cache usage. 1 means 100 percent usage."),
            ttft: f.histogram(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            ),
            itl: f.histogram(itl_name, "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
            e2e: f.histogram(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                REQUEST_BUCKETS,
            ),
            queue_time: f.histogram(
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                REQUEST_BUCKETS,
            ),
            prompt_tokens: f.int_counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
            generation_tokens: f
                .int_counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
            prefix_queries: f.int_counter(
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
            ),
            prefix_hits: f.int_counter(
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
            ),
            preemptions: f.int_counter(
                "vllm:num_preemptions_total",
                "Cumulative number of preemption from the engine.",
            ),
            success,
            families: f,
        }
    }
}

impl Page for VllmPage {
    fn load(&self, l: &Load) {
        self.running.set(l.running as i64);
        self.waiting.set(l.waiting as i64);
        self.kv_usage.set(l.kv_usage);
    }

    fn admitted(&self, a: &Admission) {
        self.queue_time.observe(a.queue_secs);
        self.prompt_tokens.inc_by(a.prompt_tokens as u64);
        self.prefix_queries.inc_by(a.prompt_tokens as u64);
        self.prefix_hits.inc_by(a.cached_tokens as u64);
    }

    fn preempted(&self, n: usize) {
        self.preemptions.inc_by(n as u64);
    }

    fn token(&self, t: &Token) {
        self.generation_tokens.inc();
        match *t {
            Token::First { ttft, .. } => self.ttft.observe(ttft),
            Token::Next { gap } => self.itl.observe(gap),
        }
    }

    fn finished(&self, f: &Finished) {
        self.success.with_label_values(&[f.reason.as_str()]).inc();
        self.e2e.observe(f.e2e);
    }

    fn aborted(&self) {
        self.success.with_label_values(&["abort"]).inc();
    }

    fn encode(&self) -> String {
        self.families.encode()
    }
}
