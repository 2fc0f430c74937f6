//! The vLLM `/metrics` exposition of the simulated node, under vLLM's real series names.
//!
//! Spillway's telemetry loop scrapes these exact names, so they must match what real vLLM
//! prints (see `shared/fixtures/vllm/*.prom`): `model_name` (and, on the V1 engine, `engine`)
//! labels, `_total` already part of counter names, histograms with vLLM's buckets.
//! `--legacy-metrics` switches to the V0-era names (`vllm:gpu_cache_usage_perc`,
//! `vllm:time_per_output_token_seconds`) without the `engine` label, so that the router's
//! handling of both generations can be tested. Families are registered once, here.

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
];

/// Handles to every series the simulated engine updates.
pub struct SimMetrics {
    registry: Registry,
    pub running: IntGauge,
    pub waiting: IntGauge,
    pub kv_usage: Gauge,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue_time: Histogram,
    pub prompt_tokens: IntCounter,
    pub generation_tokens: IntCounter,
    pub prefix_queries: IntCounter,
    pub prefix_hits: IntCounter,
    pub success: IntCounterVec,
    pub preemptions: IntCounter,
}

/// Settings that show up in `vllm:cache_config_info`.
pub struct CacheInfo {
    pub num_gpu_blocks: usize,
    pub block_size: usize,
    pub prefix_caching: bool,
}

impl SimMetrics {
    /// Register all families for `model`; `legacy` selects the V0 names.
    pub fn new(model: &str, legacy: bool, cache: &CacheInfo) -> SimMetrics {
        let registry = Registry::new();
        let opts = |name: &str, help: &str| {
            let o = Opts::new(name, help).const_label("model_name", model);
            if legacy {
                o
            } else {
                o.const_label("engine", "0")
            }
        };
        let hist = |name: &str, help: &str, buckets: &[f64]| {
            let o = opts(name, help);
            let h = Histogram::with_opts(HistogramOpts::from(o).buckets(buckets.to_vec()))
                .expect("valid histogram");
            registry.register(Box::new(h.clone())).expect("register once");
            h
        };
        let int_gauge = |name: &str, help: &str| {
            let g = IntGauge::with_opts(opts(name, help)).expect("valid gauge");
            registry.register(Box::new(g.clone())).expect("register once");
            g
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::with_opts(opts(name, help)).expect("valid counter");
            registry.register(Box::new(c.clone())).expect("register once");
            c
        };
        let (kv_name, itl_name) = if legacy {
            ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds")
        } else {
            ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds")
        };
        let kv_usage = Gauge::with_opts(opts(kv_name, "KV-cache usage. 1 means 100 percent usage."))
            .expect("valid gauge");
        registry.register(Box::new(kv_usage.clone())).expect("register once");
        let success = IntCounterVec::new(
            opts("vllm:request_success_total", "Count of successfully processed requests."),
            &["finished_reason"],
        )
        .expect("valid counter");
        registry.register(Box::new(success.clone())).expect("register once");
        for reason in ["stop", "length", "abort"] {
            success.with_label_values(&[reason]);
        }
        let info = GaugeVec::new(
            Opts::new("vllm:cache_config_info", "Information of the LLMEngine CacheConfig"),
            &["block_size", "cache_dtype", "enable_prefix_caching", "num_gpu_blocks"],
        )
        .expect("valid gauge");
        registry.register(Box::new(info.clone())).expect("register once");
        info.with_label_values(&[
            cache.block_size.to_string().as_str(),
            "auto",
            if cache.prefix_caching { "True" } else { "False" },
            cache.num_gpu_blocks.to_string().as_str(),
        ])
        .set(1.0);

        SimMetrics {
            running: int_gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
            waiting: int_gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
            kv_usage,
            ttft: hist(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            ),
            itl: hist(itl_name, "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
            e2e: hist(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                REQUEST_BUCKETS,
            ),
            queue_time: hist(
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                REQUEST_BUCKETS,
            ),
            prompt_tokens: counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
            generation_tokens: counter(
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
            ),
            prefix_queries: counter(
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
            ),
            prefix_hits: counter(
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
            ),
            preemptions: counter(
                "vllm:num_preemptions_total",
                "Cumulative number of preemption from the engine.",
            ),
            success,
            registry,
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf).expect("text encoding cannot fail");
        String::from_utf8(buf).expect("exposition is UTF-8")
    }
}
