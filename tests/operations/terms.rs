//! Data terms hold on every path that can call a backend. One router holds a hosted backend
//! (`leaky`, an Anthropic simulator) whose terms keep data 30 days and train on it, listed by
//! tasks of a data class that allows no retention and no training: where the policy filter let
//! it through, it would be the first choice of primary dispatch, the failover target, the spill
//! target, a shadow, a canary, the judge, the gate run's subject and the token count. Every one
//! of those paths is driven (each proven to have run by what it did elsewhere) and the
//! simulator's request log stays empty; then a task of a class that requires nothing reaches
//! it, so the log is proven to record.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use spillway::sim::SimKind;

const ADMIN: &str = "terms-admin-token";
const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const LEAKY_WHY: &str = "leaky: terms.retention_days 30 is over the data class's max_retention_days 0; \
     terms.trains_on_data is true (data class requires no_training)";

async fn post(
    url: &str,
    path: &str,
    body: &Value,
    token: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = reqwest::Client::new().post(format!("{url}{path}")).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap_or(Value::Null))
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A golden file of `items` lines, in a fresh folder.
fn golden(name: &str, item: Value, items: usize) -> String {
    let dir = std::env::temp_dir().join(format!("spillway-terms-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{item}\n").repeat(items)).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn no_path_reaches_a_backend_whose_terms_the_data_class_refuses() {
    let ok = sim(SimKind::OpenAi, "gpt-5.6", |a| a.reply = Some("Paris".into())).await;
    let also_ok = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let failing = sim(SimKind::OpenAi, "gpt-5.6", |a| a.error_rate = 1.0).await;
    let leaky = sim(SimKind::Anthropic, "claude-sonnet-4-5", |a| a.reply = Some("9".into())).await;
    let capital = json!({"messages": [{"role": "user", "content": "Capital of France?"}], "reference": "Paris", "grader": {"type": "exact"}});
    let judged = json!({"messages": [{"role": "user", "content": "Capital of France?"}], "grader": {"type": "judge", "rubric": "Names Paris."}});
    let yaml = format!(
        r#"
admin_token_env: TERMS_ADMIN
canary: {{interval_secs: 0}}
policy: {{data_classes: {{confidential: {{max_retention_days: 0, no_training: true}}}}}}
backends:
  - {{name: pool, kind: vllm, endpoints: ["http://127.0.0.1:1"], model: {LLAMA}}}
  - {{name: ok, kind: openai, base_url: "{}/v1", model: gpt-5.6, terms: {{zero_data_retention: true, trains_on_data: false}}}}
  - {{name: also-ok, kind: openai, base_url: "{}/v1", model: gpt-5.6, terms: {{retention_days: 0, trains_on_data: false}}}}
  - {{name: failing, kind: openai, base_url: "{}/v1", model: gpt-5.6, terms: {{retention_days: 0, trains_on_data: false}}}}
  - {{name: leaky, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5, terms: {{retention_days: 30, trains_on_data: true}}}}
tasks:
  - {{name: primary, data_class: confidential, backends: [leaky, ok, also-ok], strategy: priority, slo: {{ttft_ms: 5000}},
     shadow: {{rate: 1.0}}, gate: {{golden: "{}", required: false}}}}
  - {{name: failover, data_class: confidential, backends: [failing, leaky], strategy: priority, slo: {{ttft_ms: 5000}}}}
  - {{name: spill, data_class: confidential, backends: [pool, leaky, ok], strategy: priority, slo: {{ttft_ms: 5000}}}}
  - {{name: judged, data_class: confidential, backends: [ok], slo: {{ttft_ms: 5000}},
     gate: {{golden: "{}", judge: leaky, required: false}}}}
  - {{name: only-leaky, data_class: confidential, backends: [leaky], slo: {{ttft_ms: 5000}}}}
  - {{name: open, backends: [leaky], slo: {{ttft_ms: 5000}}}}
"#,
        ok.base_url(),
        also_ok.base_url(),
        failing.base_url(),
        leaky.base_url(),
        golden("capital.jsonl", capital, 2),
        golden("judged.jsonl", judged, 1),
    );
    // The pool's one node never answers a scrape: the spill task must go hosted.
    let router = router_unscraped(&yaml, &[("TERMS_ADMIN", ADMIN)], Default::default()).await;
    let url = router.url.as_str();
    let admin = Some(ADMIN);

    // Primary dispatch: the first backend is refused, the next serves.
    let (status, headers, answer) = post(url, "/v1/chat/completions", &body("primary", false), None).await;
    assert_eq!((status, header(&headers, "x-spillway-backend")), (200, Some("ok")), "{answer}");

    // Shadows: the shadow to also-ok is counted once it ended; one to leaky would have gone with it.
    let shadows =
        |m: &str, backend: &str| series_sum(m, "spillway_shadow_requests_total", &[("backend", backend)]);
    wait_until(Duration::from_secs(10), "the shadow to also-ok", || async {
        shadows(&metrics_text(url).await, "also-ok").is_some()
    })
    .await;
    assert_eq!(shadows(&metrics_text(url).await, "leaky"), None);

    // Failover: the only other backend is refused, so the failure is the client's answer.
    let (status, _, answer) = post(url, "/v1/chat/completions", &body("failover", false), None).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "all_backends_failed", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("failing") && !message.contains("leaky"), "{message}");

    // Spill: the unmeasured pool is passed over for the hosted backend its policy allows.
    let (status, headers, answer) = post(url, "/v1/chat/completions", &body("spill", false), None).await;
    assert_eq!((status, header(&headers, "x-spillway-backend")), (200, Some("ok")), "{answer}");

    // Nothing left: the 503 names the unmet terms, in each dialect's envelope.
    let (status, _, answer) = post(url, "/v1/chat/completions", &body("only-leaky", false), None).await;
    assert_eq!((status, &answer["error"]["code"]), (503, &json!("no_eligible_backend")), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.ends_with(LEAKY_WHY), "{message}");
    let messages =
        json!({"model": "only-leaky", "max_tokens": 12, "messages": [{"role": "user", "content": "hello"}]});
    let (status, _, answer) = post(url, "/v1/messages", &messages, None).await;
    // Anthropic's statuses have no 503: the same refusal is its 500 `api_error`.
    assert_eq!((status, &answer["error"]["type"]), (500, &json!("api_error")), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap_or_default().ends_with(LEAKY_WHY), "{answer}");
    // A token count sends the prompt to an Anthropic backend's count endpoint: refused the same.
    let (status, _, answer) = post(url, "/v1/messages/count_tokens", &messages, None).await;
    assert_eq!(status, 500, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap_or_default().ends_with(LEAKY_WHY), "{answer}");

    // Canaries: a round probes the fallbacks the policy allows, never leaky.
    let (status, _, round) = post(url, "/admin/canary", &json!({}), admin).await;
    assert_eq!(status, 200, "{round}");
    let mut probed: Vec<&str> =
        round["results"].as_array().unwrap().iter().map(|r| r["backend"].as_str().unwrap()).collect();
    probed.sort();
    assert_eq!(probed, ["also-ok", "ok"], "{round}");
    let (status, _, refused) = post(url, "/admin/canary", &json!({"backend": "leaky"}), admin).await;
    assert_eq!(status, 404, "{refused}");

    // A gate run of the refused backend: every item is refused before any call.
    let (status, _, run) =
        post(url, "/admin/gate/run", &json!({"task": "primary", "backend": "leaky"}), admin).await;
    assert_eq!(
        (status, &run["result"]["passed"], &run["result"]["errors"]),
        (200, &json!(false), &json!(2)),
        "{run}"
    );
    // The same run of an allowed backend calls it (the golden set is fine).
    let (status, _, run) =
        post(url, "/admin/gate/run", &json!({"task": "primary", "backend": "ok"}), admin).await;
    assert_eq!((status, &run["result"]["passed"]), (200, &json!(true)), "{run}");

    // The judge: a gate run whose judge the task's policy refuses stops before its first item.
    let (status, _, run) =
        post(url, "/admin/gate/run", &json!({"task": "judged", "backend": "ok"}), admin).await;
    assert_ne!(status, 200, "{run}");
    let message = run["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("judge `leaky` may not see task `judged`'s data: terms.retention_days 30"),
        "{run}"
    );

    // `/admin/backends` says why, task by task, with the terms it judged.
    let listing = admin_json(url, "/admin/backends", ADMIN).await;
    let of = |name: &str| {
        listing["backends"].as_array().unwrap().iter().find(|b| b["backend"] == name).unwrap().clone()
    };
    let leaky_row = of("leaky");
    let why = LEAKY_WHY.trim_start_matches("leaky: ");
    let refused: Vec<Value> = ["primary", "failover", "spill", "only-leaky"]
        .iter()
        .map(|task| json!({"task": task, "why": why}))
        .collect();
    assert_eq!(leaky_row["policy_refused"], json!(refused), "{leaky_row}");
    assert_eq!(leaky_row["terms"]["retention_days"], 30);
    assert_eq!(leaky_row["terms"]["zero_data_retention"], Value::Null, "undeclared");
    assert_eq!(of("ok")["policy_refused"], json!([]));

    assert_eq!(leaky.requests(), Vec::<Value>::new(), "no path reached the refused backend");

    // The control: a class that requires nothing reaches the same backend, and its log shows it.
    let (status, headers, answer) = post(url, "/v1/chat/completions", &body("open", false), None).await;
    assert_eq!((status, header(&headers, "x-spillway-backend")), (200, Some("leaky")), "{answer}");
    assert_eq!(leaky.requests().len(), 1);
}
