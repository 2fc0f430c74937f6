//! Safe failover end to end: real router, real simulators, real sockets.

use crate::common;

use std::time::Duration;

use common::*;
use spillway::sim::{SimArgs, SimKind};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// A task `t` over a local node (`first`) then hosted OpenAI (`second`), plus a restricted task.
fn two_backends(first: &str, second: &str, extra: &str) -> String {
    format!(
        r#"
backends:
  - {{name: local, kind: vllm, endpoints: [{first}], model: {LLAMA}, region: eu-west-1}}
  - {{name: hosted, kind: openai, base_url: "{second}/v1", model: gpt-5.6, region: us}}
tasks:
  - {{name: t, backends: [local, hosted], slo: {{ttft_ms: 300}}}}
  - {{name: secret, backends: [local, hosted], data_class: restricted, slo: {{ttft_ms: 300}}}}
policy:
  data_classes:
    restricted: {{regions: [eu-west-1], allow_hosted: false}}
dispatch:
  ttft_deadline_factor: 1.0
  backoff_base_ms: 1
  backoff_max_ms: 5
{extra}
"#
    )
}

fn failing(status: u16) -> impl FnOnce(&mut SimArgs) {
    move |a: &mut SimArgs| {
        a.error_rate = 1.0;
        a.error_status = status;
    }
}

async fn fails_over_on(status: u16) {
    let local = sim(SimKind::Vllm, LLAMA, failing(status)).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&two_backends(&local.base_url(), &hosted.base_url(), ""), &[]).await;
    let s = post_stream(&router.url, &body("t", true)).await;
    assert_eq!(s.status, 200, "{:?}", s.data);
    assert_eq!(s.header("x-spillway-backend"), Some("hosted"));
    assert_eq!(s.header("x-spillway-attempts"), Some("2"));
    assert!(s.done(), "a whole answer ends with [DONE]");
    assert!(!s.text().is_empty());
}

#[tokio::test]
async fn fails_over_on_503_before_the_first_token() {
    fails_over_on(503).await;
}

#[tokio::test]
async fn fails_over_on_429_before_the_first_token() {
    fails_over_on(429).await;
}

#[tokio::test]
async fn fails_over_when_the_first_token_is_late() {
    let local = sim(SimKind::Vllm, LLAMA, |a| a.hang_rate = 1.0).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&two_backends(&local.base_url(), &hosted.base_url(), ""), &[]).await;
    let started = std::time::Instant::now();
    let (status, headers, json) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(headers["x-spillway-backend"], "hosted");
    assert_eq!(headers["x-spillway-attempts"], "2");
    // The hang is cut at the deadline (300 ms × 1.0), not waited out.
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(json["choices"][0]["message"]["content"].as_str().is_some_and(|t| !t.is_empty()));
}

#[tokio::test]
async fn does_not_fail_over_on_400() {
    let local = sim(SimKind::Vllm, LLAMA, failing(400)).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&two_backends(&local.base_url(), &hosted.base_url(), ""), &[]).await;
    let (status, _, json) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(status, 400, "{json}");
    assert_eq!(json["error"]["type"], "invalid_request_error");
    assert!(json["error"]["message"].as_str().unwrap().contains("backend `local`"), "{json}");
}

#[tokio::test]
async fn a_stream_that_breaks_after_the_first_token_ends_with_an_in_band_error() {
    let local = sim(SimKind::Vllm, LLAMA, |a| a.drop_after = Some(3)).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&two_backends(&local.base_url(), &hosted.base_url(), ""), &[]).await;
    let s = post_stream(&router.url, &body("t", true)).await;
    assert_eq!(s.status, 200);
    assert_eq!(s.header("x-spillway-backend"), Some("local"));
    assert!(!s.done(), "never a clean [DONE] after a broken stream: {:?}", s.data);
    let last: serde_json::Value = serde_json::from_str(s.data.last().unwrap()).unwrap();
    assert!(last["error"]["message"].is_string(), "{last}");
    assert!(last["error"]["type"].is_string(), "{last}");
    // Nothing stitched: only the local node's three words reached the client.
    let words = s.text().split_whitespace().count();
    assert!((1..=3).contains(&words), "{:?}", s.text());
}

#[tokio::test]
async fn policy_keeps_restricted_data_off_hosted_even_when_the_fleet_is_down() {
    let local = sim(SimKind::Vllm, LLAMA, failing(503)).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&two_backends(&local.base_url(), &hosted.base_url(), ""), &[]).await;
    let (status, _, json) = post_json(&router.url, &body("secret", false)).await;
    assert_eq!(status, 503, "{json}");
    let message = json["error"]["message"].as_str().unwrap();
    assert!(message.contains("local"), "{message}");
    assert!(!message.contains("hosted"), "hosted was never tried: {message}");
    // The same request for an unrestricted task does reach hosted.
    let (status, headers, _) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-spillway-backend"], "hosted");
}

#[tokio::test]
async fn breaker_opens_on_failures_and_recovers_after_a_probe() {
    let local = sim(SimKind::Vllm, LLAMA, failing(503)).await;
    let addr = local.addr;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let extra = "  breaker: {consecutive_failures: 2, open_secs: 1}";
    let router = router(&two_backends(&local.base_url(), &hosted.base_url(), extra), &[]).await;
    for _ in 0..2 {
        let (_, headers, _) = post_json(&router.url, &body("t", false)).await;
        assert_eq!(headers["x-spillway-attempts"], "2");
    }
    // Open: the local node is skipped without a call.
    let (_, headers, _) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(headers["x-spillway-backend"], "hosted");
    assert_eq!(headers["x-spillway-attempts"], "1", "open breaker: no call to the failing node");
    // The node heals; after open_secs one probe goes through and closes the breaker.
    local.shutdown();
    let _healed = sim_at(addr, SimKind::Vllm, LLAMA, |_| {}).await;
    // open_secs later the snapshot shows the breaker half-open (1), and planning offers the node.
    wait_until(Duration::from_secs(5), "the local breaker to turn half-open", || async {
        let text = metrics_text(&router).await;
        match series_sum(&text, "spillway_breaker_state", &[("backend", "local")]) {
            Some(1.0) => Ok(()),
            seen => Err(format!("state {seen:?}")),
        }
    })
    .await;
    let (_, headers, _) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(headers["x-spillway-backend"], "local");
    let (_, headers, _) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(headers["x-spillway-backend"], "local");
}

