//! The typed samples the fleet reads from its nodes: one node sample for every engine's
//! `/metrics` page (read by the adapters in `fleet::engines`), and the NVML agent's sample with
//! its parser.
//!
//! Pure: text in, sample out; no I/O and no clock. The telemetry loop calls these in the
//! background, never on the request path. A series that is absent is `None` (unknown), never
//! 0: a node that stopped exporting a gauge must not look idle. A page that cannot be read is a
//! [`ParseError`]. The Prometheus reading itself lives in `fleet::exposition`, each engine's page
//! in `fleet::engines`.

pub use super::exposition::HistogramSample;
use super::exposition::{parse_exposition, scalar, sum_of};
pub use super::parse_error::ParseError;

/// The labels of `vllm:cache_config_info` that size the KV cache.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CacheConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_gpu_blocks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dtype: Option<String>,
}

/// One scrape of a self-hosted node, whatever its engine (`fleet::engines` reads each engine
/// into it; the field docs name vLLM's series, each engine adapter says which of its own fill
/// them). Gauges and counters are summed over the `engine` label (one series per data-parallel
/// engine) and over any other label; KV-cache use is averaged.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct NodeSample {
    /// Distinct `model_name` labels seen, sorted.
    pub model_names: Vec<String>,
    /// Distinct `engine` labels seen (0 on engines that do not label them).
    pub engines: usize,
    /// The page used the pre-V1 names (`gpu_cache_usage_perc`, `time_per_output_token_seconds`).
    pub legacy_names: bool,
    /// `vllm:num_requests_running`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
    /// `vllm:num_requests_waiting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
    /// `vllm:kv_cache_usage_perc`, else `vllm:gpu_cache_usage_perc` (0–1, mean over engines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<f64>,
    /// `vllm:cache_config_info`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheConfig>,
    /// `vllm:time_to_first_token_seconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft: Option<HistogramSample>,
    /// `vllm:inter_token_latency_seconds`, else `vllm:time_per_output_token_seconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl: Option<HistogramSample>,
    /// `vllm:e2e_request_latency_seconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e: Option<HistogramSample>,
    /// `vllm:request_queue_time_seconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_time: Option<HistogramSample>,
    /// `vllm:request_prefill_time_seconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_time: Option<HistogramSample>,
    /// `vllm:prompt_tokens_total`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<f64>,
    /// `vllm:generation_tokens_total`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_tokens: Option<f64>,
    /// `vllm:prefix_cache_queries_total` (tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_queries: Option<f64>,
    /// `vllm:prefix_cache_hits_total` (tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hits: Option<f64>,
    /// `vllm:request_success_total`, summed over `finished_reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_success: Option<f64>,
    /// `vllm:num_preemptions_total`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// KV-cache tokens in use, where the engine reports tokens (SGLang `num_used_tokens`,
    /// llama.cpp `kv_cache_tokens`, TGI `batch_current_max_tokens`); vLLM reports a ratio only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_used_tokens: Option<f64>,
    /// KV-cache capacity in tokens, where the engine reports it as one number (SGLang
    /// `max_total_num_tokens`); block-sized engines report it in [`NodeSample::cache`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_capacity_tokens: Option<f64>,
    /// The engine's own limit on concurrent requests (Triton `request_type="max"`, trtllm-serve
    /// `max_num_active_requests`; llama.cpp's slot count comes from `/props`, see
    /// `engines::llamacpp::slots_from_props`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_running: Option<f64>,
    /// Requests scheduled in the engine's latest iteration (TensorRT-LLM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<f64>,
    /// Requests in prefill (context phase) in the engine's latest iteration (TensorRT-LLM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefilling: Option<f64>,
    /// Prefill throughput the engine reports itself, tokens/s (llama.cpp `prompt_tokens_seconds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_prefill_tps: Option<f64>,
    /// Decode throughput the engine reports itself, tokens/s (SGLang `gen_throughput`, llama.cpp
    /// `predicted_tokens_seconds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_decode_tps: Option<f64>,
    /// Prefix-cache hit rate the engine reports itself, 0–1 (SGLang `cache_hit_rate`,
    /// TensorRT-LLM `kv_cache_hit_rate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_prefix_hit_rate: Option<f64>,
    /// Seconds spent in prefill, cumulative (llama.cpp `prompt_seconds_total`): with
    /// `prompt_tokens` it gives the prefill rate between scrapes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_seconds: Option<f64>,
    /// Seconds spent generating, cumulative (llama.cpp `tokens_predicted_seconds_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_seconds: Option<f64>,
    /// Engine decode calls, cumulative (llama.cpp `n_decode_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_calls: Option<f64>,
}

