//! Synthetic calls (gate items, judges, shadows, canaries) go through the dispatcher's one
//! entry point like any request: a gate run's calls count in their node's in-flight requests
//! and feed its breaker, a pool's shadows fail over from a failing node whose breaker then
//! opens, and no more synthetic calls run at once than `dispatch.max_synthetic_in_flight`
//! (gate items wait for room, shadows beyond it are dropped as `busy`).

use crate::common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use spillway::sim::SimKind;

const ADMIN: &str = "synthetic-admin-token";
const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// `items` golden items that only "Paris" passes.
fn golden(items: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-synthetic-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("golden.jsonl");
    let item = json!({"messages": [{"role": "user", "content": "Capital of France?"}], "reference": "Paris", "grader": {"type": "exact"}});
    std::fs::write(&path, format!("{item}\n").repeat(items)).unwrap();
    path
}

async fn gate_run(url: &str, task: &str, backend: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}/admin/gate/run"))
        .bearer_auth(ADMIN)
        .json(&json!({"task": task, "backend": backend}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The node of `backend` as `/admin/backends` shows it (`index`-th).
async fn node(url: &str, backend: &str, index: usize) -> Value {
    let all = admin_json(url, "/admin/backends", ADMIN).await;
    let b = all["backends"].as_array().unwrap().iter().find(|b| b["backend"] == backend).unwrap().clone();
    b["nodes"][index].clone()
}

/// An OpenAI-compatible upstream that answers "Paris" only once the test lets each request
/// through (`release`), and counts the requests it holds at once.
struct Held {
    url: String,
    release: Arc<tokio::sync::Semaphore>,
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

async fn held_upstream() -> Held {
    use axum::routing::post;
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let state = (Arc::clone(&release), Arc::clone(&now), Arc::clone(&most));
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let (release, now, most) = state.clone();
            async move {
                let holding = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(holding, Ordering::SeqCst);
                let permit = release.acquire().await.unwrap();
                now.fetch_sub(1, Ordering::SeqCst);
                drop(permit);
                let chunk = |delta: Value, finish: Value| {
                    format!("data: {}\n\n", json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
                };
                let text = format!(
                    "{}{}data: [DONE]\n\n",
                    chunk(json!({"role": "assistant", "content": "Paris"}), Value::Null),
                    chunk(json!({}), json!("stop")),
                );
                ([("content-type", "text/event-stream")], text)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Held { url, release, now, most }
}

#[tokio::test]
async fn a_gate_runs_calls_count_in_their_node_and_never_exceed_the_bound() {
    let upstream = held_upstream().await;
    let yaml = format!(
        r#"
admin_token_env: SYN_ADMIN
dispatch: {{max_synthetic_in_flight: 2}}
backends:
  - {{name: slow, kind: openai_compatible, base_url: "{}/v1", model: small}}
tasks:
  - {{name: capitals, backends: [slow], slo: {{ttft_ms: 5000}}, gate: {{golden: "{}", required: false, concurrency: 6}}}}
"#,
        upstream.url,
        golden(6).display()
    );
    let router = router(&yaml, &[("SYN_ADMIN", ADMIN)]).await;
    let url = router.url.clone();
    let run = tokio::spawn(async move { gate_run(&url, "capitals", "slow").await });
    let now = Arc::clone(&upstream.now);
    wait_until(Duration::from_secs(10), "two gate items at the upstream", || {
        let now = Arc::clone(&now);
        async move { now.load(Ordering::SeqCst) == 2 }
    })
    .await;
    let seen = node(&router.url, "slow", 0).await;
    assert_eq!(seen["in_flight"], 2, "the node counts the gate's calls in flight: {seen}");
    upstream.release.add_permits(100);
    let (status, result) = run.await.unwrap();
    assert_eq!((status, &result["result"]["passed"]), (200, &json!(true)), "{result}");
    assert_eq!(result["result"]["items"], 6, "{result}");
    assert_eq!(upstream.most.load(Ordering::SeqCst), 2, "gate concurrency 6, but at most 2 synthetic calls");
    let settled = node(&router.url, "slow", 0).await;
    assert_eq!(settled["in_flight"], 0, "{settled}");
}

#[tokio::test]
async fn a_gate_run_against_a_failing_node_opens_its_breaker() {
    let broken = sim(SimKind::OpenAi, "gpt-5.6", |a| a.error_rate = 1.0).await;
    let yaml = format!(
        r#"
admin_token_env: SYN_ADMIN
dispatch: {{max_attempts: 1, breaker: {{consecutive_failures: 2, open_secs: 600}}}}
backends:
  - {{name: broken, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - {{name: capitals, backends: [broken], slo: {{ttft_ms: 2000}}, gate: {{golden: "{}", required: false, concurrency: 1}}}}
"#,
        broken.base_url(),
        golden(4).display()
    );
    let router = router(&yaml, &[("SYN_ADMIN", ADMIN)]).await;
    assert_eq!(node(&router.url, "broken", 0).await["breaker"], "closed");
    let (status, result) = gate_run(&router.url, "capitals", "broken").await;
    assert_eq!((status, &result["result"]["passed"]), (200, &json!(false)), "{result}");
    let url = router.url.clone();
    wait_until(Duration::from_secs(5), "the failing node's breaker to open", || {
        let url = url.clone();
        async move { node(&url, "broken", 0).await["breaker"] == "open" }
    })
    .await;
    // Once open, no more gate items reach the node: the run's later items are breaker skips.
    let again = gate_run(&router.url, "capitals", "broken").await.1;
    assert_eq!(again["result"]["errors"], 4, "{again}");
}

#[tokio::test]
async fn a_pools_shadows_fail_over_from_a_failing_node_and_its_breaker_opens() {
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let failing = sim(SimKind::Vllm, LLAMA, |a| a.error_rate = 1.0).await;
    let healthy = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let yaml = format!(
        r#"
admin_token_env: SYN_ADMIN
dispatch: {{breaker: {{consecutive_failures: 2, open_secs: 600}}}}
backends:
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: pool, kind: vllm, endpoints: ["{}", "{}"], model: {LLAMA}}}
tasks:
  - {{name: t, backends: [hosted, pool], strategy: priority, slo: {{ttft_ms: 2000}}, shadow: {{rate: 1.0, backends: [pool]}}}}
"#,
        hosted.base_url(),
        failing.base_url(),
        healthy.base_url()
    );
    let router = router(&yaml, &[("SYN_ADMIN", ADMIN)]).await;
    router.wait_fresh().await;
    let shadows = |m: &str| series_sum(m, "spillway_shadow_requests_total", &[("backend", "pool")]);
    for sent in 1..=12 {
        let (status, _, _) = post_json(&router.url, &body("t", false)).await;
        assert_eq!(status, 200);
        // One at a time, so that each shadow sees the breaker the last one left. A shadow may
        // also be dropped (`no_capacity`) when a scrape is late on a loaded machine.
        wait_until(Duration::from_secs(10), format!("shadow {sent} ended"), || async {
            shadows(&metrics_text(&router.url).await).unwrap_or(0.0) >= sent as f64
        })
        .await;
    }
    let m = metrics_text(&router.url).await;
    assert!(!m.contains(r#"spillway_shadow_requests_total{backend="pool",result="error""#), "{m}");
    let ok = series_sum(&m, "spillway_shadow_requests_total", &[("backend", "pool"), ("result", "ok")]);
    assert!(ok.unwrap_or(0.0) >= 6.0, "most shadows answered, through the failover: {m}");
    assert_eq!(node(&router.url, "pool", 0).await["breaker"], "open", "the failing node's breaker opened");
    assert_eq!(node(&router.url, "pool", 1).await["breaker"], "closed");
}

#[tokio::test]
async fn shadows_beyond_the_bound_are_dropped_as_busy() {
    let primary = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let upstream = held_upstream().await;
    let yaml = format!(
        r#"
dispatch: {{max_synthetic_in_flight: 1}}
backends:
  - {{name: primary, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: slow, kind: openai_compatible, base_url: "{}/v1", model: small}}
tasks:
  - {{name: t, backends: [primary, slow], strategy: priority, slo: {{ttft_ms: 5000}}, shadow: {{rate: 1.0}}}}
"#,
        primary.base_url(),
        upstream.url
    );
    let router = router(&yaml, &[]).await;
    let series = |result: &str| {
        format!(r#"spillway_shadow_requests_total{{backend="slow",result="{result}",task="t"}}"#)
    };
    let (status, _, _) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(status, 200);
    let now = Arc::clone(&upstream.now);
    wait_until(Duration::from_secs(10), "the first shadow at the upstream", || {
        let now = Arc::clone(&now);
        async move { now.load(Ordering::SeqCst) == 1 }
    })
    .await;
    for _ in 0..3 {
        let (status, _, _) = post_json(&router.url, &body("t", false)).await;
        assert_eq!(status, 200);
    }
    assert_eq!(wait_metric(&router.url, &series("busy"), 3.0, Duration::from_secs(10)).await, 3.0);
    upstream.release.add_permits(10);
    assert_eq!(wait_metric(&router.url, &series("ok"), 1.0, Duration::from_secs(10)).await, 1.0);
    assert_eq!(upstream.most.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_gate_runs_judge_calls_are_ledgered_and_its_items_are_not() {
    let answerer = sim(SimKind::OpenAi, "gpt-5.6", |a| a.reply = Some("Paris".into())).await;
    let judge = sim(SimKind::Anthropic, "claude-sonnet-4-5", |a| a.reply = Some("9".into())).await;
    let dir = golden(1);
    let judged = dir.with_file_name("judged.jsonl");
    let item = json!({"messages": [{"role": "user", "content": "Capital of France?"}], "grader": {"type": "judge", "rubric": "Names Paris."}});
    std::fs::write(&judged, format!("{item}\n{item}\n")).unwrap();
    let ledger = temp_ledger_url();
    let yaml = format!(
        r#"
admin_token_env: SYN_ADMIN
ledger: {{url: "{ledger}"}}
backends:
  - {{name: answerer, kind: openai, base_url: "{}/v1", model: gpt-5.6, price: {{input_per_mtok: 1, output_per_mtok: 1}}}}
  - {{name: judge, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5, price: {{input_per_mtok: 3, output_per_mtok: 15}}}}
tasks:
  - {{name: capitals, backends: [answerer], slo: {{ttft_ms: 2000}}, gate: {{golden: "{}", judge: judge, required: false}}}}
"#,
        answerer.base_url(),
        judge.base_url(),
        judged.display()
    );
    let router = router(&yaml, &[("SYN_ADMIN", ADMIN)]).await;
    let (status, result) = gate_run(&router.url, "capitals", "answerer").await;
    assert_eq!((status, &result["result"]["passed"]), (200, &json!(true)), "{result}");
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    wait_until(Duration::from_secs(10), "two judge rows in the ledger", || async {
        let rows = store.query(0, i64::MAX).await.unwrap();
        if rows.len() >= 2 {
            Ok(())
        } else {
            Err(format!("{rows:#?}"))
        }
    })
    .await;
    wait_ledger_written(&router.url).await;
    let rows = store.query(0, i64::MAX).await.unwrap();
    assert_eq!(rows.len(), 2, "the items' cost is in the run's result, not the ledger: {rows:#?}");
    for row in &rows {
        assert_eq!((row.client_key.as_deref(), row.backend.as_str()), (Some("judge"), "judge"), "{row:?}");
        assert_eq!(row.task, "capitals");
        assert!(row.cost_usd.is_some_and(|c| !c.is_zero()), "{row:?}");
    }
    assert!(
        result["result"]["cost_per_item_usd"].as_str().is_some_and(|c| c.parse::<f64>().unwrap() > 0.0),
        "{result}"
    );
}
