//! The evaluation gate end to end on loopback: a pool node whose engine differs from its pin
//! is quarantined, the gate runs its task's golden set on that node, and a pass puts it back
//! under the new pin (a failure keeps it out, raises the alert metric, and the admin API says
//! why); a required gate keeps an untested backend out until it passes; shadow copies are
//! stored apart from the ledger and graded against the primary's answer; prompt variants
//! reach the backend; `spillway gate run` and `gate report` work on the same store.

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use spillway::sim::SimKind;

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const ADMIN: &str = "gate-admin-token";

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-gate-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three items that only "Paris" passes.
fn golden(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("capitals.jsonl");
    let item = json!({"messages": [{"role": "user", "content": "Capital of France? One word."}], "reference": "Paris", "grader": {"type": "exact"}});
    let contains = json!({"messages": [{"role": "user", "content": "Where is the Louvre?"}], "grader": {"type": "contains", "all": ["paris"]}});
    let regex = json!({"messages": [{"role": "user", "content": "Name the city."}], "grader": {"type": "regex", "pattern": "^P[a-z]+$"}});
    std::fs::write(&path, format!("{item}\n{contains}\n{regex}\n")).unwrap();
    path
}

fn sim_replying(
    kind: SimKind,
    model: &'static str,
    reply: &'static str,
) -> impl std::future::Future<Output = spillway::sim::SimHandle> {
    sim(kind, model, move |a| {
        a.reply = Some(reply.to_string());
        a.ttft_ms = 5;
    })
}

async fn admin_post(url: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn metrics(url: &str) -> String {
    reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap()
}

fn pool_config(node: &str, hosted: &str, golden: &std::path::Path, ledger: &str) -> String {
    format!(
        r#"
admin_token_env: GATE_ADMIN
ledger: {{url: "{ledger}"}}
backends:
  - {{name: local, kind: vllm, endpoints: [{node}], model: {LLAMA}, pin: {{engine: "0.10.1"}}}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt-5.6, version: "2026-10-01"}}
tasks:
  - name: capitals
    backends: [local, hosted]
    slo: {{ttft_ms: 2000}}
    gate: {{golden: "{}", min_pass: 1.0, concurrency: 2}}
"#,
        golden.display()
    )
}

/// A pinned pool of one node answering `reply` (its engine differs from the pin), a hosted
/// backend answering "Paris", the capitals task gated and required, and the router. Bind the
/// simulators when taking it apart: a dropped simulator stops serving.
struct PoolCase {
    dir: PathBuf,
    node: spillway::sim::SimHandle,
    _hosted: spillway::sim::SimHandle,
    ledger: String,
    router: Router,
}

async fn pool_case(reply: &'static str) -> PoolCase {
    let dir = temp_dir();
    let node = sim_replying(SimKind::Vllm, LLAMA, reply).await;
    let hosted = sim_replying(SimKind::OpenAi, "gpt-5.6", "Paris").await;
    let ledger = temp_ledger_url();
    let yaml = pool_config(&node.base_url(), &hosted.base_url(), &golden(&dir), &ledger);
    let router = router(&yaml, &[("GATE_ADMIN", ADMIN)]).await;
    PoolCase { dir, node, _hosted: hosted, ledger, router }
}

