//! Hosted quotas in the request path: a backend over its per-minute quota is skipped (not
//! failed), batch requests stop earlier than interactive ones, and router replicas sharing
//! Redis hold one quota between them.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use spillway::sim::SimKind;

fn config(a: &str, b: &str, quota: &str, extra: &str) -> String {
    format!(
        r#"
backends:
  - {{name: a, kind: openai, base_url: "{a}/v1", model: gpt-5.6, quota: {quota}}}
  - {{name: b, kind: openai, base_url: "{b}/v1", model: gpt-5.6}}
tasks:
  - {{name: t, backends: [a, b], slo: {{ttft_ms: 2000}}}}
  - {{name: only-a, backends: [a], slo: {{ttft_ms: 2000}}}}
{extra}
"#
    )
}

/// The wall clock the routers count quota minutes by, moved only by the test: it starts 30 s
/// into a minute, so no test crosses a minute boundary unless it moves the clock across one.
struct QuotaClock(Arc<AtomicU64>);

impl QuotaClock {
    fn new() -> QuotaClock {
        QuotaClock(Arc::new(AtomicU64::new(29_000_000 * 60_000 + 30_000)))
    }

    fn options(&self) -> spillway::app::Options {
        let now = Arc::clone(&self.0);
        spillway::app::Options {
            quota_clock: Some(Arc::new(move || now.load(Ordering::SeqCst))),
            ..Default::default()
        }
    }

    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

async fn backend_of(url: &str, task: &str, priority: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("x-spillway-priority", priority)
        .json(&body(task, false))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let backend = resp.headers().get("x-spillway-backend").map(|v| v.to_str().unwrap().to_string());
    let json: serde_json::Value = resp.json().await.unwrap();
    (status, backend.unwrap_or_else(|| json["error"]["code"].as_str().unwrap_or("").to_string()))
}

#[tokio::test]
async fn a_backend_over_quota_is_skipped_not_failed() {
    let a = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let b = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let clock = QuotaClock::new();
    let router =
        router_with(&config(&a.base_url(), &b.base_url(), "{rpm: 2}", ""), &[], clock.options()).await;
    let mut served = Vec::new();
    for _ in 0..4 {
        served.push(backend_of(&router.url, "t", "interactive").await);
    }
    assert_eq!(served, [(200, "a".into()), (200, "a".into()), (200, "b".into()), (200, "b".into())]);
    // With nowhere else to go, the request is shed with 429, not failed.
    assert_eq!(backend_of(&router.url, "only-a", "interactive").await, (429, "shed".into()));
    let text = metrics_text(&router.url).await;
    assert_eq!(
        series_sum(&text, "spillway_provider_failures_total", &[]),
        None,
        "skips are not failures: {text}"
    );
    assert_eq!(series_sum(&text, "spillway_quota_shared_state_up", &[]), None, "no Redis configured");
}

#[tokio::test]
async fn a_quota_starts_over_at_the_minute_boundary() {
    let a = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let b = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let clock = QuotaClock::new();
    let router =
        router_with(&config(&a.base_url(), &b.base_url(), "{rpm: 2}", ""), &[], clock.options()).await;
    let used_up = [(200, "a".into()), (200, "a".into()), (429, "shed".into())];
    let mut served = Vec::new();
    for _ in 0..3 {
        served.push(backend_of(&router.url, "only-a", "interactive").await);
    }
    assert_eq!(served, used_up);
    // 29.999 s on, still the same minute.
    clock.advance(29_999);
    next_snapshot(&router).await;
    assert_eq!(backend_of(&router.url, "only-a", "interactive").await, (429, "shed".into()));
    // One millisecond more: a new minute, and the whole quota again.
    clock.advance(1);
    next_snapshot(&router).await;
    let mut served = Vec::new();
    for _ in 0..3 {
        served.push(backend_of(&router.url, "only-a", "interactive").await);
    }
    assert_eq!(served, used_up, "the next minute has a quota of its own");
}

#[tokio::test]
async fn batch_stops_at_70_percent_of_a_quota_and_interactive_uses_all_of_it() {
    let a = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let b = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let clock = QuotaClock::new();
    let router =
        router_with(&config(&a.base_url(), &b.base_url(), "{rpm: 10}", ""), &[], clock.options()).await;
    let mut batch_ok = 0;
    while backend_of(&router.url, "only-a", "batch").await.0 == 200 {
        batch_ok += 1;
        assert!(batch_ok <= 10);
    }
    assert_eq!(batch_ok, 7);
    let mut interactive_ok = 0;
    while backend_of(&router.url, "only-a", "interactive").await.0 == 200 {
        interactive_ok += 1;
        assert!(interactive_ok <= 10);
    }
    assert_eq!(interactive_ok, 3, "interactive takes the last 30 %");
}

#[tokio::test]
async fn replicas_sharing_redis_hold_one_quota() {
    let a = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let b = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    // A backend name of its own per run, so earlier runs' counters in Redis do not count.
    let name = format!("a{}x{}", std::process::id(), rand::random::<u32>());
    let yaml =
        config(&a.base_url(), &b.base_url(), "{rpm: 4}", "state: {redis_url: \"redis://127.0.0.1:6379\"}")
            .replace("{name: a,", &format!("{{name: {name},"))
            .replace("[a, b]", &format!("[{name}, b]"))
            .replace("[a]", &format!("[{name}]"));
    let clock = QuotaClock::new();
    let one = router_with(&yaml, &[], clock.options()).await;
    let two = router_with(&yaml, &[], clock.options()).await;
    let mut on_a = 0;
    for i in 0..8 {
        let url = if i % 2 == 0 { &one.url } else { &two.url };
        let (status, backend) = backend_of(url, "t", "interactive").await;
        assert_eq!(status, 200);
        if backend == name {
            on_a += 1;
        }
    }
    assert_eq!(on_a, 4, "two replicas, one quota of 4 a minute");
    let text = metrics_text(&one.url).await;
    assert_eq!(series_sum(&text, "spillway_quota_shared_state_up", &[("store", "redis")]), Some(1.0));
}
