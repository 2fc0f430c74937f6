//! TensorRT-LLM into the node sample, from either of its two pages: `trtllm-serve`'s
//! (`trtllm_*`, names from `tensorrt_llm/metrics/collector.py`) and Triton's TensorRT-LLM
//! backend's (`nv_trt_llm_*`, one gauge family per kind, the quantity in a label: names from
//! the `tensorrtllm_backend` README and its metrics docs). A page is read as one or the other;
//! for each field the `trtllm_` series wins when both are present. Pure.

use crate::fleet::exposition::Sample;

use super::{model_names, require, Engine};
use crate::fleet::exposition::{histogram, mean_of, sum_labelled, sum_of};
use crate::fleet::metrics::{CacheConfig, NodeSample, ParseError};

const REQUESTS: &str = "nv_trt_llm_request_metrics";
const BLOCKS: &str = "nv_trt_llm_kv_cache_block_metrics";

fn request(s: &[Sample], kind: &str) -> Option<f64> {
    sum_labelled(s, REQUESTS, "request_type", kind)
}

fn blocks(s: &[Sample], kind: &str) -> Option<f64> {
    sum_labelled(s, BLOCKS, "kv_cache_block_type", kind)
}

/// Read TensorRT-LLM's samples. Running is the engine's *active* requests
/// (`trtllm_num_requests_running` is documented "Number of active requests"; Triton's
/// `request_type="active"`). KV use is the utilisation gauge (`fraction` on Triton), else used
/// over max blocks; capacity is max blocks × tokens per block, as vLLM's cache config.
pub(crate) fn from_samples(samples: &[Sample]) -> Result<NodeSample, ParseError> {
    require(Engine::Trtllm, samples)?;
    let s = samples;
    let max_blocks = sum_of(s, "trtllm_kv_cache_max_blocks").or_else(|| blocks(s, "max"));
    let used_blocks = sum_of(s, "trtllm_kv_cache_used_blocks").or_else(|| blocks(s, "used"));
    let tokens_per_block = mean_of(s, "trtllm_kv_cache_tokens_per_block").or_else(|| blocks(s, "tokens_per"));
    let used_over_max = used_blocks.zip(max_blocks).filter(|(_, m)| *m > 0.0).map(|(u, m)| u / m);
    let cache = (max_blocks.is_some() || tokens_per_block.is_some()).then(|| CacheConfig {
        num_gpu_blocks: max_blocks.map(|b| b as u64),
        block_size: tokens_per_block.map(|b| b as u64),
        cache_dtype: None,
    });
    let prompt_tokens = sum_of(s, "trtllm_prompt_tokens_total");
    let cached = sum_of(s, "trtllm_prompt_cached_tokens_total");
    Ok(NodeSample {
        model_names: model_names(s),
        running: sum_of(s, "trtllm_num_requests_running").or_else(|| request(s, "active")),
        waiting: sum_of(s, "trtllm_num_requests_waiting").or_else(|| request(s, "waiting")),
        max_running: sum_of(s, "trtllm_max_num_active_requests").or_else(|| request(s, "max")),
        scheduled: sum_of(s, "trtllm_num_scheduled_requests").or_else(|| request(s, "scheduled")),
        prefilling: sum_of(s, "trtllm_num_context_requests").or_else(|| request(s, "context")),
        kv_cache_usage: mean_of(s, "trtllm_kv_cache_utilization")
            .or_else(|| blocks(s, "fraction"))
            .or(used_over_max),
        cache,
        reported_prefix_hit_rate: mean_of(s, "trtllm_kv_cache_hit_rate"),
        ttft: histogram(s, "trtllm_time_to_first_token_seconds"),
        itl: histogram(s, "trtllm_time_per_output_token_seconds"),
        e2e: histogram(s, "trtllm_e2e_request_latency_seconds"),
        queue_time: histogram(s, "trtllm_request_queue_time_seconds"),
        prefill_time: histogram(s, "trtllm_request_prefill_time_seconds"),
        prompt_tokens,
        generation_tokens: sum_of(s, "trtllm_generation_tokens_total"),
        prefix_cache_hits: cached,
        prefix_cache_queries: cached.and(prompt_tokens),
        request_success: sum_of(s, "trtllm_request_success_total"),
        ..NodeSample::default()
    })
}

