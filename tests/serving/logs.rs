//! `spillway serve` logs as an SRE's log pipeline receives them: one JSON object per line, the
//! request id of the `x-request-id` header on the lines of that request, and never a prompt,
//! an answer or a key, even at debug level (planted values are grepped for).

use crate::common;

use common::sim;
use serde_json::{json, Value};
use spillway::sim::SimKind;

const CLIENT_KEY: &str = "ck-PLANTED-client-key-4242";
const PROVIDER_KEY: &str = "sk-PLANTED-provider-key-7777";
const PROMPT: &str = "PLANTED-PROMPT the launch code is 0000";
const SESSION: &str = "PLANTED-session-5150";
const ADMIN_TOKEN: &str = "PLANTED-admin-token-9090";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_logs_carry_the_request_id_and_no_secret_or_prompt() {
    let node = sim(SimKind::Vllm, "llama", |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt", |a| a.api_key = Some(PROVIDER_KEY.into())).await;
    let broken = sim(SimKind::OpenAi, "gpt", |a| a.error_rate = 1.0).await;
    let dir = std::env::temp_dir().join(format!("spillway-logs-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("spillway.yaml");
    std::fs::write(
        &config,
        format!(
            r#"listen: 127.0.0.1:0
client_keys_env: [LOG_TEST_CLIENT_KEY]
admin_token_env: LOG_TEST_ADMIN
backends:
  - {{name: pool, kind: vllm, endpoints: ["{node}"], model: llama}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt, api_key_env: LOG_TEST_PROVIDER_KEY}}
  - {{name: broken, kind: openai, base_url: "{broken}/v1", model: gpt, api_key_env: LOG_TEST_PROVIDER_KEY}}
tasks:
  - {{name: local, backends: [pool], slo: {{ttft_ms: 3000}}}}
  - {{name: hosted, backends: [broken, hosted], strategy: priority, slo: {{ttft_ms: 3000}}}}
telemetry: {{interval_ms: 200}}
ledger: {{url: "sqlite://{ledger}"}}
"#,
            node = node.base_url(),
            hosted = hosted.base_url(),
            broken = broken.base_url(),
            ledger = dir.join("ledger.db").display(),
        ),
    )
    .unwrap();
    let env = [
        ("LOG_TEST_CLIENT_KEY", CLIENT_KEY),
        ("LOG_TEST_PROVIDER_KEY", PROVIDER_KEY),
        ("LOG_TEST_ADMIN", ADMIN_TOKEN),
        ("RUST_LOG", "debug"),
    ];
    let (mut server, url, stderr) = common::serve_process(&config, &env).await;
    let client = reqwest::Client::new();
    let chat = |task: &str, request_id: Option<&str>| {
        let mut req = client
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(CLIENT_KEY)
            .header("x-session-id", SESSION)
            .json(
                &json!({"model": task, "max_tokens": 8, "messages": [{"role": "user", "content": PROMPT}]}),
            );
        if let Some(id) = request_id {
            req = req.header("x-request-id", id);
        }
        req.send()
    };
    let local = chat("local", None).await.unwrap();
    assert_eq!(local.status(), 200);
    let local_id = local.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(local_id.len(), 32, "a made-up id: {local_id}");
    let failed_over = chat("hosted", Some("client-chosen-id-1")).await.unwrap();
    assert_eq!(failed_over.status(), 200);
    assert_eq!(failed_over.headers()["x-request-id"], "client-chosen-id-1", "a sane client id is kept");
    let bad = chat("no-such-task", Some("bad id with spaces")).await.unwrap();
    assert_eq!(bad.status(), 404);
    assert_ne!(bad.headers()["x-request-id"], "bad id with spaces");
    let bad_id = bad.headers()["x-request-id"].to_str().unwrap().to_string();
    let malformed = client
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(CLIENT_KEY)
        .json(&json!({"model": "local", "messages": [{"role": "narrator", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let malformed_id = malformed.headers()["x-request-id"].to_str().unwrap().to_string();
    let metrics = common::metrics_text(&url).await;
    for status in ["400", "404"] {
        let refused = common::series_sum(&metrics, "spillway_refusals_total", &[("status", status)]);
        assert!(refused.unwrap_or(0.0) >= 1.0, "{status} counted: {refused:?}");
    }

    // An issued key: created, used, rotated (the old secret refused), used again.
    let admin = |path: String, body: Value| {
        client.post(format!("{url}{path}")).bearer_auth(ADMIN_TOKEN).json(&body).send()
    };
    let created: Value = admin("/admin/keys".into(), json!({"name": "ci", "team": "search"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (issued, key_id) =
        (created["secret"].as_str().unwrap().to_string(), created["key"]["id"].as_str().unwrap().to_string());
    let use_key = |key: String| {
        client
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&json!({"model": "local", "max_tokens": 8, "messages": [{"role": "user", "content": PROMPT}]}))
            .send()
    };
    assert_eq!(use_key(issued.clone()).await.unwrap().status(), 200);
    let rotated: Value =
        admin(format!("/admin/keys/{key_id}/rotate"), json!({})).await.unwrap().json().await.unwrap();
    let rotated = rotated["secret"].as_str().unwrap().to_string();
    assert_eq!(use_key(issued.clone()).await.unwrap().status(), 401);
    assert_eq!(use_key(rotated.clone()).await.unwrap().status(), 200);

    // SIGTERM: a graceful stop, so that the bookkeeping lines are written before exit.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    let stderr = stderr.into_text();

    let lines: Vec<Value> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    assert!(lines.len() > 10, "debug logs were written: {stderr}");
    // An issued key's secret part, alone, is not in the logs either.
    let issued_secrets = [&issued[issued.len() - 64..], &rotated[rotated.len() - 64..]];
    for planted in [CLIENT_KEY, PROVIDER_KEY, ADMIN_TOKEN, "PLANTED-PROMPT", "launch code", SESSION]
        .into_iter()
        .chain(issued_secrets)
    {
        assert!(!stderr.contains(planted), "`{planted}` leaked into the logs");
    }
    // The audit lines name the key by id and team.
    let audit: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"].as_str().is_some_and(|m| m.starts_with("admin: client key")))
        .collect();
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert!(
        audit.iter().all(|l| l["fields"]["key_id"] == key_id.as_str() && l["fields"]["team"] == "search"),
        "{audit:?}"
    );
    let with_id = |id: &str| -> Vec<&Value> {
        lines.iter().filter(|l| l["span"]["request_id"] == id || l["fields"]["request_id"] == id).collect()
    };
    // Every refusal is logged with its status, its reason and the field at fault.
    let refused = |id: &str| {
        let lines = with_id(id);
        let line = lines.iter().find(|l| l["fields"]["message"] == "refused");
        line.map(|l| l["fields"].clone()).unwrap_or_else(|| panic!("no refusal line for {id}: {lines:?}"))
    };
    let unknown = refused(&bad_id);
    assert_eq!(unknown["status"], 404, "{unknown}");
    assert!(unknown["reason"].as_str().unwrap().contains("no-such-task"), "{unknown}");
    let invalid = refused(&malformed_id);
    assert_eq!(invalid["status"], 400, "{invalid}");
    assert!(invalid["reason"].as_str().unwrap().contains("messages[0].role"), "{invalid}");
    let local_lines = with_id(&local_id);
    assert!(local_lines.iter().any(|l| l["fields"]["message"] == "http response"), "{local_lines:?}");
    assert!(
        local_lines.iter().any(|l| l["fields"]["message"] == "request"),
        "the outcome line: {local_lines:?}"
    );
    // Which affinity source keyed the request is logged, with the key's hash, never the key.
    let affinity = local_lines.iter().find(|l| l["fields"]["message"] == "affinity");
    let affinity = affinity.unwrap_or_else(|| panic!("an affinity line: {local_lines:?}"));
    assert_eq!(affinity["fields"]["affinity_source"], "session_header", "{affinity}");
    let hash = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(SESSION.as_bytes()));
    assert_eq!(affinity["fields"]["affinity_hash"], hash.as_str(), "{affinity}");
    let failover_lines = with_id("client-chosen-id-1");
    assert!(
        failover_lines.iter().any(|l| l["fields"]["message"].as_str().is_some_and(|m| m.contains("broken"))),
        "the failed attempt is logged with the request's id: {failover_lines:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
