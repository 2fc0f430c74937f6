//! Fleet scenarios against the real router and simulated nodes: the fleet serves what fits,
//! spills the rest before the SLO breaks, survives a node's death, takes a hosted provider's
//! traffic home into its reserve, and serves a pool whose telemetry cannot be read when
//! nothing else can. Short runs; `benches/scenarios.rs` runs them long.

use crate::common;

use std::time::Duration;

use common::scenario::*;
use common::{get_json, post_json, series_sum, wait_until, ONE_AT_A_TIME};
use spillway::sim::SimKind;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_load_at_60_percent_stays_local() {
    let _one = ONE_AT_A_TIME.lock().await;
    let fleet = start_fleet(2).await;
    let rps = fleet_capacity_rps(2) * 0.6;
    let logs = drive(&fleet.url, &[(rps, 4.0)], None).await;
    let r = report(&logs, secs(0.0), secs(4.0));
    assert_eq!(r.errors, 0, "{r:?}");
    assert!(r.local_share >= 0.95, "{r:?}");
    assert!(r.slo_attainment >= 0.95, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ramp_to_150_percent_spills_and_keeps_ttft_inside_the_slo() {
    let _one = ONE_AT_A_TIME.lock().await;
    let fleet = start_fleet(2).await;
    let cap = fleet_capacity_rps(2);
    let logs = drive(&fleet.url, &[(cap * 0.6, 2.0), (cap * 1.5, 4.0)], None).await;
    let peak = report(&logs, secs(2.5), secs(6.0));
    assert_eq!(peak.errors, 0, "{peak:?}");
    assert!(peak.ttft_p95_ms <= SLO_MS as f64, "{peak:?}");
    assert!(peak.local_share < 0.8 && peak.local_share > 0.3, "spilled, but the fleet stayed busy: {peak:?}");
    assert!(peak.hosted_tokens > 0);
    // Every spill was counted with its reason: here the reserve (or the queue it protects).
    let text = common::metrics_text(&fleet.url).await;
    let counted = common::series_sum(&text, "spillway_spills_total", &[]).unwrap_or(0.0);
    let reserve = common::series_sum(&text, "spillway_spills_total", &[("reason", "reserve")]).unwrap_or(0.0);
    assert!(counted > 0.0 && reserve > 0.0, "{text}");
    let hosted = [("backend", "hosted"), ("outcome", "completed")];
    assert_eq!(common::series_sum(&text, "spillway_requests_total", &hosted), Some(counted), "{text}");
    // The pool's spilled prompt tokens per second (over the last minute) tell an autoscaler so.
    let spilled = [("backend", "local")];
    let rate = common::series_sum(&text, "spillway_pool_spilled_tokens_per_second", &spilled);
    assert!(rate.is_some_and(|r| r > 0.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_load_costs_no_errors_for_requests_not_yet_started() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut fleet = start_fleet(2).await;
    let victim = fleet.nodes[1].take().unwrap();
    let kill: Box<dyn FnOnce() + Send> = Box::new(move || victim.shutdown());
    let rps = fleet_capacity_rps(2) * 0.6;
    let logs = drive(&fleet.url, &[(rps, 5.0)], Some((secs(2.0), kill))).await;
    // Requests started after the kill (plus a moment for the kill to land) all succeed.
    let after = report(&logs, secs(2.1), secs(5.0));
    assert_eq!(after.errors, 0, "{after:?}");
    let before = report(&logs, secs(0.0), secs(1.9));
    assert_eq!(before.errors, logs.iter().filter(|l| l.started < secs(1.9) && l.result.is_err()).count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_outage_brings_its_traffic_home_into_the_reserve() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut fleet = start_fleet(2).await;
    let hosted = fleet.hosted.take().unwrap();
    let outage: Box<dyn FnOnce() + Send> = Box::new(move || hosted.shutdown());
    // The fleet's whole capacity, a quarter above what the pool takes with its 20 % reserve kept
    // (13 of 16 slots a node): once its slots have filled, in about a second, some spills while
    // hosted is up (3 of 43 here when quiet; under a full test run's load, fewer).
    let rps = fleet_capacity_rps(2);
    let logs = drive(&fleet.url, &[(rps, 6.0)], Some((secs(2.5), outage))).await;
    let before = report(&logs, secs(1.0), secs(2.5));
    let after = report(&logs, secs(3.5), secs(6.0));
    assert!(before.local_share < 1.0, "some traffic was hosted before: {before:?}");
    assert!(after.local_share > 0.99, "it came home: {after:?}");
    assert_eq!(after.errors, 0, "{after:?}");
}

const ADMIN: &str = "unmeasured-admin-token";

/// A pool of one node that answers chat completions but not `/metrics` (404: an OpenAI
/// simulator), with room for two sequences, alone in one task and before a hosted backend in
/// another.
fn unread_pool(node: &str, hosted: &str) -> String {
    format!(
        r#"
admin_token_env: SPILLWAY_ADMIN_TOKEN
backends:
  - {{name: pool, kind: vllm, endpoints: ["{node}"], model: m, max_running: 2}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt-5.6}}
tasks:
  - {{name: only-pool, backends: [pool], slo: {{ttft_ms: 5000}}}}
  - {{name: with-hosted, backends: [pool, hosted], slo: {{ttft_ms: 5000}}}}
"#
    )
}

fn chat(task: &str, stream: bool, max_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "model": task, "stream": stream, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "hello there"}],
    })
}