#[cfg(test)]
mod tests {
    use crate::fleet::engines::{read, Engine};
    use crate::fleet::metrics::CacheConfig;

    const SERVE: &str = include_str!("../../../tests/fixtures/engines/trtllm.prom");
    const TRITON: &str = include_str!("../../../tests/fixtures/engines/triton_trtllm.prom");

    #[test]
    fn trtllm_serve_every_listed_series_lands_in_its_field() {
        let s = read(Engine::Trtllm, SERVE).unwrap();
        assert_eq!(s.model_names, vec!["Qwen/Qwen3-8B".to_string()]);
        assert_eq!((s.running, s.waiting), (Some(6.0), Some(2.0)));
        assert_eq!(s.kv_cache_usage, Some(0.372));
        let cache = CacheConfig { num_gpu_blocks: Some(3648), block_size: Some(32), cache_dtype: None };
        assert_eq!(s.cache, Some(cache));
        assert_eq!((s.max_running, s.scheduled, s.prefilling), (Some(64.0), Some(6.0), Some(1.0)));
        assert_eq!(s.reported_prefix_hit_rate, Some(0.25));
        let h = |h: &Option<crate::fleet::metrics::HistogramSample>| h.as_ref().map(|h| (h.sum, h.count));
        assert_eq!(h(&s.ttft), Some((Some(8.75), Some(150.0))));
        assert_eq!(h(&s.itl), Some((Some(2.1), Some(150.0))));
        assert_eq!(h(&s.e2e), Some((Some(45.2), Some(150.0))));
        assert_eq!(h(&s.queue_time), Some((Some(3.2), Some(150.0))));
        assert_eq!(h(&s.prefill_time), Some((Some(5.5), Some(150.0))));
        assert_eq!((s.prompt_tokens, s.generation_tokens), (Some(76800.0), Some(38400.0)));
        assert_eq!((s.prefix_cache_hits, s.prefix_cache_queries), (Some(19200.0), Some(76800.0)));
        assert_eq!(s.request_success, Some(155.0));
        // Not on trtllm-serve's page.
        assert_eq!((s.kv_used_tokens, s.kv_capacity_tokens, s.preemptions), (None, None, None));
        assert_eq!((s.reported_prefill_tps, s.reported_decode_tps, s.prompt_seconds), (None, None, None));
    }

    #[test]
    fn triton_every_listed_series_lands_in_its_field() {
        let s = read(Engine::Trtllm, TRITON).unwrap();
        assert_eq!(s.running, Some(3.0));
        assert_eq!(s.max_running, Some(512.0));
        assert_eq!((s.scheduled, s.prefilling), (Some(3.0), Some(1.0)));
        let cache = CacheConfig { num_gpu_blocks: Some(6239), block_size: Some(64), cache_dtype: None };
        assert_eq!(s.cache, Some(cache));
        // No `fraction` in this build: used over max blocks.
        assert_eq!(s.kv_cache_usage, Some(24.0 / 6239.0));
        // Triton's backend has no latency histograms or token counters.
        assert_eq!((s.ttft, s.itl, s.e2e, s.queue_time), (None, None, None, None));
        assert_eq!((s.prompt_tokens, s.generation_tokens, s.prefix_cache_hits), (None, None, None));
        assert!(s.model_names.is_empty());
    }

    #[test]
    fn a_missing_gauge_stays_unknown() {
        // The recorded Triton page predates `request_type="waiting"`: the queue is unknown.
        assert_eq!(read(Engine::Trtllm, TRITON).unwrap().waiting, None);
        let with = TRITON.replace(
            "nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"max\"",
            "nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 4\n\
             nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"max\"",
        );
        assert_eq!(read(Engine::Trtllm, &with).unwrap().waiting, Some(4.0));
        let fraction =
            format!("{TRITON}nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type=\"fraction\"}} 0.5\n");
        assert_eq!(read(Engine::Trtllm, &fraction).unwrap().kv_cache_usage, Some(0.5));
        let no_kv: String =
            SERVE.lines().filter(|l| !l.contains("kv_cache")).map(|l| format!("{l}\n")).collect();
        let s = read(Engine::Trtllm, &no_kv).unwrap();
        assert_eq!((s.kv_cache_usage, s.cache), (None, None));
    }
}