#[tokio::test]
async fn a_pin_change_runs_the_gate_and_a_pass_puts_the_node_back_under_the_new_pin() {
    let PoolCase { node, ledger, router, _hosted, .. } = pool_case("Paris").await;

    // The required gate keeps the untested hosted backend out: nothing may serve yet.
    let r = post_json(&router.url, &body("capitals", false)).await;
    assert_eq!(r.0, 503, "{}", r.2);
    assert!(
        r.2["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gate: no result yet for fingerprint gpt-5.6@2026-10-01"),
        "{}",
        r.2
    );

    // An operator runs the gate for the hosted backend: it passes and serves.
    let (status, run) =
        admin_post(&router.url, "/admin/gate/run", json!({"task": "capitals", "backend": "hosted"})).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["result"]["passed"], true, "{run}");
    assert_eq!(run["result"]["pass_rate"], 1.0);
    assert_eq!(run["result"]["fingerprint"], "gpt-5.6@2026-10-01");
    next_snapshot(&router).await; // the snapshot loop has published the gate result

    // Meanwhile the node reported engine 0.11.0+sim, not the pinned 0.10.1: the gate ran on it
    // by itself, passed, and the new engine is the pin in effect; the node serves again.
    let url = router.url.clone();
    wait_until(Duration::from_secs(20), "the new engine as the pin in effect, nothing quarantined", || {
        let url = url.clone();
        async move {
            let gate = admin_json(&url, "/admin/gate", ADMIN).await;
            let back = gate["pins_in_effect"]["local"]["engine"] == "0.11.0+sim"
                && gate["quarantined"].as_array().unwrap().is_empty();
            if back {
                Ok(())
            } else {
                Err(format!("{gate:#}"))
            }
        }
    })
    .await;
    let gate = admin_json(&router.url, "/admin/gate", ADMIN).await;
    let local =
        gate["standings"].as_array().unwrap().iter().find(|s| s["backend"] == "local").unwrap().clone();
    assert_eq!(local["fingerprint"], "engine=0.11.0+sim", "{gate:#}");
    assert_eq!(local["passing"], true);
    assert_eq!(local["result"]["trigger"], "pin_change");
    assert!(local["result"]["node"].as_str().unwrap().contains(&node.base_url()));
    wait_until(Duration::from_secs(5), "the requalified node to take traffic again", || {
        let url = router.url.clone();
        async move {
            post_stream(&url, &body("capitals", true)).await.header("x-spillway-backend") == Some("local")
        }
    })
    .await;
    let m = metrics(&router.url).await;
    assert!(m.contains(r#"spillway_gate_passing{backend="local",task="capitals"} 1"#), "{m}");
    assert!(
        m.contains(r#"spillway_gate_runs_total{backend="local",result="pass",task="capitals"} 1"#),
        "{m}"
    );

    // The accepted pin is in the store: a router started later begins with it.
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let pins = spillway::gate::store::accepted_pins(&store).await.unwrap();
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].1.engine.as_deref(), Some("0.11.0+sim"));
}