/// One GPU as the NVML agent reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuStats {
    /// The `gpu` label.
    pub index: u32,
    /// The `uuid` label (empty if the agent left it out).
    pub uuid: String,
    /// 0–1.
    pub utilization: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub memory_total_bytes: Option<f64>,
    pub power_watts: Option<f64>,
    pub temperature_celsius: Option<f64>,
}

/// One scrape of the NVML agent (`spillway agent`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentSample {
    /// `spillway_nvml_up == 1`.
    pub up: bool,
    /// `spillway_nvml_info{reason}`, present when NVML is down.
    pub reason: Option<String>,
    /// By ascending index.
    pub gpus: Vec<GpuStats>,
}

/// Read the NVML agent's `/metrics` page. Fails when `spillway_nvml_up` is missing (not an
/// agent page).
pub fn parse_agent(text: &str) -> Result<AgentSample, ParseError> {
    let samples = parse_exposition(text)?;
    let up = sum_of(&samples, "spillway_nvml_up").ok_or(ParseError::NotAgent)?;
    let reason = samples
        .iter()
        .find(|s| s.metric == "spillway_nvml_info")
        .and_then(|s| s.labels.get("reason"))
        .map(str::to_string);
    let mut gpus: Vec<GpuStats> = Vec::new();
    for s in samples.iter().filter(|s| s.metric.starts_with("spillway_gpu_")) {
        let (Some(index), Some(v)) =
            (s.labels.get("gpu").and_then(|g| g.parse::<u32>().ok()), scalar(&s.value))
        else {
            continue;
        };
        let pos = match gpus.iter().position(|g| g.index == index) {
            Some(p) => p,
            None => {
                let uuid = s.labels.get("uuid").unwrap_or_default().to_string();
                gpus.push(GpuStats { index, uuid, ..GpuStats::default() });
                gpus.len() - 1
            }
        };
        let g = &mut gpus[pos];
        if g.uuid.is_empty() {
            g.uuid = s.labels.get("uuid").unwrap_or_default().to_string();
        }
        let slot = match s.metric.as_str() {
            "spillway_gpu_utilization_ratio" => &mut g.utilization,
            "spillway_gpu_memory_used_bytes" => &mut g.memory_used_bytes,
            "spillway_gpu_memory_total_bytes" => &mut g.memory_total_bytes,
            "spillway_gpu_power_watts" => &mut g.power_watts,
            "spillway_gpu_temperature_celsius" => &mut g.temperature_celsius,
            _ => continue,
        };
        *slot = Some(v);
    }
    gpus.sort_by_key(|g| g.index);
    Ok(AgentSample { up: up >= 1.0, reason, gpus })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_a_page_that_is_not_the_agent() {
        assert!(matches!(parse_agent("vllm:x 1\n"), Err(ParseError::NotAgent)));
    }

    #[test]
    fn reads_the_agent() {
        let text = r#"# TYPE spillway_nvml_up gauge
spillway_nvml_up 1
# TYPE spillway_gpu_utilization_ratio gauge
spillway_gpu_utilization_ratio{gpu="1",uuid="GPU-b"} 0.5
spillway_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.25
spillway_gpu_memory_used_bytes{gpu="0",uuid="GPU-a"} 1000
spillway_gpu_memory_total_bytes{gpu="0",uuid="GPU-a"} 4000
spillway_gpu_power_watts{gpu="0",uuid="GPU-a"} 300.5
spillway_gpu_temperature_celsius{gpu="0",uuid="GPU-a"} 61
"#;
        let a = parse_agent(text).unwrap();
        assert!(a.up);
        assert_eq!(a.reason, None);
        assert_eq!(a.gpus.len(), 2);
        assert_eq!(
            a.gpus[0],
            GpuStats {
                index: 0,
                uuid: "GPU-a".into(),
                utilization: Some(0.25),
                memory_used_bytes: Some(1000.0),
                memory_total_bytes: Some(4000.0),
                power_watts: Some(300.5),
                temperature_celsius: Some(61.0),
            }
        );
        assert_eq!(a.gpus[1].index, 1);
        assert_eq!(a.gpus[1].uuid, "GPU-b");
        assert_eq!(a.gpus[1].utilization, Some(0.5));
        assert_eq!(a.gpus[1].power_watts, None);

        let down =
            parse_agent("spillway_nvml_up 0\nspillway_nvml_info{reason=\"NVML: driver not loaded\"} 1\n")
                .unwrap();
        assert!(!down.up);
        assert_eq!(down.reason.as_deref(), Some("NVML: driver not loaded"));
        assert!(down.gpus.is_empty());
    }
}