fn header<'h>(headers: &'h reqwest::header::HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The router's requests in flight on the pool's one node, and its telemetry age.
async fn pool_node(url: &str) -> (u64, serde_json::Value) {
    let all = common::admin_json(url, "/admin/backends", ADMIN).await;
    let node = &all["backends"][0]["nodes"][0];
    (node["in_flight"].as_u64().unwrap(), node["telemetry_age_s"].clone())
}

async fn wait_in_flight(url: &str, want: u64) {
    wait_until(Duration::from_secs(10), format!("{want} in flight on the pool's node"), || async move {
        let (n, _) = pool_node(url).await;
        if n == want {
            Ok(())
        } else {
            Err(format!("{n} in flight"))
        }
    })
    .await
}

async fn unmeasured_count(url: &str, task: &str) -> Option<f64> {
    let text = common::metrics_text(url).await;
    series_sum(&text, "spillway_unmeasured_requests_total", &[("task", task), ("backend", "pool")])
}

/// A streamed request whose answer has started (committed) and is left unread: it stays in
/// flight until dropped.
async fn open_stream(url: &str, task: &str) -> reqwest::Response {
    let resp = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&chat(task, true, 200))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(resp.headers(), "x-spillway-headroom"), Some("unmeasured"));
    resp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_metrics_cannot_be_read_is_served_within_its_capacity_when_nothing_else_can() {
    let _one = ONE_AT_A_TIME.lock().await;
    // 10 tokens a second: a 2-token answer is quick, a 200-token stream lasts 20 s.
    let node = common::sim(SimKind::OpenAi, "m", |a| {
        a.tokens_per_sec = 10.0;
        a.output_tokens = 200;
    })
    .await;
    let hosted = common::sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let yaml = unread_pool(&node.base_url(), &hosted.base_url());
    let env = [("SPILLWAY_ADMIN_TOKEN", ADMIN)];
    let router = common::router_unscraped(&yaml, &env, Default::default()).await;
    let url = router.url.as_str();
    // The node has never been read: before blind serving, every request to `only-pool` was
    // shed with 429 `no capacity … stale`.
    let ready = get_json(url, "/readyz").await;
    assert_eq!((ready["local_nodes"].as_u64(), ready["fresh_local_nodes"].as_u64()), (Some(1), Some(0)));
    assert_eq!(pool_node(url).await, (0, serde_json::Value::Null), "never scraped");

    // Nothing else can take it: served, and the answer says it was served blind.
    let (status, headers, json) = post_json(url, &chat("only-pool", false, 2)).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(header(&headers, "x-spillway-backend"), Some("pool"));
    assert_eq!(header(&headers, "x-spillway-headroom"), Some("unmeasured"));
    assert_eq!(header(&headers, "x-spillway-predicted-ttft-ms"), None, "nothing to predict from");
    assert_eq!(header(&headers, "x-spillway-spill"), None);
    wait_until(Duration::from_secs(10), "the blind request to be counted", || async {
        unmeasured_count(url, "only-pool").await.filter(|n| *n == 1.0)
    })
    .await;
    wait_in_flight(url, 0).await;

    // max_running is 2: two open streams fill the node by the router's own count, a third is shed.
    let first = open_stream(url, "only-pool").await;
    let second = open_stream(url, "only-pool").await;
    assert_eq!(pool_node(url).await.0, 2);
    let (status, headers, json) = post_json(url, &chat("only-pool", false, 2)).await;
    assert_eq!(status, 429, "{json}");
    assert_eq!(json["error"]["code"], "shed", "{json}");
    assert!(json["error"]["message"].as_str().unwrap().contains("stale"), "{json}");
    assert_eq!(header(&headers, "retry-after"), Some("1"));

    // A hosted backend in the task takes it: stale still means spill, as before.
    let spilled = |task: &'static str| async move {
        let (status, headers, json) = post_json(url, &chat(task, false, 2)).await;
        assert_eq!(status, 200, "{json}");
        assert_eq!(header(&headers, "x-spillway-backend"), Some("hosted"));
        assert_eq!(header(&headers, "x-spillway-spill"), Some("stale"));
        assert_eq!(header(&headers, "x-spillway-headroom"), None);
    };
    spilled("with-hosted").await;
    drop((first, second));
    wait_in_flight(url, 0).await;
    // The pool has room again, and still a task with a hosted backend spills to it.
    spilled("with-hosted").await;
    let (status, headers, _) = post_json(url, &chat("only-pool", false, 2)).await;
    assert_eq!((status, header(&headers, "x-spillway-headroom")), (200, Some("unmeasured")));

    // Counted by task and backend: the two streams (cancelled, but served) and two answers.
    wait_until(Duration::from_secs(10), "four blind requests counted", || async {
        unmeasured_count(url, "only-pool").await.filter(|n| *n == 4.0)
    })
    .await;
    assert_eq!(unmeasured_count(url, "with-hosted").await, None);
    let text = common::metrics_text(url).await;
    let hosted_spills = [("task", "with-hosted"), ("reason", "stale")];
    assert_eq!(series_sum(&text, "spillway_spills_total", &hosted_spills), Some(2.0), "{text}");
    common::promtool_check(&text);
}
