//! `/metrics` on a real scrape: Prometheus's own `promtool check metrics` accepts it, and the
//! series say what happened: requests by outcome, a failover from a failing hosted backend,
//! provider failures by status, TTFT histograms, node gauges, SLO windows.

use crate::common;

use common::{body, post_json, router, sim};
use prometheus_parse::{Sample, Scrape, Value};
use spillway::sim::SimKind;

fn scrape_text(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s: &&Sample| s.metric == name)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            Value::Histogram(ref h) => h.iter().map(|c| c.count).fold(0.0, f64::max),
            Value::Summary(_) => f64::NAN,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_pass_promtool_and_tell_what_happened() {
    let node = sim(SimKind::Vllm, "llama", |_| {}).await;
    let broken = sim(SimKind::OpenAi, "gpt", |a| a.error_rate = 1.0).await;
    let hosted = sim(SimKind::Anthropic, "claude", |_| {}).await;
    let yaml = format!(
        r#"
backends:
  - {{name: pool, kind: vllm, endpoints: ["{node}"], model: llama, max_running: 8}}
  - {{name: flaky, kind: openai, base_url: "{broken}/v1", model: gpt, price: {{input_per_mtok: 1, output_per_mtok: 2}}}}
  - {{name: claude, kind: anthropic, base_url: "{hosted}", model: claude, price: {{input_per_mtok: 3, output_per_mtok: 15}}}}
tasks:
  - {{name: local, backends: [pool], slo: {{ttft_ms: 2000}}}}
  - {{name: hosted, backends: [flaky, claude], strategy: priority, slo: {{ttft_ms: 2000, objective: 0.95}}}}
dispatch: {{backoff_base_ms: 1, backoff_max_ms: 2}}
"#,
        node = node.base_url(),
        broken = broken.base_url(),
        hosted = hosted.base_url(),
    );
    let r = router(&yaml, &[]).await;
    for _ in 0..5 {
        assert_eq!(post_json(&r.url, &body("local", false)).await.0, 200);
        assert_eq!(post_json(&r.url, &body("hosted", false)).await.0, 200);
    }
    let text = reqwest::get(format!("{}/metrics", r.url)).await.unwrap().text().await.unwrap();

    // Prometheus's own linter accepts the exposition.
    common::promtool_check(&text);

    let s = scrape_text(&text);
    let req = |task, backend, outcome| {
        value(&s, "spillway_requests_total", &[("task", task), ("backend", backend), ("outcome", outcome)])
    };
    assert_eq!(req("local", "pool", "completed"), Some(5.0));
    assert_eq!(req("hosted", "claude", "completed"), Some(5.0));
    assert_eq!(
        value(&s, "spillway_failovers_total", &[("task", "hosted"), ("from", "flaky"), ("to", "claude")]),
        Some(5.0),
        "every hosted request failed over"
    );
    let failures: f64 = s
        .samples
        .iter()
        .filter(|x| {
            x.metric == "spillway_provider_failures_total" && x.labels.get("backend") == Some("flaky")
        })
        .map(|x| if let Value::Counter(v) = x.value { v } else { 0.0 })
        .sum();
    assert_eq!(failures, 5.0);
    assert_eq!(value(&s, "spillway_provider_calls_total", &[("backend", "claude")]), Some(5.0));
    assert_eq!(value(&s, "spillway_provider_successes_total", &[("backend", "flaky")]), None);
    assert!(
        value(&s, "spillway_backend_last_success_timestamp_seconds", &[("backend", "flaky")]) == Some(0.0)
    );
    assert!(
        value(&s, "spillway_backend_last_success_timestamp_seconds", &[("backend", "claude")]).unwrap() > 1e9
    );
    assert_eq!(
        value(&s, "spillway_ttft_seconds_count", &[("task", "local"), ("backend", "pool")]),
        Some(5.0)
    );
    let output =
        value(&s, "spillway_tokens_total", &[("task", "hosted"), ("backend", "claude"), ("kind", "output")]);
    assert!(output.unwrap() > 0.0);
    assert!(
        value(&s, "spillway_cost_usd_total", &[("task", "hosted"), ("backend", "claude")]).unwrap() > 0.0
    );
    assert_eq!(
        value(&s, "spillway_node_headroom", &[("backend", "pool")]).map(|h| h <= 8.0 * 0.8),
        Some(true)
    );
    assert!(value(&s, "spillway_node_telemetry_age_seconds", &[("backend", "pool")]).unwrap() < 5.0);
    assert_eq!(value(&s, "spillway_node_quarantined", &[("backend", "pool")]), Some(0.0));
    assert_eq!(
        value(&s, "spillway_pool_spilled_tokens_per_second", &[("backend", "pool")]),
        Some(0.0),
        "nothing spilled: present, at 0"
    );
    assert_eq!(value(&s, "spillway_breaker_state", &[("backend", "claude")]), Some(0.0));
    let slo = |task, slo, window| {
        value(&s, "spillway_slo_attainment_ratio", &[("task", task), ("slo", slo), ("window", window)])
    };
    assert_eq!(slo("local", "ttft", "5m"), Some(1.0));
    assert_eq!(slo("hosted", "availability", "6h"), Some(1.0), "failover hid the failures");
    assert_eq!(
        value(&s, "spillway_slo_burn_rate", &[("task", "local"), ("slo", "ttft"), ("window", "1h")]),
        Some(0.0)
    );
    assert_eq!(value(&s, "spillway_slo_objective_ratio", &[("task", "hosted"), ("slo", "ttft")]), Some(0.95));
    assert!(
        value(&s, "spillway_ttft_percentile_seconds", &[("task", "local"), ("percentile", "p99")]).unwrap()
            > 0.0
    );
}
