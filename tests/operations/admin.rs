//! The admin API as an SRE runs a game day: list backends and nodes with their state, drain a
//! hosted backend and a vLLM node while traffic flows (traffic moves, nothing fails), force a
//! breaker open and back, and get clear errors for bad requests; none of it with a client key.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{router, sim};
use serde_json::{json, Value};
use spillway::sim::SimKind;

const ADMIN: &str = "admin-secret-for-the-drill";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_game_day_drain_moves_traffic_and_nothing_fails() {
    let node_a = sim(SimKind::Vllm, "llama", |_| {}).await;
    let node_b = sim(SimKind::Vllm, "llama", |_| {}).await;
    let first = sim(SimKind::OpenAi, "gpt", |_| {}).await;
    let second = sim(SimKind::Anthropic, "claude", |_| {}).await;
    let yaml = format!(
        r#"
client_keys_env: [DRILL_CLIENT_KEY]
admin_token_env: DRILL_ADMIN_TOKEN
backends:
  - {{name: pool, kind: vllm, endpoints: ["{a}", "{b}"], model: llama, reserve: 0}}
  - {{name: first, kind: openai, base_url: "{first}/v1", model: gpt}}
  - {{name: second, kind: anthropic, base_url: "{second}", model: claude}}
tasks:
  - {{name: local, backends: [pool], slo: {{ttft_ms: 3000}}}}
  - {{name: hosted, backends: [first, second], strategy: priority, slo: {{ttft_ms: 3000}}}}
"#,
        a = node_a.base_url(),
        b = node_b.base_url(),
        first = first.base_url(),
        second = second.base_url(),
    );
    let r = router(&yaml, &[("DRILL_CLIENT_KEY", "ck"), ("DRILL_ADMIN_TOKEN", ADMIN)]).await;
    let client = reqwest::Client::new();
    let admin = |method: &str, path: &str, body: Option<Value>, token: &str| {
        let mut req = client
            .request(method.parse().unwrap(), format!("{}{path}", r.url))
            .bearer_auth(token)
            .header("x-spillway-operator", "alice");
        if let Some(b) = body {
            req = req.json(&b);
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    // Only the admin token opens the admin API.
    assert_eq!(admin("GET", "/admin/backends", None, "ck").await.0, 401);
    let (status, listing) = admin("GET", "/admin/backends", None, ADMIN).await;
    assert_eq!(status, 200);
    let pool = &listing["backends"][0];
    assert_eq!((pool["backend"].as_str(), pool["nodes"].as_array().unwrap().len()), (Some("pool"), 2));
    assert_eq!(listing["backends"][1]["nodes"][0]["breaker"], "closed");

    // Traffic to the hosted task all through the drill; count who served and what failed, and
    // how many requests each worker has finished.
    let stop = Arc::new(AtomicBool::new(false));
    let (by_first, by_second, failures) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let finished: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let mut workers = Vec::new();
    for worker in 0..3 {
        let (stop, c1, c2, fails, url, finished) = (
            stop.clone(),
            by_first.clone(),
            by_second.clone(),
            failures.clone(),
            r.url.clone(),
            finished.clone(),
        );
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::SeqCst) {
                let resp = client
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth("ck")
                    .json(&json!({"model": "hosted", "max_tokens": 20, "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
                    .send()
                    .await
                    .unwrap();
                let backend = resp.headers().get("x-spillway-backend").map(|v| v.to_str().unwrap().to_string());
                let text = resp.text().await.unwrap_or_default();
                match backend.as_deref() {
                    Some("first") if text.contains("[DONE]") => c1.fetch_add(1, Ordering::SeqCst),
                    Some("second") if text.contains("[DONE]") => c2.fetch_add(1, Ordering::SeqCst),
                    _ => fails.fetch_add(1, Ordering::SeqCst),
                };
                finished[worker].fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // Each worker sends one request at a time: once each has finished two more, the one it had
    // in flight now is done and counted, and the next began after now.
    let requests_begun_after_now = || async {
        let seen: Vec<u64> = finished.iter().map(|f| f.load(Ordering::SeqCst)).collect();
        common::wait_until(
            Duration::from_secs(10),
            "each worker to finish a request begun after now",
            || {
                let done = finished.iter().zip(&seen).all(|(f, s)| f.load(Ordering::SeqCst) >= s + 2);
                async move { done }
            },
        )
        .await;
    };
    // The state of a hosted node in the published snapshot, as the admin API lists it.
    let first_node = |field: &'static str| {
        let admin = &admin;
        async move {
            let (_, listing) = admin("GET", "/admin/backends", None, ADMIN).await;
            listing["backends"][1]["nodes"][0][field].clone()
        }
    };
    common::wait_until(Duration::from_secs(10), "ten requests served by the first backend", || async {
        by_first.load(Ordering::SeqCst) >= 10
    })
    .await;
    assert!(by_first.load(Ordering::SeqCst) > 0 && by_second.load(Ordering::SeqCst) == 0);

    // Drain `first`: new requests go to `second`; those in flight on `first` finish.
    let (status, held) =
        admin("POST", "/admin/hold", Some(json!({"backend": "first", "kind": "drain"})), ADMIN).await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["kind"], "drained");
    common::wait_until(Duration::from_secs(5), "the snapshot loop to publish the hold", || async {
        let held = first_node("held").await;
        if held.is_null() {
            Err(held)
        } else {
            Ok(())
        }
    })
    .await;
    requests_begun_after_now().await;
    let served_first = by_first.load(Ordering::SeqCst);
    // A real sleep: traffic flows for a while, and none of it may reach the drained backend.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(by_first.load(Ordering::SeqCst), served_first, "no new request went to the drained backend");
    assert!(by_second.load(Ordering::SeqCst) > 0, "traffic moved to the next backend");
    let (_, listing) = admin("GET", "/admin/backends", None, ADMIN).await;
    assert_eq!(listing["backends"][1]["nodes"][0]["held"], "backend drained by alice");
    assert_eq!(listing["holds"][0]["hold"]["by"], "alice");
    let metrics = reqwest::get(format!("{}/metrics", r.url)).await.unwrap().text().await.unwrap();
    let held = metrics.lines().find(|l| l.starts_with("spillway_node_held{backend=\"first\"")).unwrap();
    assert!(held.ends_with(" 1"), "{held}");

    // Release it and force its breaker open instead: the same move, by another lever.
    assert_eq!(
        admin("POST", "/admin/release", Some(json!({"backend": "first"})), ADMIN).await.1["released"],
        true
    );
    let (status, forced) =
        admin("POST", "/admin/breakers", Some(json!({"backend": "first", "state": "open"})), ADMIN).await;
    assert_eq!(status, 200, "{forced}");
    common::wait_until(Duration::from_secs(5), "the snapshot loop to publish the open breaker", || async {
        let breaker = first_node("breaker").await;
        if breaker == "open" {
            Ok(())
        } else {
            Err(breaker)
        }
    })
    .await;
    let (_, listing) = admin("GET", "/admin/backends", None, ADMIN).await;
    assert_eq!(listing["backends"][1]["nodes"][0]["breaker"], "open");
    assert_eq!(listing["backends"][1]["nodes"][0]["breaker_forced"], "open");
    requests_begun_after_now().await;
    let served_first = by_first.load(Ordering::SeqCst);
    // A real sleep: traffic flows for a while, and none of it may reach the forced-open node.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(by_first.load(Ordering::SeqCst), served_first);
    admin("POST", "/admin/breakers", Some(json!({"backend": "first", "state": "auto"})), ADMIN).await;
    common::wait_until(Duration::from_secs(10), "traffic back on the first backend", || async {
        by_first.load(Ordering::SeqCst) > served_first
    })
    .await;
    assert!(by_first.load(Ordering::SeqCst) > served_first, "back on the first backend");
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(failures.load(Ordering::SeqCst), 0, "nothing failed during the drill");

    // Drain one vLLM node: the pool's other node serves everything.
    let node_key = listing["backends"][0]["nodes"][0]["node"].as_str().unwrap().to_string();
    let drained_url = listing["backends"][0]["nodes"][0]["origin"].as_str().unwrap().to_string();
    let (status, _) = admin(
        "POST",
        "/admin/hold",
        Some(json!({"backend": "pool", "node": node_key, "kind": "disable"})),
        ADMIN,
    )
    .await;
    assert_eq!(status, 200);
    common::wait_until(Duration::from_secs(5), "the snapshot loop to publish the disabled node", || async {
        let (_, listing) = admin("GET", "/admin/backends", None, ADMIN).await;
        let held = &listing["backends"][0]["nodes"][0]["held"];
        if held.is_null() {
            Err(listing)
        } else {
            Ok(())
        }
    })
    .await;
    let before = common::node_completed(&drained_url).await;
    for _ in 0..8 {
        let resp = client
            .post(format!("{}/v1/chat/completions", r.url))
            .bearer_auth("ck")
            .json(
                &json!({"model": "local", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(common::node_completed(&drained_url).await, before, "the disabled node took nothing");

    // Bad requests get clear errors in the OpenAI envelope.
    let (status, e) = admin("POST", "/admin/hold", Some(json!({"backend": "nope"})), ADMIN).await;
    assert_eq!((status, e["error"]["param"].as_str()), (404, Some("backend")));
    let (status, e) =
        admin("POST", "/admin/hold", Some(json!({"backend": "pool", "node": "x"})), ADMIN).await;
    assert_eq!((status, e["error"]["param"].as_str()), (404, Some("node")));
    let (status, e) =
        admin("POST", "/admin/hold", Some(json!({"backend": "pool", "kind": "pause"})), ADMIN).await;
    assert!(status == 400 && e["error"]["message"].as_str().unwrap().contains("drain, disable"), "{e}");
    let (status, e) = admin("POST", "/admin/breakers", Some(json!({"backend": "pool"})), ADMIN).await;
    assert!(status == 400 && e["error"]["param"] == "state", "{e}");
    let (status, e) =
        admin("POST", "/admin/release", Some(json!({"backend": "pool", "colour": "red"})), ADMIN).await;
    assert!(
        status == 400 && e["error"]["message"].as_str().unwrap().contains("unknown field `colour`"),
        "{e}"
    );
}

#[tokio::test]
async fn without_an_admin_token_the_admin_api_is_off() {
    let node = sim(SimKind::Vllm, "llama", |_| {}).await;
    let yaml = format!(
        "backends: [{{name: pool, kind: vllm, endpoints: [\"{}\"], model: llama}}]\ntasks: [{{name: t, backends: [pool], slo: {{ttft_ms: 1000}}}}]\n",
        node.base_url()
    );
    let r = router(&yaml, &[]).await;
    let resp = reqwest::Client::new()
        .get(format!("{}/admin/backends", r.url))
        .bearer_auth("anything")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}
