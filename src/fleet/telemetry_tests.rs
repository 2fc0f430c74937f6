//! Tests of node telemetry: recent figures from consecutive scrapes, restarts, and what each
//! engine's page and side page give planning.
use super::*;

fn hist(sum: f64, count: f64) -> Option<HistogramSample> {
    Some(HistogramSample { buckets: vec![(f64::INFINITY, count)], sum: Some(sum), count: Some(count) })
}

/// A node that has completed `done` requests, each with the given per-request figures
/// (seconds, tokens), and served `hits` of `queries` prompt tokens from cache.
fn node(done: f64, ttft: f64, queue: f64, prompt: f64, hits: f64, queries: f64) -> NodeSample {
    NodeSample {
        running: Some(1.0),
        waiting: Some(0.0),
        ttft: hist(ttft * done, done),
        queue_time: hist(queue * done, done),
        itl: hist(0.03125 * done * 10.0, done * 10.0),
        e2e: hist(1.5 * done, done),
        prompt_tokens: Some(prompt * done),
        prefix_cache_hits: Some(hits),
        prefix_cache_queries: Some(queries),
        request_success: Some(done),
        ..NodeSample::default()
    }
}

/// Sample whose counters are `base` plus one interval of `n` requests with the given means.
fn plus(base: &NodeSample, n: f64, ttft: f64, queue: f64, prompt: f64) -> NodeSample {
    let add = |h: &Option<HistogramSample>, mean: f64, k: f64| {
        h.as_ref().map(|h| HistogramSample {
            buckets: vec![],
            sum: Some(h.sum.unwrap() + mean * n * k),
            count: Some(h.count.unwrap() + n * k),
        })
    };
    NodeSample {
        ttft: add(&base.ttft, ttft, 1.0),
        queue_time: add(&base.queue_time, queue, 1.0),
        itl: add(&base.itl, 0.0625, 10.0),
        e2e: add(&base.e2e, 2.0, 1.0),
        prompt_tokens: Some(base.prompt_tokens.unwrap() + prompt * n),
        request_success: Some(base.request_success.unwrap() + n),
        prefix_cache_hits: Some(base.prefix_cache_hits.unwrap() + 25.0 * n),
        prefix_cache_queries: Some(base.prefix_cache_queries.unwrap() + 100.0 * n),
        ..base.clone()
    }
}

#[test]
fn derives_interval_figures_exactly() {
    let t0 = Instant::now();
    let mut n = NodeTelemetry::new();
    let s0 = node(10.0, 0.5, 0.25, 1000.0, 0.0, 0.0);
    n.on_scrape(Engine::Vllm, s0.clone(), t0);
    // One sample: nothing recent known yet.
    assert_eq!(n.recent, RecentStats::default());

    // 4 requests in 2 s: TTFT 0.75, queue 0.25 → prefill 0.5; 2000 prompt tokens each.
    let s1 = plus(&s0, 4.0, 0.75, 0.25, 2000.0);
    n.on_scrape(Engine::Vllm, s1.clone(), t0 + Duration::from_secs(2));
    assert_eq!(
        n.recent,
        RecentStats {
            ttft_s: Some(0.75),
            queue_s: Some(0.25),
            prefill_s: Some(0.5),
            prefill_tokens_per_s: Some(4000.0),
            itl_s: Some(0.0625),
            e2e_s: Some(2.0),
            completions_per_s: Some(2.0),
            prompt_tokens_per_request: Some(2000.0),
            prefix_cache_hit_rate: Some(0.25),
            counted_prefill_tps: None,
        }
    );

    // Next 1 s: 2 requests, TTFT 0.25, queue 0.25 → prefill 0; 1000 prompt tokens each.
    // EWMA with alpha 1/2 halves the way to each new value.
    let s2 = plus(&s1, 2.0, 0.25, 0.25, 1000.0);
    n.on_scrape(Engine::Vllm, s2.clone(), t0 + Duration::from_secs(3));
    let r = n.recent;
    assert_eq!(r.ttft_s, Some(0.5));
    assert_eq!(r.queue_s, Some(0.25));
    assert_eq!(r.prefill_s, Some(0.25));
    assert_eq!(r.completions_per_s, Some(2.0));
    assert_eq!(r.prompt_tokens_per_request, Some(1500.0));
    assert_eq!(r.prefill_tokens_per_s, Some(6000.0));

    // A quiet second: latencies kept, throughput halves towards 0.
    n.on_scrape(Engine::Vllm, s2.clone(), t0 + Duration::from_secs(4));
    assert_eq!(n.recent.ttft_s, Some(0.5));
    assert_eq!(n.recent.prompt_tokens_per_request, Some(1500.0));
    assert_eq!(n.recent.completions_per_s, Some(1.0));
    assert_eq!(n.scrapes, 4);
}

