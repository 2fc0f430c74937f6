//! Hugging Face TGI's `/metrics` page into the node sample.
//!
//! Names follow TGI's `docs/source/reference/metrics.md` and the router's `metrics::gauge!` /
//! `histogram!` calls: `tgi_queue_size` (waiting), `tgi_batch_current_size` (running),
//! `tgi_batch_current_max_tokens` (tokens the running batch holds), and per-request histograms
//! in seconds. TGI has no TTFT histogram, no KV ratio and no capacity on this page (its token
//! budget is on `/info`), so those stay `None`. Pure.

use crate::fleet::exposition::Sample;

use super::{require, Engine};
use crate::fleet::exposition::{histogram, sum_of};
use crate::fleet::metrics::{NodeSample, ParseError};

/// Read TGI's samples. Prompt and generated tokens are the `_sum`s of the per-request
/// `tgi_request_input_length` and `tgi_request_generated_tokens` histograms (cumulative, like
/// vLLM's counters); `tgi_request_mean_time_per_token_duration` is the inter-token latency.
pub(crate) fn from_samples(samples: &[Sample]) -> Result<NodeSample, ParseError> {
    require(Engine::Tgi, samples)?;
    let s = samples;
    Ok(NodeSample {
        running: sum_of(s, "tgi_batch_current_size"),
        waiting: sum_of(s, "tgi_queue_size"),
        kv_used_tokens: sum_of(s, "tgi_batch_current_max_tokens"),
        queue_time: histogram(s, "tgi_request_queue_duration"),
        itl: histogram(s, "tgi_request_mean_time_per_token_duration"),
        e2e: histogram(s, "tgi_request_duration"),
        prompt_tokens: histogram(s, "tgi_request_input_length").and_then(|h| h.sum),
        generation_tokens: histogram(s, "tgi_request_generated_tokens").and_then(|h| h.sum),
        request_success: sum_of(s, "tgi_request_success"),
        ..NodeSample::default()
    })
}

#[cfg(test)]
mod tests {
    use crate::fleet::engines::{read, read_means, Engine};

    const PAGE: &str = include_str!("../../../tests/fixtures/engines/tgi.prom");

    #[test]
    fn every_listed_series_lands_in_its_field() {
        let s = read(Engine::Tgi, PAGE).unwrap();
        assert_eq!((s.running, s.waiting), (Some(8.0), Some(5.0)));
        assert_eq!(s.kv_used_tokens, Some(14336.0));
        let q = s.queue_time.as_ref().unwrap();
        assert_eq!((q.sum, q.count), (Some(12.65), Some(253.0)));
        assert_eq!(q.buckets.first(), Some(&(0.005, 120.0)));
        let itl = s.itl.as_ref().unwrap();
        assert_eq!((itl.sum, itl.count), (Some(4.048), Some(253.0)));
        let e2e = s.e2e.as_ref().unwrap();
        assert_eq!((e2e.sum, e2e.count), (Some(303.6), Some(253.0)));
        assert_eq!((s.prompt_tokens, s.generation_tokens), (Some(32384.0), Some(64768.0)));
        assert_eq!(s.request_success, Some(250.0));
    }

    #[test]
    fn nothing_tgi_lacks_is_invented() {
        let s = read(Engine::Tgi, PAGE).unwrap();
        assert_eq!((s.ttft, s.prefill_time), (None, None));
        assert_eq!(
            (s.kv_cache_usage, s.cache, s.kv_capacity_tokens, s.max_running),
            (None, None, None, None)
        );
        assert_eq!(
            (s.prefix_cache_hits, s.prefix_cache_queries, s.reported_prefix_hit_rate),
            (None, None, None)
        );
        assert_eq!((s.reported_decode_tps, s.reported_prefill_tps), (None, None));
        assert!(s.model_names.is_empty());
    }

    #[test]
    fn a_missing_gauge_stays_unknown_and_means_agree() {
        let page: String =
            PAGE.lines().filter(|l| !l.contains("tgi_queue_size")).map(|l| format!("{l}\n")).collect();
        let s = read(Engine::Tgi, &page).unwrap();
        assert_eq!((s.running, s.waiting), (Some(8.0), None));
        let means = read_means(Engine::Tgi, PAGE).unwrap();
        let full = read(Engine::Tgi, PAGE).unwrap();
        assert_eq!(
            means.queue_time.as_ref().map(|h| (h.sum, h.count)),
            full.queue_time.as_ref().map(|h| (h.sum, h.count))
        );
        assert!(means.queue_time.unwrap().buckets.is_empty());
        assert_eq!((means.prompt_tokens, means.running), (full.prompt_tokens, full.running));
    }
}
