//! SGLang's `/metrics` page (`--enable-metrics`) into the node sample.
//!
//! Names follow `python/sglang/srt/metrics/collector.py` (`SchedulerMetricsCollector`,
//! `TokenizerMetricsCollector`): scheduler gauges (`num_running_reqs`, `num_queue_reqs`,
//! `token_usage`, `num_used_tokens`, `max_total_num_tokens`, `cache_hit_rate`,
//! `gen_throughput`), latency histograms and token counters. Builds that spell the prefix
//! `sglang_` are read the same, by respelling it `sglang:` before anything is looked up. Pure.

use crate::fleet::exposition::Sample;

use super::{model_names, require, Engine};
use crate::fleet::exposition::{histogram, mean_of, sum_of};
use crate::fleet::metrics::{NodeSample, ParseError};

/// Read SGLang's samples. `prefix_cache_hits` is `cached_tokens_total` (prompt tokens served from
/// the radix cache, summed over `cache_source`) and `prefix_cache_queries` is
/// `prompt_tokens_total` (every prompt token is looked up), so the hit rate between two scrapes
/// means what vLLM's does; the engine's own `cache_hit_rate` gauge is kept apart.
pub(crate) fn from_samples(samples: &[Sample]) -> Result<NodeSample, ParseError> {
    require(Engine::Sglang, samples)?;
    let respelled: Vec<Sample> = samples
        .iter()
        .map(|s| match s.metric.strip_prefix("sglang_") {
            Some(rest) => Sample { metric: format!("sglang:{rest}"), ..s.clone() },
            None => s.clone(),
        })
        .collect();
    let s = &respelled[..];
    let new_itl = histogram(s, "sglang:inter_token_latency_seconds");
    let old_itl = histogram(s, "sglang:time_per_output_token_seconds");
    let prompt_tokens = sum_of(s, "sglang:prompt_tokens_total");
    let cached = sum_of(s, "sglang:cached_tokens_total");
    Ok(NodeSample {
        model_names: model_names(s),
        legacy_names: new_itl.is_none() && old_itl.is_some(),
        running: sum_of(s, "sglang:num_running_reqs"),
        waiting: sum_of(s, "sglang:num_queue_reqs"),
        kv_cache_usage: mean_of(s, "sglang:token_usage"),
        kv_used_tokens: sum_of(s, "sglang:num_used_tokens"),
        kv_capacity_tokens: sum_of(s, "sglang:max_total_num_tokens"),
        reported_prefix_hit_rate: mean_of(s, "sglang:cache_hit_rate"),
        reported_decode_tps: sum_of(s, "sglang:gen_throughput"),
        ttft: histogram(s, "sglang:time_to_first_token_seconds"),
        itl: new_itl.or(old_itl),
        e2e: histogram(s, "sglang:e2e_request_latency_seconds"),
        queue_time: histogram(s, "sglang:queue_time_seconds"),
        prompt_tokens,
        generation_tokens: sum_of(s, "sglang:generation_tokens_total"),
        // Counted as each request finishes (the tokenizer manager's metrics collector).
        request_success: sum_of(s, "sglang:num_requests_total"),
        prefix_cache_hits: cached,
        prefix_cache_queries: cached.and(prompt_tokens),
        ..NodeSample::default()
    })
}

#[cfg(test)]
mod tests {
    use crate::fleet::engines::{read, Engine};
    use crate::fleet::metrics::{NodeSample, ParseError};

    const PAGE: &str = include_str!("../../../tests/fixtures/engines/sglang.prom");

    #[test]
    fn every_listed_series_lands_in_its_field() {
        let s = read(Engine::Sglang, PAGE).unwrap();
        assert_eq!(s.model_names, vec!["meta-llama/Llama-3.1-8B-Instruct".to_string()]);
        assert_eq!(s.running, Some(12.0));
        assert_eq!(s.waiting, Some(3.0));
        assert_eq!(s.kv_cache_usage, Some(0.41));
        assert_eq!(s.kv_used_tokens, Some(66306.0));
        assert_eq!(s.kv_capacity_tokens, Some(161721.0));
        assert_eq!(s.reported_prefix_hit_rate, Some(0.3125));
        assert_eq!(s.reported_decode_tps, Some(412.7));
        let ttft = s.ttft.as_ref().unwrap();
        assert_eq!((ttft.sum, ttft.count), (Some(287.5), Some(1402.0)));
        assert_eq!(ttft.buckets.first(), Some(&(0.001, 0.0)));
        assert_eq!(ttft.buckets.last(), Some(&(f64::INFINITY, 1402.0)));
        let itl = s.itl.as_ref().unwrap();
        assert_eq!((itl.sum, itl.count), (Some(3188.25), Some(176931.0)));
        let q = s.queue_time.as_ref().unwrap();
        assert_eq!((q.sum, q.count), (Some(96.75), Some(1402.0)));
        let e2e = s.e2e.as_ref().unwrap();
        assert_eq!((e2e.sum, e2e.count), (Some(4210.5), Some(1390.0)));
        assert_eq!(s.request_success, Some(1390.0), "num_requests_total: requests finished");
        assert_eq!(s.prompt_tokens, Some(1_843_210.0));
        assert_eq!(s.generation_tokens, Some(178_321.0));
        // Summed over cache_source="device" and "host".
        assert_eq!(s.prefix_cache_hits, Some(576_004.0));
        assert_eq!(s.prefix_cache_queries, Some(1_843_210.0));
        assert!(!s.legacy_names);
    }

    #[test]
    fn nothing_sglang_lacks_is_invented() {
        let s = read(Engine::Sglang, PAGE).unwrap();
        assert_eq!(s.cache, None);
        assert_eq!(s.prefill_time, None);
        assert_eq!(s.preemptions, None);
        assert_eq!((s.max_running, s.scheduled, s.prefilling), (None, None, None));
        assert_eq!(
            (s.reported_prefill_tps, s.prompt_seconds, s.generation_seconds, s.decode_calls),
            (None, None, None, None)
        );
        assert_eq!(s.engines, 0);
    }

    #[test]
    fn the_underscore_spelling_reads_the_same() {
        let page = PAGE.replace("sglang:", "sglang_");
        assert_eq!(read(Engine::Sglang, &page).unwrap(), read(Engine::Sglang, PAGE).unwrap());
    }

    #[test]
    fn older_builds_time_per_output_token_is_the_itl() {
        let page = PAGE.replace("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds");
        let s = read(Engine::Sglang, &page).unwrap();
        assert!(s.legacy_names);
        assert_eq!(s.itl.and_then(|h| h.count), Some(176931.0));
    }

    #[test]
    fn a_missing_gauge_stays_unknown() {
        let page: String =
            PAGE.lines().filter(|l| !l.contains("sglang:num_queue_reqs")).map(|l| format!("{l}\n")).collect();
        let s = read(Engine::Sglang, &page).unwrap();
        assert_eq!(s.waiting, None);
        assert_eq!(s.running, Some(12.0));
        let bare = read(Engine::Sglang, "sglang:num_running_reqs 1\n").unwrap();
        assert_eq!(bare, NodeSample { running: Some(1.0), ..NodeSample::default() });
        assert!(matches!(
            read(Engine::Sglang, "vllm:num_requests_running 1\n"),
            Err(ParseError::NotEngine(Engine::Sglang))
        ));
    }
}