#[test]
fn prefers_the_prefill_histogram() {
    let t0 = Instant::now();
    let mut n = NodeTelemetry::new();
    let mut s0 = node(1.0, 0.5, 0.25, 100.0, 0.0, 0.0);
    s0.prefill_time = hist(0.125, 1.0);
    n.on_scrape(Engine::Vllm, s0.clone(), t0);
    let mut s1 = plus(&s0, 1.0, 0.5, 0.25, 100.0);
    s1.prefill_time = hist(0.125 + 0.0625, 2.0);
    n.on_scrape(Engine::Vllm, s1, t0 + Duration::from_secs(1));
    assert_eq!(n.recent.prefill_s, Some(0.0625));
    assert_eq!(n.recent.prefill_tokens_per_s, Some(1600.0));
}

#[test]
fn a_restart_resets_the_baseline() {
    let t0 = Instant::now();
    let mut n = NodeTelemetry::new();
    let s0 = node(100.0, 0.5, 0.25, 1000.0, 0.0, 0.0);
    n.on_scrape(Engine::Vllm, s0.clone(), t0);
    let s1 = plus(&s0, 2.0, 0.5, 0.25, 1000.0);
    n.on_scrape(Engine::Vllm, s1, t0 + Duration::from_secs(1));
    let before = n.recent;
    assert_eq!(before.completions_per_s, Some(2.0));
    // The node restarted: its counters start again from a few requests.
    let fresh = node(1.0, 0.25, 0.0, 10.0, 0.0, 0.0);
    n.on_scrape(Engine::Vllm, fresh.clone(), t0 + Duration::from_secs(2));
    assert_eq!(n.restarts, 1);
    assert_eq!(n.recent, before, "no negative rates from a restart");
    // The next interval is measured from the new baseline.
    n.on_scrape(Engine::Vllm, plus(&fresh, 3.0, 0.5, 0.25, 10.0), t0 + Duration::from_secs(3));
    assert_eq!(n.recent.completions_per_s, Some(2.5));
    assert!(n.recent.ttft_s.unwrap() > 0.0);
}

#[test]
fn missing_series_stay_unknown() {
    let t0 = Instant::now();
    let mut n = NodeTelemetry::new();
    let bare = NodeSample { running: Some(2.0), ..NodeSample::default() };
    n.on_scrape(Engine::Vllm, bare.clone(), t0);
    n.on_scrape(Engine::Vllm, bare, t0 + Duration::from_secs(1));
    assert_eq!(n.recent, RecentStats::default());
}

#[test]
fn failures_age_and_staleness() {
    let t0 = Instant::now();
    let stale = Duration::from_millis(500);
    let mut n = NodeTelemetry::new();
    assert!(n.is_stale(t0, stale), "never scraped is stale");
    assert_eq!(n.age(t0), None);
    n.on_scrape(Engine::Vllm, NodeSample::default(), t0);
    assert!(!n.is_stale(t0 + stale, stale));
    assert!(n.is_stale(t0 + stale + Duration::from_millis(1), stale));
    n.on_failure("refused".into(), t0 + Duration::from_secs(1));
    n.on_failure("refused".into(), t0 + Duration::from_secs(2));
    assert_eq!(n.consecutive_failures, 2);
    assert_eq!(n.age(t0 + Duration::from_secs(2)), Some(Duration::from_secs(2)));
    assert!(n.sample.is_some(), "the last good sample stays");
    n.on_scrape(Engine::Vllm, NodeSample::default(), t0 + Duration::from_secs(3));
    assert_eq!(n.consecutive_failures, 0);
    assert_eq!(n.last_error.as_deref(), Some("refused"));
}

