//! llama.cpp `llama-server --metrics` into the node sample, and the slot count from `/props`.
//!
//! Names follow `tools/server/server.cpp` (the `/metrics` handler) and the server README:
//! `requests_processing` (running), `requests_deferred` (the queue), the prompt and predict
//! counters, the throughput gauges, `n_decode_total`, newer builds' `prompt_tokens_cached_total`
//! (prompt tokens reused from a slot's cache: the prefix-cache hits), and older builds'
//! `kv_cache_usage_ratio` and `kv_cache_tokens`. There is no latency histogram and often no KV gauge; capacity is the
//! slot count of `GET /props` ([`slots_from_props`]). Parsed defensively: a non-finite value is
//! unknown, and a throughput gauge of 0 (llama.cpp's "nothing processed since the last
//! `/metrics` call") is unknown too, not a speed. Pure.

use crate::fleet::exposition::Sample;

use super::{require, Engine};
use crate::fleet::exposition::sum_of;
use crate::fleet::metrics::{NodeSample, ParseError};

/// Sum of `llamacpp:<name>`, `None` if absent or not finite.
fn num(samples: &[Sample], name: &str) -> Option<f64> {
    sum_of(samples, &format!("llamacpp:{name}")).filter(|v| v.is_finite())
}

/// A throughput gauge: unknown unless positive.
fn rate(samples: &[Sample], name: &str) -> Option<f64> {
    num(samples, name).filter(|v| *v > 0.0)
}

/// Read llama-server's samples. Prefill rate between scrapes is `prompt_tokens` over
/// `prompt_seconds` (both cumulative); the gauge is kept as `reported_prefill_tps`.
pub(crate) fn from_samples(samples: &[Sample]) -> Result<NodeSample, ParseError> {
    require(Engine::Llamacpp, samples)?;
    Ok(NodeSample {
        running: num(samples, "requests_processing"),
        waiting: num(samples, "requests_deferred"),
        kv_cache_usage: num(samples, "kv_cache_usage_ratio"),
        kv_used_tokens: num(samples, "kv_cache_tokens"),
        reported_prefill_tps: rate(samples, "prompt_tokens_seconds"),
        reported_decode_tps: rate(samples, "predicted_tokens_seconds"),
        prompt_tokens: num(samples, "prompt_tokens_total"),
        // Newer builds count prompt tokens reused from a slot's cache apart from those processed.
        prefix_cache_hits: num(samples, "prompt_tokens_cached_total"),
        prefix_cache_queries: num(samples, "prompt_tokens_cached_total")
            .and_then(|cached| Some(cached + num(samples, "prompt_tokens_total")?)),
        prompt_seconds: num(samples, "prompt_seconds_total"),
        generation_tokens: num(samples, "tokens_predicted_total"),
        generation_seconds: num(samples, "tokens_predicted_seconds_total"),
        decode_calls: num(samples, "n_decode_total"),
        ..NodeSample::default()
    })
}

