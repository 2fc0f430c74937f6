//! vLLM's `/metrics` page, both generations of its names, into the node sample.
//!
//! Pure: samples in, sample out. The V1 engine's names (`kv_cache_usage_perc`,
//! `inter_token_latency_seconds`) win over the pre-V1 ones (`gpu_cache_usage_perc`,
//! `time_per_output_token_seconds`) when a page has both; `legacy_names` says which were read.
//! Moved here unchanged from `fleet::metrics`, which still re-exports it.

use std::collections::BTreeSet;

use crate::fleet::exposition::Sample;

use crate::fleet::exposition::{histogram, mean_of, parse_exposition_where, parse_means_where, sum_of};
use crate::fleet::metrics::{CacheConfig, NodeSample, ParseError};

/// Families [`parse_vllm`] reads, without `_total`; a line is parsed when its metric name
/// starts with one of them (so `_bucket`, `_sum`, `_count`, `_total` all pass).
pub(crate) const VLLM_FAMILIES: &[&str] = &[
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:cache_config_info",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:request_success",
    "vllm:num_preemptions",
];

/// Is `name` a line [`parse_vllm`] reads?
pub fn keeps(name: &str) -> bool {
    name.starts_with("vllm:") && VLLM_FAMILIES.iter().any(|f| name.starts_with(f))
}

/// Read a vLLM `/metrics` page. Fails only when the text holds no `vllm:` series at all (not
/// a vLLM page); anything missing from a vLLM page is `None`.
pub fn parse_vllm(text: &str) -> Result<NodeSample, ParseError> {
    vllm_from_samples(&parse_exposition_where(text, keeps)?)
}

/// [`parse_vllm`] without histogram buckets, for the scrape loop (see
/// [`parse_means_where`]).
pub fn parse_vllm_means(text: &str) -> Result<NodeSample, ParseError> {
    vllm_from_samples(&parse_means_where(text, keeps)?)
}