#[test]
fn agent_down_leaves_vllm_telemetry() {
    let board = TelemetryBoard::new();
    let t0 = Instant::now();
    board.on_scrape(
        &"n".into(),
        Engine::Vllm,
        NodeSample { running: Some(3.0), ..NodeSample::default() },
        t0,
    );
    board.on_agent(&"n".into(), AgentSample { up: false, reason: Some("no driver".into()), gpus: vec![] });
    board.on_agent_failure(&"n".into(), "refused".into());
    let n = board.get("n").unwrap();
    assert_eq!(n.sample.unwrap().running, Some(3.0));
    assert_eq!(n.last_ok, Some(t0));
    assert_eq!(n.agent, None);
    assert_eq!(board.on_failure(&"n".into(), "x".into(), t0), 1);
    board.retain(|k| k != "n");
    assert!(board.get("n").is_none());
    assert!(board.all().is_empty());
}

/// llama.cpp has no latency histograms: prefill rate and step time come from its counters,
/// its slots from `/props`; a page of another engine starts the recent figures afresh.
#[tokio::test(start_paused = true)]
async fn counters_stand_in_for_histograms_and_the_side_page_for_limits() {
    let t0 = Instant::now();
    let page = |prompt: f64, prompt_s: f64, gen: f64, gen_s: f64| NodeSample {
        running: Some(1.0),
        waiting: Some(0.0),
        prompt_tokens: Some(prompt),
        prompt_seconds: Some(prompt_s),
        generation_tokens: Some(gen),
        generation_seconds: Some(gen_s),
        reported_prefill_tps: Some(123.0),
        ..NodeSample::default()
    };
    let mut n = NodeTelemetry::new();
    n.on_scrape(Engine::Llamacpp, page(100.0, 0.1, 50.0, 0.5), t0);
    // Before two pages: only the engine's own gauge tells the prefill rate.
    assert_eq!(n.signals().prefill_tps, Some(123.0));
    n.info = EngineInfo { max_running: Some(2.0), ..EngineInfo::default() };
    // 900 prompt tokens in 0.5 s; 100 tokens generated in 2 s of generating.
    n.on_scrape(Engine::Llamacpp, page(1000.0, 0.6, 150.0, 2.5), t0 + Duration::from_secs(1));
    let s = n.signals();
    assert_eq!(s.prefill_tps, Some(1800.0));
    assert_eq!(s.itl_s, Some(0.02));
    assert_eq!(s.max_running, Some(2.0));
    assert_eq!((s.ttft_s, s.queue_s, s.service_s, s.kv_usage), (None, None, None, None));
    // The node now answers as vLLM: what llama.cpp's counters said is forgotten.
    n.on_scrape(
        Engine::Vllm,
        NodeSample { running: Some(0.0), ..NodeSample::default() },
        t0 + Duration::from_secs(2),
    );
    assert_eq!(n.engine, Some(Engine::Vllm));
    assert_eq!(n.recent, RecentStats::default());
    assert_eq!((n.signals().max_running, n.signals().prefill_tps), (None, None));
}

/// Used and total tokens stand in for a KV ratio the engine does not print (TGI, with its
/// batch token budget from `/info`); a reported hit rate stands in for the counters.
#[test]
fn token_counts_give_the_kv_share_where_no_ratio_is_printed() {
    let mut n = NodeTelemetry::new();
    let sample = NodeSample {
        kv_used_tokens: Some(8000.0),
        reported_prefix_hit_rate: Some(0.4),
        ..NodeSample::default()
    };
    n.on_scrape(Engine::Tgi, sample, Instant::now());
    assert_eq!(n.signals().kv_usage, None, "no capacity known yet");
    n.info = EngineInfo { kv_capacity_tokens: Some(32000.0), ..EngineInfo::default() };
    let s = n.signals();
    assert_eq!((s.kv_usage, s.kv_capacity_tokens), (Some(0.25), Some(32000.0)));
    assert_eq!(s.prefix_hit_rate, Some(0.4));
}