/// `total_slots` of a `GET /props` body: how many requests the server runs at once. `None` when
/// the body is not JSON, has no such field, or it is not a positive integer.
pub fn slots_from_props(json: &str) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let n = v.get("total_slots")?.as_u64().filter(|n| *n > 0)?;
    u32::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::slots_from_props;
    use crate::fleet::engines::{read, Engine};
    use crate::fleet::metrics::NodeSample;

    const PAGE: &str = include_str!("../../../tests/fixtures/engines/llamacpp.prom");
    const PROPS: &str = include_str!("../../../tests/fixtures/engines/llamacpp_props.json");

    #[test]
    fn every_listed_series_lands_in_its_field() {
        let s = read(Engine::Llamacpp, PAGE).unwrap();
        assert_eq!(s.running, Some(2.0));
        assert_eq!(s.waiting, Some(1.0));
        assert_eq!(s.prompt_tokens, Some(33065.0));
        assert_eq!(s.prompt_seconds, Some(235.743));
        assert_eq!(s.generation_tokens, Some(7801.0));
        assert_eq!(s.generation_seconds, Some(412.057));
        assert_eq!(s.decode_calls, Some(8214.0));
        assert_eq!(s.reported_prefill_tps, Some(140.259));
        assert_eq!(s.reported_decode_tps, Some(18.9318));
        // This build has no KV gauges.
        assert_eq!((s.kv_cache_usage, s.kv_used_tokens), (None, None));
    }

    #[test]
    fn nothing_llamacpp_lacks_is_invented() {
        let s = read(Engine::Llamacpp, PAGE).unwrap();
        assert_eq!((s.ttft, s.itl, s.e2e, s.queue_time, s.prefill_time), (None, None, None, None, None));
        assert_eq!((s.cache, s.kv_capacity_tokens, s.max_running), (None, None, None));
        assert_eq!(
            (s.prefix_cache_hits, s.prefix_cache_queries, s.reported_prefix_hit_rate),
            (None, None, None)
        );
        assert_eq!((s.request_success, s.preemptions), (None, None));
        assert!(s.model_names.is_empty());
    }

    #[test]
    fn older_builds_kv_gauges_are_read() {
        let page = format!(
            "{PAGE}# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.\n\
             # TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.125\n\
             # HELP llamacpp:kv_cache_tokens KV-cache tokens.\n# TYPE llamacpp:kv_cache_tokens gauge\n\
             llamacpp:kv_cache_tokens 1024\n"
        );
        let s = read(Engine::Llamacpp, &page).unwrap();
        assert_eq!((s.kv_cache_usage, s.kv_used_tokens), (Some(0.125), Some(1024.0)));
    }

    #[test]
    fn an_idle_server_has_no_throughput_rather_than_zero() {
        let page = "llamacpp:prompt_tokens_seconds 0\nllamacpp:predicted_tokens_seconds nan\n\
                    llamacpp:requests_processing 0\nllamacpp:kv_cache_usage_ratio nan\n";
        let s = read(Engine::Llamacpp, page).unwrap();
        assert_eq!(s, NodeSample { running: Some(0.0), ..NodeSample::default() });
    }

    #[test]
    fn a_missing_gauge_stays_unknown() {
        let page: String =
            PAGE.lines().filter(|l| !l.contains("requests_deferred")).map(|l| format!("{l}\n")).collect();
        let s = read(Engine::Llamacpp, &page).unwrap();
        assert_eq!((s.running, s.waiting), (Some(2.0), None));
    }

    #[test]
    fn slots_come_from_props() {
        assert_eq!(slots_from_props(PROPS), Some(2));
        assert_eq!(slots_from_props(r#"{"total_slots": 0}"#), None);
        assert_eq!(slots_from_props(r#"{"total_slots": "4"}"#), None);
        assert_eq!(slots_from_props(r#"{"total_slots": -1}"#), None);
        assert_eq!(slots_from_props(r#"{"default_generation_settings": {}}"#), None);
        assert_eq!(slots_from_props("<html>404</html>"), None);
        assert_eq!(slots_from_props(r#"{"total_slots": 99999999999}"#), None);
    }

    /// A page captured from a real llama-server (the build the tests run): every series the
    /// adapter knows is read, the cached-prompt counter gives the prefix-cache figures.
    #[test]
    fn reads_a_page_captured_from_a_real_server() {
        let page = include_str!("../../../tests/fixtures/engines/llamacpp-real.prom");
        let s = read(Engine::Llamacpp, page).unwrap();
        assert_eq!((s.running, s.waiting), (Some(0.0), Some(0.0)));
        assert_eq!(
            (s.prompt_tokens, s.prefix_cache_hits, s.prefix_cache_queries),
            (Some(41.0), Some(27.0), Some(68.0))
        );
        assert_eq!(s.generation_tokens, Some(32.0));
        assert!(s.prompt_seconds.is_some_and(|v| v > 0.0) && s.generation_seconds.is_some_and(|v| v > 0.0));
        assert_eq!(s.decode_calls, Some(32.0));
        assert!(s.reported_prefill_tps.is_some() && s.reported_decode_tps.is_some());
        assert_eq!((s.kv_cache_usage, s.kv_used_tokens, s.ttft), (None, None, None));
    }
}
