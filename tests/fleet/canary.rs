//! Canaries for untested exits: fallback backends get a synthetic request on an interval (and on
//! demand through the admin API); a working one is known to work, a broken one is known broken
//! before an outage needs it. Canaries are counted and ledgered, but are not client traffic.

use crate::common;

use std::time::Duration;

use common::{router, sim, temp_ledger_url, wait_metric};
use serde_json::{json, Value};
use spillway::sim::SimKind;

fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fallbacks_are_probed_and_a_broken_one_is_known_before_it_is_needed() {
    let node = sim(SimKind::Vllm, "llama", |_| {}).await;
    let working = sim(SimKind::OpenAi, "gpt", |_| {}).await;
    let broken = sim(SimKind::Anthropic, "claude", |a| a.error_rate = 1.0).await;
    let ledger = temp_ledger_url();
    let yaml = format!(
        r#"
admin_token_env: CANARY_ADMIN
backends:
  - {{name: pool, kind: vllm, endpoints: ["{node}"], model: llama}}
  - {{name: working, kind: openai, base_url: "{working}/v1", model: gpt, price: {{input_per_mtok: 1, output_per_mtok: 1}}}}
  - {{name: broken, kind: anthropic, base_url: "{broken}", model: claude}}
tasks:
  - {{name: chat, backends: [pool, working, broken], strategy: priority, slo: {{ttft_ms: 2000}}}}
canary: {{interval_secs: 1, max_tokens: 2}}
ledger: {{url: "{ledger}"}}
"#,
        node = node.base_url(),
        working = working.base_url(),
        broken = broken.base_url(),
    );
    let r = router(&yaml, &[("CANARY_ADMIN", "adm")]).await;
    // The first round goes out one interval after start; the bookkeeping loop then takes in
    // its calls.
    for (series, at_least) in [
        (r#"spillway_canaries_total{backend="working",result="ok"}"#, 1.0),
        (r#"spillway_canaries_total{backend="broken",result="failed"}"#, 1.0),
        (r#"spillway_backend_last_success_timestamp_seconds{backend="working"}"#, 1e9),
    ] {
        let value = wait_metric(&r, series, at_least, Duration::from_secs(10)).await;
        assert!(value >= at_least, "not within 10 s: {series} = {value}");
    }

    let metrics = reqwest::get(format!("{}/metrics", r.url)).await.unwrap().text().await.unwrap();
    let canaries = |backend: &str, result: &str| {
        let labels = [format!("backend=\"{backend}\""), format!("result=\"{result}\"")];
        sample(&metrics, "spillway_canaries_total", &[&labels[0], &labels[1]])
    };
    assert!(canaries("working", "ok").unwrap() >= 1.0, "{metrics}");
    assert!(canaries("broken", "failed").unwrap() >= 1.0);
    assert_eq!(canaries("pool", "ok"), None, "the first choice is not a fallback");
    assert!(
        sample(&metrics, "spillway_backend_last_success_timestamp_seconds", &["backend=\"working\""])
            .unwrap()
            > 1e9
    );
    assert_eq!(
        sample(&metrics, "spillway_backend_last_success_timestamp_seconds", &["backend=\"broken\""]),
        Some(0.0)
    );
    assert_eq!(
        sample(&metrics, "spillway_requests_total", &["task=\"chat\""]),
        None,
        "canaries are not client requests"
    );

    // On demand, through the admin API.
    let client = reqwest::Client::new();
    let post =
        |body: Value| client.post(format!("{}/admin/canary", r.url)).bearer_auth("adm").json(&body).send();
    let now: Value = post(json!({"backend": "working"})).await.unwrap().json().await.unwrap();
    assert_eq!(now["results"].as_array().unwrap().len(), 1);
    assert_eq!(
        (now["results"][0]["ok"].as_bool(), now["results"][0]["task"].as_str()),
        (Some(true), Some("chat"))
    );
    let bad: Value = post(json!({"backend": "broken"})).await.unwrap().json().await.unwrap();
    assert_eq!(bad["results"][0]["ok"], false);
    assert!(bad["results"][0]["error"].as_str().unwrap().contains("broken"), "{bad}");
    let first_only = post(json!({"backend": "pool"})).await.unwrap();
    assert_eq!(first_only.status(), 404);
    let listing: Value = client
        .get(format!("{}/admin/backends", r.url))
        .bearer_auth("adm")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["canaries"].as_array().unwrap().len(), 2);

    // Ledgered, as the canary key, with its cost.
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let rows = common::wait_until(Duration::from_secs(10), "three canary rows in the ledger", || async {
        let rows = store.query(0, i64::MAX).await.unwrap();
        let probes = rows.iter().filter(|r| r.client_key.as_deref() == Some("canary")).count();
        if probes >= 3 {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await;
    let probes: Vec<_> = rows.iter().filter(|r| r.client_key.as_deref() == Some("canary")).collect();
    assert!(probes.len() >= 3, "{rows:?}");
    assert!(probes.iter().any(|r| r.backend == "working" && r.cost_usd.is_some_and(|c| !c.is_zero())));
    store.close().await;
}