#[tokio::test]
async fn a_failed_gate_keeps_the_node_out_raises_the_alert_metric_and_says_why() {
    let PoolCase { dir, node: _node, router, _hosted, .. } = pool_case("London").await;
    let (status, _) =
        admin_post(&router.url, "/admin/gate/run", json!({"task": "capitals", "backend": "hosted"})).await;
    assert_eq!(status, 200);

    let url = router.url.clone();
    wait_until(Duration::from_secs(20), "the node quarantined because its gate failed", || {
        let url = url.clone();
        async move {
            let gate = admin_json(&url, "/admin/gate", ADMIN).await;
            if gate["quarantined"][0]["why"].as_str().unwrap_or_default().contains("gate failed") {
                Ok(())
            } else {
                Err(format!("{gate:#}"))
            }
        }
    })
    .await;
    let m = metrics(&router.url).await;
    assert!(m.contains(r#"spillway_gate_failed{backend="local",task="capitals"} 1"#), "{m}");
    assert!(
        m.contains(r#"spillway_gate_runs_total{backend="local",result="fail",task="capitals"} 1"#),
        "{m}"
    );
    let gate = admin_json(&router.url, "/admin/gate", ADMIN).await;
    let why = gate["quarantined"][0]["why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with(
            "engine: pinned 0.10.1, reported 0.11.0+sim; gate failed for fingerprint engine=0.11.0+sim"
        ),
        "{gate:#}"
    );
    assert!(why.contains("0/3 passed"), "{why}");
    assert_eq!(gate["pins_in_effect"]["local"]["engine"], "0.10.1", "the pin did not change");
    let backends = admin_json(&router.url, "/admin/backends", ADMIN).await;
    assert!(backends.to_string().contains("gate failed for fingerprint engine=0.11.0+sim"), "{backends}");
    // The hosted pass reaches routing with the next snapshot (every 100 ms).
    wait_until(Duration::from_secs(10), "the hosted backend to serve", || {
        let url = router.url.clone();
        async move {
            post_stream(&url, &body("capitals", true)).await.header("x-spillway-backend") == Some("hosted")
        }
    })
    .await;
    for _ in 0..3 {
        let s = post_stream(&router.url, &body("capitals", true)).await;
        assert_eq!(s.header("x-spillway-backend"), Some("hosted"), "{} {:?}", s.status, s.data);
    }

    // The golden set was wrong (London is the answer this team wants): fix it, and have the
    // gate run again on the node; it passes, the node's engine becomes the pin in effect.
    let node_key = gate["quarantined"][0]["node"].as_str().unwrap().to_string();
    let fixed = json!({"messages": [{"role": "user", "content": "Capital of the UK?"}], "grader": {"type": "contains", "all": ["london"]}});
    std::fs::write(dir.join("capitals.jsonl"), format!("{fixed}\n")).unwrap();
    let (status, again) = admin_post(&router.url, "/admin/gate/requalify", json!({"node": node_key})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["accepted"], true, "{again}");
    let (status, unknown) = admin_post(&router.url, "/admin/gate/requalify", json!({"node": "nope"})).await;
    assert_eq!(status, 400, "{unknown}");
    let url = router.url.clone();
    wait_until(Duration::from_secs(5), "the local node to serve", || {
        let url = url.clone();
        async move {
            if post_stream(&url, &body("capitals", true)).await.header("x-spillway-backend") == Some("local")
            {
                Ok(())
            } else {
                Err(format!("{:#}", admin_json(&url, "/admin/gate", ADMIN).await))
            }
        }
    })
    .await;
}

/// An OpenAI-compatible upstream that records each request body and streams "Paris".
async fn capture_upstream() -> (String, Arc<Mutex<Vec<Value>>>) {
    use axum::routing::post;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let store = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |axum::Json(body): axum::Json<Value>| {
            let store = Arc::clone(&store);
            async move {
                store.lock().unwrap().push(body);
                let chunk = |delta: Value, finish: Value| {
                    format!("data: {}\n\n", json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
                };
                let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}});
                let text = format!(
                    "{}{}{}data: {usage}\n\ndata: [DONE]\n\n",
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                    chunk(json!({"content": "Paris"}), Value::Null),
                    chunk(json!({}), json!("stop")),
                );
                ([("content-type", "text/event-stream")], text)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[tokio::test]
async fn prompt_variants_reach_the_backend_in_live_traffic_and_gate_runs() {
    let dir = temp_dir();
    std::fs::write(dir.join("terse.txt"), "Answer with one word.\n").unwrap();
    let (upstream, seen) = capture_upstream().await;
    let other = sim_replying(SimKind::OpenAi, "gpt-5.6", "Paris").await;
    let yaml = format!(
        r#"
admin_token_env: GATE_ADMIN
backends:
  - {{name: compat, kind: openai_compatible, base_url: "{upstream}/v1", model: small}}
  - {{name: other, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - name: capitals
    backends: [compat, other]
    slo: {{ttft_ms: 2000}}
    gate: {{golden: "{}", required: false}}
    prompt_variants: {{openai_compatible: "{}"}}
"#,
        other.base_url(),
        golden(&dir).display(),
        dir.join("terse.txt").display()
    );
    let router = router(&yaml, &[("GATE_ADMIN", ADMIN)]).await;
    let r = post_json(&router.url, &body("capitals", false)).await;
    assert_eq!(r.0, 200, "{}", r.2);
    let (status, run) =
        admin_post(&router.url, "/admin/gate/run", json!({"task": "capitals", "backend": "compat"})).await;
    assert_eq!((status, run["result"]["passed"].clone()), (200, json!(true)), "{run}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "one live request and three golden items");
    for body in &seen {
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Answer with one word."}),
            "{body}"
        );
    }
    assert_eq!(seen[0]["messages"][1]["content"], "be brief", "the client's own messages follow");
}

#[tokio::test]
async fn shadow_copies_are_stored_apart_and_graded_against_the_primary() {
    let dir = temp_dir();
    let primary = sim_replying(SimKind::OpenAi, "gpt-5.6", "Reset the router and call support.").await;
    let agrees =
        sim_replying(SimKind::Anthropic, "claude-sonnet-4-5", "Reset the router, then call support.").await;
    let drifts =
        sim_replying(SimKind::Gemini, "gemini-2.5-flash", "I cannot help with that request today.").await;
    let ledger = temp_ledger_url();
    let yaml = format!(
        r#"
ledger: {{url: "{ledger}"}}
backends:
  - {{name: openai, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: anthropic, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5, price: {{input_per_mtok: 3, output_per_mtok: 15}}}}
  - {{name: gemini, kind: gemini, base_url: "{}/v1beta", model: gemini-2.5-flash, price: {{input_per_mtok: 0.3, output_per_mtok: 2.5}}}}
tasks:
  - name: support
    backends: [openai, anthropic, gemini]
    slo: {{ttft_ms: 2000}}
    shadow: {{rate: 1.0}}
"#,
        primary.base_url(),
        agrees.base_url(),
        drifts.base_url()
    );
    let _ = dir;
    let router = router(&yaml, &[]).await;
    for stream in [true, false, true] {
        let r = post_json(&router.url, &json!({"model": "support", "stream": stream, "messages": [{"role": "user", "content": "My router is down"}]})).await;
        assert_eq!(r.0, 200);
    }
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    wait_until(Duration::from_secs(15), "six graded shadows", || {
        let store = store.clone();
        async move {
            let rows = spillway::gate::store::shadows(&store, false).await.unwrap();
            if rows.len() == 6 && rows.iter().all(|r| r.verdict.is_some()) {
                Ok(())
            } else {
                Err(format!("{rows:#?}"))
            }
        }
    })
    .await;
    let rows = spillway::gate::store::shadows(&store, false).await.unwrap();
    for row in &rows {
        assert_eq!(row.primary_backend, "openai");
        assert_eq!(row.primary_answer.as_deref(), Some("Reset the router and call support."));
        assert!(row.cost.unwrap() > rust_decimal::Decimal::ZERO, "shadow cost is kept: {row:?}");
        let want = if row.backend == "anthropic" { "pass" } else { "fail" };
        assert_eq!(row.verdict.as_deref(), Some(want), "{row:?}");
    }
    // The request ledger holds the three client requests only: the shadows are graded, so
    // any record of theirs has reached the ledger by the time the writer has nothing left.
    wait_until(Duration::from_secs(10), "three rows in the request ledger", || async {
        let rows = store.query(0, i64::MAX).await.unwrap();
        if rows.len() >= 3 {
            Ok(())
        } else {
            Err(format!("{rows:#?}"))
        }
    })
    .await;
    wait_ledger_written(&router).await;
    let ledgered = store.query(0, i64::MAX).await.unwrap();
    assert_eq!(ledgered.len(), 3, "{ledgered:#?}");
    assert!(ledgered.iter().all(|r| r.backend == "openai"));
    let m = metrics(&router.url).await;
    assert!(
        m.contains(r#"spillway_shadow_requests_total{backend="gemini",result="ok",task="support"} 3"#),
        "{m}"
    );
    assert!(
        m.contains(r#"spillway_shadow_graded_total{backend="anthropic",task="support",verdict="pass"} 3"#),
        "{m}"
    );
}

#[tokio::test]
async fn the_cli_runs_a_gate_and_reports_it_in_three_formats() {
    let dir = temp_dir();
    let good = sim_replying(SimKind::OpenAi, "gpt-5.6", "Paris").await;
    let bad = sim_replying(SimKind::Gemini, "gemini-2.5-flash", "Lyon").await;
    let ledger = temp_ledger_url();
    let config = dir.join("spillway.yaml");
    std::fs::write(dir.join("golden.jsonl"), std::fs::read_to_string(golden(&dir)).unwrap()).unwrap();
    std::fs::write(
        &config,
        format!(
            r#"
ledger: {{url: "{ledger}"}}
backends:
  - {{name: openai, kind: openai, base_url: "{}/v1", model: gpt-5.6, price: {{input_per_mtok: 1.25, output_per_mtok: 10}}}}
  - {{name: gemini, kind: gemini, base_url: "{}/v1beta", model: gemini-2.5-flash}}
tasks:
  - name: capitals
    backends: [openai, gemini]
    slo: {{ttft_ms: 2000}}
    gate: {{golden: golden.jsonl, max_p95_ms: 4000}}
"#,
            good.base_url(),
            bad.base_url()
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_spillway");
    let run = tokio::process::Command::new(bin)
        .args(["gate", "run", "--config", config.to_str().unwrap(), "--task", "capitals"])
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(run.status.success(), "{out}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(out.contains("openai") && out.contains("PASS") && out.contains("100.0%"), "{out}");
    assert!(out.contains("FAIL: 0/3 passed"), "{out}");

    let report = |format: &'static str| {
        let config = config.clone();
        async move {
            let o = tokio::process::Command::new(bin)
                .args(["gate", "report", "--config", config.to_str().unwrap(), "--format", format])
                .output()
                .await
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8(o.stdout).unwrap()
        }
    };
    let table = report("table").await;
    assert!(table.contains("gpt-5.6") && table.contains("gemini-2.5-flash"), "{table}");
    let csv = report("csv").await;
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let json: Value = serde_json::from_str(&report("json").await).unwrap();
    let gate = json["gate"].as_array().unwrap();
    let openai = gate.iter().find(|g| g["backend"] == "openai").unwrap();
    assert_eq!(openai["passed"], true);
    assert_eq!(openai["items"], 3);
    assert_eq!(openai["current"], true);
    assert!(openai["cost_per_item_usd"].as_str().unwrap().parse::<f64>().unwrap() > 0.0, "{openai}");
    let gemini = gate.iter().find(|g| g["backend"] == "gemini").unwrap();
    assert_eq!(gemini["passed"], false);
    assert_eq!(gemini["cost_per_item_usd"], Value::Null, "unpriced");
}

#[tokio::test]
async fn a_judge_backend_scores_answers_and_the_policy_filter_applies_to_it() {
    let dir = temp_dir();
    let golden = dir.join("judged.jsonl");
    std::fs::write(
        &golden,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Summarise: VPN drops hourly.\"}], \"reference\": \"The VPN disconnects every hour.\", \"grader\": {\"type\": \"judge\", \"rubric\": \"Names the VPN and the hourly drop.\", \"min_score\": 7}}\n",
    )
    .unwrap();
    let answerer = sim_replying(SimKind::OpenAi, "gpt-5.6", "The VPN drops every hour.").await;
    let generous = sim_replying(SimKind::Anthropic, "claude-sonnet-4-5", "Score: 8").await;
    let strict = sim_replying(SimKind::Gemini, "gemini-2.5-flash", "3").await;
    let yaml = format!(
        r#"
admin_token_env: GATE_ADMIN
backends:
  - {{name: answerer, kind: openai, base_url: "{}/v1", model: gpt-5.6, region: eu}}
  - {{name: generous, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5, region: eu}}
  - {{name: strict, kind: gemini, base_url: "{}/v1beta", model: gemini-2.5-flash, region: us}}
tasks:
  - {{name: passes, backends: [answerer], slo: {{ttft_ms: 2000}}, gate: {{golden: "{g}", judge: generous, required: false}}}}
  - {{name: fails, backends: [answerer], slo: {{ttft_ms: 2000}}, gate: {{golden: "{g}", judge: strict, required: false}}}}
  - {{name: eu-only, backends: [answerer], data_class: eu, slo: {{ttft_ms: 2000}}, gate: {{golden: "{g}", judge: strict, required: false}}}}
policy:
  data_classes:
    eu: {{regions: [eu]}}
"#,
        answerer.base_url(),
        generous.base_url(),
        strict.base_url(),
        g = golden.display()
    );
    let router = router(&yaml, &[("GATE_ADMIN", ADMIN)]).await;
    let run = |task: &'static str| {
        let url = router.url.clone();
        async move { admin_post(&url, "/admin/gate/run", json!({"task": task, "backend": "answerer"})).await }
    };
    let (status, passed) = run("passes").await;
    assert_eq!((status, passed["result"]["passed"].clone()), (200, json!(true)), "{passed}");
    let (status, failed) = run("fails").await;
    assert_eq!((status, failed["result"]["passed"].clone()), (200, json!(false)), "{failed}");
    assert!(failed["result"]["why"].as_str().unwrap().contains("0/1 passed"), "{failed}");
    let (status, refused) = run("eu-only").await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("judge `strict` may not see task `eu-only`'s data"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_gate_tables_keep_results_pins_and_shadows_on_both_stores() {
    use spillway::gate::store::{self, GateResult, ShadowResult};
    use spillway::gate::summary::Summary;
    let mut urls = vec![temp_ledger_url()];
    urls.extend(common::pg_store_url("gate_test").await);
    for url in urls {
        let db = spillway::ledger::Store::open(&url).await.unwrap();
        let result = GateResult {
            id: "r1".into(),
            task: "t".into(),
            backend: "pool".into(),
            fingerprint: "engine=0.11".into(),
            node: Some("pool/m@http://10.0.0.1:8000/v1".into()),
            trigger: "pin_change".into(),
            started_ms: 1_000,
            finished_ms: 2_000,
            summary: Summary {
                items: 20,
                passed_items: 19,
                errors: 1,
                p50_ms: Some(120),
                p95_ms: None,
                cost: Some(rust_decimal::Decimal::new(123_456_789, 9)),
                passed: true,
                why: "19/20 passed".into(),
            },
        };
        store::insert_result(&db, &result).await.unwrap();
        assert_eq!(store::results(&db).await.unwrap(), vec![result], "{url}");
        let pin = spillway::config::Pin { engine: Some("0.11".into()), ..Default::default() };
        store::accept_pin(&db, "pool", "engine=0.11", &pin, 5).await.unwrap();
        store::accept_pin(&db, "pool", "engine=0.11", &pin, 6).await.unwrap();
        assert_eq!(store::accepted_pins(&db).await.unwrap(), vec![("pool".to_string(), pin)]);
        let shadow = ShadowResult {
            id: "s1".into(),
            at_ms: 7,
            task: "t".into(),
            request_id: "req".into(),
            primary_backend: "pool".into(),
            backend: "openai".into(),
            model: "gpt".into(),
            error_class: None,
            input_tokens: 10,
            output_tokens: 5,
            duration_ms: 30,
            cost: Some(rust_decimal::Decimal::new(15, 5)),
            primary_answer: Some("yes".into()),
            answer: "yes".into(),
            verdict: None,
            why: None,
        };
        store::insert_shadow(&db, &shadow).await.unwrap();
        assert_eq!(store::shadows(&db, true).await.unwrap(), vec![shadow.clone()]);
        store::grade_shadow(&db, "s1", "pass", None).await.unwrap();
        assert!(store::shadows(&db, true).await.unwrap().is_empty(), "graded rows are not pending");
        assert_eq!(store::shadows(&db, false).await.unwrap()[0].verdict.as_deref(), Some("pass"));
        db.close().await;
    }
}

#[tokio::test]
async fn shadows_stay_within_the_backends_quota_and_never_wait_for_it() {
    let primary = sim_replying(SimKind::OpenAi, "gpt-5.6", "ok").await;
    let limited = sim_replying(SimKind::Anthropic, "claude-sonnet-4-5", "ok").await;
    let ledger = temp_ledger_url();
    let yaml = format!(
        r#"
ledger: {{url: "{ledger}"}}
backends:
  - {{name: openai, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: anthropic, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5, quota: {{rpm: 10}}}}
tasks:
  - {{name: support, backends: [openai, anthropic], strategy: priority, slo: {{ttft_ms: 2000}}, shadow: {{rate: 1.0}}}}
"#,
        primary.base_url(),
        limited.base_url()
    );
    let router = router(&yaml, &[]).await;
    for _ in 0..20 {
        let r = post_json(&router.url, &body("support", false)).await;
        assert_eq!(r.0, 200);
    }
    let count = |m: &str, result: &str| -> u64 {
        let series = format!(
            r#"spillway_shadow_requests_total{{backend="anthropic",result="{result}",task="support"}} "#
        );
        m.lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |v| v.parse().unwrap())
    };
    let url = router.url.clone();
    wait_until(Duration::from_secs(10), "20 shadows counted, ok or over quota", || {
        let url = url.clone();
        async move {
            let m = metrics(&url).await;
            count(&m, "ok") + count(&m, "over_quota") == 20
        }
    })
    .await;
    let m = metrics(&router.url).await;
    let (ok, over) = (count(&m, "ok"), count(&m, "over_quota"));
    // Batch work may use 70 % of the 10 a minute: 7 per minute window (two windows at most).
    assert!((7..=14).contains(&ok) && over >= 6, "ok {ok}, over quota {over}");
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    wait_until(Duration::from_secs(5), "only the shadows that were sent stored", || {
        let store = store.clone();
        async move { spillway::gate::store::shadows(&store, false).await.unwrap().len() as u64 == ok }
    })
    .await;
}

/// Requests a vLLM simulator has completed, from its own `/metrics`.
async fn completed(sim: &spillway::sim::SimHandle) -> f64 {
    common::node_completed(&sim.base_url()).await
}

#[tokio::test]
async fn a_pools_shadows_spread_over_its_nodes() {
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let a = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let b = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let yaml = format!(
        r#"
backends:
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: pool, kind: vllm, endpoints: ["{}", "{}"], model: {LLAMA}}}
tasks:
  - {{name: t, backends: [hosted, pool], strategy: priority, slo: {{ttft_ms: 2000}}, shadow: {{rate: 1.0, backends: [pool]}}}}
"#,
        hosted.base_url(),
        a.base_url(),
        b.base_url()
    );
    let router = router(&yaml, &[]).await;
    for _ in 0..16 {
        let (status, headers, _) = post_json(&router.url, &body("t", false)).await;
        assert_eq!((status, &headers["x-spillway-backend"]), (200, &"hosted".parse().unwrap()));
    }
    wait_until(Duration::from_secs(15), "16 shadows sent", || async {
        let (on_a, on_b) = (completed(&a).await, completed(&b).await);
        if on_a + on_b >= 16.0 {
            Ok(())
        } else {
            Err(format!("{on_a} + {on_b}"))
        }
    })
    .await;
    let (on_a, on_b) = (completed(&a).await, completed(&b).await);
    // Before, every shadow of a pool went to its first admitting node.
    assert!(on_a > 0.0 && on_b > 0.0, "shadows spread over the pool: {on_a} and {on_b}");
}