#[tokio::test]
async fn a_full_node_spills_to_hosted() {
    let local = sim(SimKind::Vllm, LLAMA, |a| a.token_delay_ms = 40).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let yaml = two_backends(&local.base_url(), &hosted.base_url(), "")
        .replace("region: eu-west-1}", "region: eu-west-1, max_inflight_per_node: 2}");
    let router = router(&yaml, &[]).await;
    let url = router.url.clone();
    let requests = (0..6).map(|_| {
        let url = url.clone();
        tokio::spawn(async move { post_stream(&url, &body("t", true)).await })
    });
    let mut served = std::collections::BTreeMap::<String, u32>::new();
    for r in futures::future::join_all(requests).await {
        let s = r.unwrap();
        assert!(s.done());
        *served.entry(s.header("x-spillway-backend").unwrap().to_string()).or_default() += 1;
    }
    assert_eq!(served.get("local"), Some(&2), "{served:?}");
    assert_eq!(served.get("hosted"), Some(&4), "{served:?}");
}

#[tokio::test]
async fn everything_failing_is_a_503_that_lists_each_attempt() {
    let local = sim(SimKind::Vllm, LLAMA, failing(500)).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", failing(503)).await;
    let router = router(&two_backends(&local.base_url(), &hosted.base_url(), ""), &[]).await;
    let (status, headers, json) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(status, 503, "{json}");
    assert!(headers.contains_key("retry-after"));
    let message = json["error"]["message"].as_str().unwrap();
    assert!(message.contains("local: server_error 500"), "{message}");
    assert!(message.contains("hosted: overloaded 503"), "{message}");
}

#[tokio::test]
async fn adaptive_weights_move_traffic_off_a_failing_provider() {
    let a = sim(SimKind::OpenAi, "gpt-5.6", failing(503)).await;
    let b = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let yaml = format!(
        r#"
backends:
  - {{name: a, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: b, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - {{name: t, backends: [a, b], slo: {{ttft_ms: 1000}}}}
dispatch: {{breaker: {{consecutive_failures: 1000, error_rate: 1.0, min_requests: 1000}}}}
balancing: {{interval_secs: 1}}
"#,
        a.base_url(),
        b.base_url()
    );
    let router = router(&yaml, &[]).await;
    // While a's availability is still 1 it is first in every chain: each request fails over.
    let (_, headers, _) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(
        (&headers["x-spillway-backend"], &headers["x-spillway-attempts"]),
        (&"b".parse().unwrap(), &"2".parse().unwrap())
    );
    // One interval later the PID has cut a's availability: b comes first, no failed call.
    let text = wait_until(Duration::from_secs(5), "the PID to cut a's availability", || async {
        let text = metrics_text(&router.url).await;
        if series_sum(&text, "spillway_backend_availability", &[("backend", "a")]) == Some(0.0) {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    assert_eq!(series_sum(&text, "spillway_backend_weight", &[("task", "t"), ("backend", "b")]), Some(1.0));
    let first = |text: &str, backend| {
        series_sum(text, "spillway_first_choice_total", &[("task", "t"), ("backend", backend)])
    };
    assert_eq!(first(&text, "a"), Some(1.0), "chain choice is counted: {text}");
    for _ in 0..5 {
        let (_, headers, _) = post_json(&router.url, &body("t", false)).await;
        assert_eq!(headers["x-spillway-attempts"], "1");
        assert_eq!(headers["x-spillway-backend"], "b");
    }
    let text = metrics_text(&router.url).await;
    assert_eq!(first(&text, "b"), Some(5.0), "{text}");
}

#[tokio::test]
async fn an_upstream_retry_after_holds_the_node_and_reaches_the_client() {
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |a| a.rpm = 1).await;
    let yaml = format!(
        r#"
backends:
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - {{name: t, backends: [hosted], slo: {{ttft_ms: 1000}}}}
"#,
        hosted.base_url()
    );
    let router = router(&yaml, &[]).await;
    let call = || async {
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", router.url))
            .json(&body("t", false))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let wait: Option<u64> =
            resp.headers().get("retry-after").map(|v| v.to_str().unwrap().parse().unwrap());
        let json: serde_json::Value = resp.json().await.unwrap();
        (status, wait, json["error"]["message"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(call().await.0, 200);
    // The provider's minute is used up: its 429 and Retry-After (the rest of its minute) pass on.
    let (status, upstream_wait, message) = call().await;
    assert_eq!(status, 429, "{message}");
    let upstream_wait = upstream_wait.unwrap();
    assert!((1..=60).contains(&upstream_wait), "{upstream_wait}");
    assert!(message.contains("rate_limited 429"), "{message}");
    // Until then the node is held: no call goes out, and the client is told how long is left.
    let (status, wait, message) = call().await;
    assert_eq!(status, 503, "{message}");
    assert!(message.contains("skipped (breaker_open)"), "{message}");
    assert!(wait.is_some_and(|w| (1..=upstream_wait).contains(&w)), "{wait:?} of {upstream_wait}");
}