/// [`parse_vllm`] over already parsed samples (any superset of [`VLLM_FAMILIES`]).
pub fn vllm_from_samples(samples: &[Sample]) -> Result<NodeSample, ParseError> {
    if !samples.iter().any(|s| s.metric.starts_with("vllm:")) {
        return Err(ParseError::NotVllm);
    }
    let mut models = BTreeSet::new();
    let mut engines = BTreeSet::new();
    for s in samples.iter().filter(|s| s.metric.starts_with("vllm:")) {
        if let Some(m) = s.labels.get("model_name") {
            models.insert(m.to_string());
        }
        if let Some(e) = s.labels.get("engine") {
            engines.insert(e.to_string());
        }
    }
    let new_kv = mean_of(samples, "vllm:kv_cache_usage_perc");
    let new_itl = histogram(samples, "vllm:inter_token_latency_seconds");
    let old_kv = mean_of(samples, "vllm:gpu_cache_usage_perc");
    let old_itl = histogram(samples, "vllm:time_per_output_token_seconds");
    let legacy_names = (new_kv.is_none() && old_kv.is_some()) || (new_itl.is_none() && old_itl.is_some());
    let cache = samples.iter().find(|s| s.metric == "vllm:cache_config_info").map(|s| CacheConfig {
        num_gpu_blocks: s.labels.get("num_gpu_blocks").and_then(|v| v.parse().ok()),
        block_size: s.labels.get("block_size").and_then(|v| v.parse().ok()),
        cache_dtype: s.labels.get("cache_dtype").map(str::to_string),
    });
    Ok(NodeSample {
        model_names: models.into_iter().collect(),
        engines: engines.len(),
        legacy_names,
        running: sum_of(samples, "vllm:num_requests_running"),
        waiting: sum_of(samples, "vllm:num_requests_waiting"),
        kv_cache_usage: new_kv.or(old_kv),
        cache,
        ttft: histogram(samples, "vllm:time_to_first_token_seconds"),
        itl: new_itl.or(old_itl),
        e2e: histogram(samples, "vllm:e2e_request_latency_seconds"),
        queue_time: histogram(samples, "vllm:request_queue_time_seconds"),
        prefill_time: histogram(samples, "vllm:request_prefill_time_seconds"),
        prompt_tokens: sum_of(samples, "vllm:prompt_tokens_total"),
        generation_tokens: sum_of(samples, "vllm:generation_tokens_total"),
        prefix_cache_queries: sum_of(samples, "vllm:prefix_cache_queries_total"),
        prefix_cache_hits: sum_of(samples, "vllm:prefix_cache_hits_total"),
        request_success: sum_of(samples, "vllm:request_success_total"),
        preemptions: sum_of(samples, "vllm:num_preemptions_total"),
        ..NodeSample::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::exposition::parse_exposition;

    #[test]
    fn the_family_filter_changes_nothing_parse_vllm_reads() {
        let all = vllm_from_samples(&parse_exposition(TWO_ENGINES).unwrap()).unwrap();
        assert_eq!(parse_vllm(TWO_ENGINES).unwrap(), all);
        let extra = format!("{TWO_ENGINES}# TYPE vllm:other gauge\nvllm:other{{engine=\"0\"}} 9\n");
        let kept = parse_exposition_where(&extra, keeps).unwrap();
        assert!(kept.iter().all(|s| s.metric != "vllm:other"));
        assert_eq!(parse_vllm(&extra).unwrap(), all);
    }

    const TWO_ENGINES: &str = r#"# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 1.5
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 4.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 5.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 2.0
"#;

    #[test]
    fn sums_over_engines() {
        let s = parse_vllm(TWO_ENGINES).unwrap();
        assert_eq!(s.engines, 2);
        assert_eq!(s.model_names, vec!["m".to_string()]);
        assert_eq!(s.running, Some(7.0));
        assert_eq!(s.waiting, Some(3.0));
        assert_eq!(s.kv_cache_usage, Some(0.5));
        assert_eq!(s.request_success, Some(8.0));
        let t = s.ttft.unwrap();
        assert_eq!(t.buckets, vec![(0.1, 4.0), (f64::INFINITY, 6.0)]);
        assert_eq!(t.sum, Some(2.0));
        assert_eq!(t.count, Some(6.0));
        // Missing is unknown, not zero.
        assert_eq!(s.prompt_tokens, None);
        assert_eq!(s.itl, None);
        assert_eq!(s.cache, None);
        assert!(!s.legacy_names);
    }

    #[test]
    fn rejects_a_page_without_vllm_series() {
        assert!(matches!(parse_vllm("<html>nope</html>"), Err(ParseError::NotVllm)));
        assert!(matches!(parse_vllm("up 1\n"), Err(ParseError::NotVllm)));
        assert!(matches!(parse_vllm_means("up 1\n"), Err(ParseError::NotVllm)));
    }
}

#[cfg(test)]
mod means_tests {
    use super::*;

    /// The scrape loop's bucket-free parse reads the same values routing uses.
    #[test]
    fn means_only_parse_agrees_with_the_full_parse_on_both_fixtures() {
        for page in [
            include_str!("../../../tests/fixtures/vllm/v0-engine.prom"),
            include_str!("../../../tests/fixtures/vllm/v1-engine-excerpt.prom"),
        ] {
            let full = parse_vllm(page).unwrap();
            let means = parse_vllm_means(page).unwrap();
            assert_eq!(
                (means.running, means.waiting, means.kv_cache_usage),
                (full.running, full.waiting, full.kv_cache_usage)
            );
            assert_eq!(means.cache, full.cache);
            assert_eq!(
                (means.prompt_tokens, means.generation_tokens),
                (full.prompt_tokens, full.generation_tokens)
            );
            assert_eq!(means.request_success, full.request_success);
            for (m, f) in [
                (&means.ttft, &full.ttft),
                (&means.itl, &full.itl),
                (&means.e2e, &full.e2e),
                (&means.queue_time, &full.queue_time),
            ] {
                assert_eq!(m.as_ref().map(|h| (h.sum, h.count)), f.as_ref().map(|h| (h.sum, h.count)));
                assert!(m.as_ref().is_none_or(|h| h.buckets.is_empty()));
            }
        }
    }
}
