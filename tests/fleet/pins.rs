//! Pinned metadata end to end: a node whose engine (from its `/version`) differs from the
//! pool's pin leaves the pool, `/readyz` says why, and its traffic goes elsewhere.

use crate::common;

use std::time::Duration;

use common::*;
use spillway::sim::SimKind;

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

const ADMIN: &str = "pins-admin";

fn config(node: &str, hosted: &str, engine: &str) -> String {
    format!(
        r#"
admin_token_env: PINS_ADMIN
backends:
  - {{name: local, kind: vllm, endpoints: [{node}], model: {LLAMA}, pin: {{engine: "{engine}"}}}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt-5.6}}
tasks:
  - {{name: t, backends: [local, hosted], slo: {{ttft_ms: 2000}}}}
"#
    )
}

async fn readyz(url: &str) -> serde_json::Value {
    reqwest::get(format!("{url}/readyz")).await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn a_node_whose_engine_differs_from_the_pin_is_quarantined() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router =
        router(&config(&node.base_url(), &hosted.base_url(), "0.10.1"), &[("PINS_ADMIN", ADMIN)]).await;
    // The version is read with the first good scrape; the next snapshot quarantines.
    let ready = wait_until(Duration::from_secs(5), "the node to be quarantined", || async {
        let ready = readyz(&router.url).await;
        if ready["quarantined"].as_array().unwrap().is_empty() {
            Err(ready)
        } else {
            Ok(ready)
        }
    })
    .await;
    let why = ready["quarantined"][0]["why"].as_str().unwrap_or_default().to_string();
    assert_eq!(why, "engine: pinned 0.10.1, reported 0.11.0+sim", "{ready}");
    let s = post_stream(&router.url, &body("t", true)).await;
    assert_eq!(s.header("x-spillway-backend"), Some("hosted"));
    assert_eq!(s.header("x-spillway-spill"), Some("down"));
}

#[tokio::test]
async fn a_node_that_matches_its_pin_serves() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router =
        router(&config(&node.base_url(), &hosted.base_url(), "0.11.0+sim"), &[("PINS_ADMIN", ADMIN)]).await;
    // The router has read the node's engine, and a snapshot since has checked it against the pin.
    wait_until(Duration::from_secs(5), "the router to read the node's engine", || async {
        let listing = admin_json(&router.url, "/admin/backends", ADMIN).await;
        let node = &listing["backends"][0]["nodes"][0];
        if node["engine_version"] == "0.11.0+sim" && node["engine"] == "vllm" {
            Ok(())
        } else {
            Err(listing)
        }
    })
    .await;
    next_snapshot(&router).await;
    assert!(readyz(&router.url).await["quarantined"].as_array().unwrap().is_empty());
    let s = post_stream(&router.url, &body("t", true)).await;
    assert_eq!(s.header("x-spillway-backend"), Some("local"));
}
