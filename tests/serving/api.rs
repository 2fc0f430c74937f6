//! The OpenAI-compatible surface: formats, headers, auth, and a 4xx for each kind of bad input.

use crate::common;

use common::*;
use serde_json::json;
use spillway::sim::SimKind;
use std::time::Duration;

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn config(node: &str, extra: &str) -> String {
    format!(
        r#"
client_keys_env: [KEY_SUPPORT, KEY_BILLING]
backends:
  - {{name: local, kind: vllm, endpoints: [{node}], model: {LLAMA}}}
tasks:
  - {{name: summarise, backends: [local], slo: {{ttft_ms: 2000}}, max_output_tokens: 5}}
  - {{name: billing-only, backends: [local], slo: {{ttft_ms: 2000}}, allowed_keys: [KEY_BILLING]}}
{extra}
"#
    )
}

const KEYS: &[(&str, &str)] = &[("KEY_SUPPORT", "sk-support"), ("KEY_BILLING", "sk-billing")];

async fn setup(extra: &str) -> (spillway::sim::SimHandle, Router) {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let router = router(&config(&node.base_url(), extra), KEYS).await;
    (node, router)
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn call(router: &Router, key: Option<&str>, body: &[u8]) -> (u16, serde_json::Value) {
    let mut req = client()
        .post(format!("{}/v1/chat/completions", router.url))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn assert_envelope(json: &serde_json::Value) {
    let e = &json["error"];
    assert!(e["message"].is_string() && e["type"].is_string(), "not an OpenAI error envelope: {json}");
    assert!(e.get("code").is_some(), "{json}");
}

#[tokio::test]
async fn non_streamed_completion_has_the_openai_shape_and_spillway_headers() {
    let (_node, router) = setup("").await;
    let resp = client()
        .post(format!("{}/v1/chat/completions", router.url))
        .bearer_auth("sk-support")
        .header("x-spillway-project", "ticket-bot")
        .header("x-spillway-priority", "interactive")
        .json(
            &json!({"model": "summarise", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-spillway-backend"], "local");
    assert_eq!(resp.headers()["x-spillway-attempts"], "1");
    let json: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(json["object"], "chat.completion");
    assert_eq!(json["model"], "summarise");
    assert_eq!(json["choices"][0]["message"]["role"], "assistant");
    // The task caps output at 5 tokens even though the client asked for 50.
    assert_eq!(json["usage"]["completion_tokens"], 5, "{json}");
    assert_eq!(json["choices"][0]["finish_reason"], "length");
    assert!(json["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn streamed_completion_sends_chunks_usage_and_done() {
    let (_node, router) = setup("").await;
    let resp = client()
        .post(format!("{}/v1/chat/completions", router.url))
        .bearer_auth("sk-support")
        .json(&json!({"model": "summarise", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(*data.last().unwrap(), "[DONE]");
    let chunks: Vec<serde_json::Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn models_lists_the_tasks_a_key_may_use() {
    let (_node, router) = setup("").await;
    let ids = |json: serde_json::Value| -> Vec<String> {
        json["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect()
    };
    let support =
        client().get(format!("{}/v1/models", router.url)).bearer_auth("sk-support").send().await.unwrap();
    assert_eq!(ids(support.json().await.unwrap()), ["summarise"]);
    let billing =
        client().get(format!("{}/v1/models", router.url)).bearer_auth("sk-billing").send().await.unwrap();
    assert_eq!(ids(billing.json().await.unwrap()), ["summarise", "billing-only"]);
    let anonymous = client().get(format!("{}/v1/models", router.url)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test]
async fn health_and_readiness() {
    let (_node, router) = setup("").await;
    let health = client().get(format!("{}/healthz", router.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready: serde_json::Value =
        client().get(format!("{}/readyz", router.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["nodes"], 1);
}

#[tokio::test]
async fn readyz_waits_for_the_fleet_to_be_measured_and_at_most_the_startup_wait() {
    // A node nothing listens on: its pool is never measured.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let extra =
        "telemetry: {interval_ms: 100, stale_after_ms: 1500, backoff_max_ms: 300, startup_wait_ms: 1500}";
    let started = std::time::Instant::now();
    let router = router_unscraped(&config(&format!("http://{gone}"), extra), KEYS, Default::default()).await;
    let resp = client().get(format!("{}/readyz", router.url)).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        (&body["status"], &body["unmeasured_pools"]),
        (&json!("starting"), &json!(["local"])),
        "{body}"
    );
    wait_until(Duration::from_secs(10), "/readyz to answer 200 after the startup wait", || async {
        let resp = client().get(format!("{}/readyz", router.url)).send().await.map_err(|e| e.to_string())?;
        (resp.status() == 200).then_some(()).ok_or(resp.status().to_string())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "ready before the wait: {:?}",
        started.elapsed()
    );
    let body = get_json(&router.url, "/readyz").await;
    assert_eq!((&body["status"], &body["unmeasured_pools"]), (&json!("ready"), &json!(["local"])), "{body}");
}

#[tokio::test]
async fn each_bad_input_gets_its_own_4xx_in_an_openai_envelope() {
    let (_node, router) = setup("limits: {max_body_bytes: 2048}").await;
    let hi = br#"{"model":"summarise","messages":[{"role":"user","content":"hi"}]}"#;

    let (status, json) = call(&router, None, hi).await;
    assert_eq!((status, json["error"]["type"].as_str()), (401, Some("authentication_error")));
    let (status, json) = call(&router, Some("sk-wrong"), hi).await;
    assert_eq!(status, 401);
    assert_envelope(&json);

    let (status, json) = call(&router, Some("sk-support"), b"{\"model\": ").await;
    assert_eq!(status, 400);
    assert_eq!(json["error"]["code"], "invalid_json");

    let (status, json) = call(
        &router,
        Some("sk-support"),
        br#"{"model":"summarise","messages":[{"role":"user","content":7}]}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(json["error"]["param"], "messages[0].content", "{json}");

    let (status, json) =
        call(&router, Some("sk-support"), br#"{"model":"summarise","max_tokens":-3,"messages":[]}"#).await;
    assert_eq!(status, 400);
    assert_eq!(json["error"]["param"], "max_tokens", "{json}");

    let (status, json) = call(&router, Some("sk-support"), br#"{"model":"summarise","messages":[]}"#).await;
    assert_eq!(status, 400);
    assert_eq!(json["error"]["param"], "messages");

    let (status, json) = call(
        &router,
        Some("sk-support"),
        br#"{"model":"no-such-task","messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(json["error"]["code"], "model_not_found");

    let (status, json) = call(
        &router,
        Some("sk-support"),
        br#"{"model":"billing-only","messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(status, 403);
    assert_envelope(&json);

    let big =
        format!(r#"{{"model":"summarise","messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(4096));
    let (status, json) = call(&router, Some("sk-support"), big.as_bytes()).await;
    assert_eq!(status, 413);
    assert_eq!(json["error"]["code"], "request_too_large");

    let resp = client()
        .post(format!("{}/v1/chat/completions", router.url))
        .bearer_auth("sk-support")
        .header("x-spillway-priority", "urgent!!")
        .body(hi.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);

    let resp = client().get(format!("{}/v1/nothing", router.url)).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_envelope(&resp.json().await.unwrap());
}

#[tokio::test]
async fn strict_input_is_refused_with_the_field_named() {
    let (_node, router) = setup("").await;
    let key = Some("sk-support");
    let hi = r#"{"model":"summarise","messages":[{"role":"user","content":"hi"}]}"#;
    let with = |extra: &str| {
        format!(r#"{{"model":"summarise","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    };
    let cases: Vec<(Vec<u8>, &str, Option<&str>)> = vec![
        // Bytes after the object.
        (format!("{hi}garbage").into_bytes(), "invalid_json", None),
        (format!("{hi}{hi}").into_bytes(), "invalid_json", None),
        // No content on a user or system message.
        (br#"{"model":"summarise","messages":[{"role":"user","content":null}]}"#.to_vec(), "invalid_value", Some("messages[0].content")),
        (
            br#"{"model":"summarise","messages":[{"role":"system","content":null},{"role":"user","content":"x"}]}"#.to_vec(),
            "invalid_value",
            Some("messages[0].content"),
        ),
        // Wrong types name their field.
        (br#"{"model":"summarise","messages":[{"role":1,"content":"hi"}]}"#.to_vec(), "invalid_type", Some("messages[0].role")),
        (with(r#","stream":"yes""#).into_bytes(), "invalid_type", Some("stream")),
        (with(r#","tools":{}"#).into_bytes(), "invalid_type", Some("tools")),
        (with(r#","max_tokens":"many""#).into_bytes(), "invalid_type", Some("max_tokens")),
        // Tool shapes.
        (with(r#","tools":[{"type":"function","function":{"name":"f","parameters":"garbage"}}]"#).into_bytes(), "invalid_value", Some("tools[0].function.parameters")),
        (with(r#","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":42"#).into_bytes(), "invalid_value", Some("tool_choice")),
        // Hostile: deep nesting, huge numbers, bytes that are not UTF-8.
        ("[".repeat(100_000).into_bytes(), "invalid_json", None),
        (with(&format!(r#","tool_choice":{}"#, "[".repeat(100_000))).into_bytes(), "invalid_json", None),
        (with(r#","max_tokens":1e400"#).into_bytes(), "invalid_value", Some("max_tokens")),
        (with(r#","max_tokens":99999999999999999999"#).into_bytes(), "invalid_type", Some("max_tokens")),
        (b"{\"model\":\"summarise\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}".to_vec(), "invalid_json", None),
    ];
    for (body, code, param) in cases {
        let (status, json) = call(&router, key, &body).await;
        let shown = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
        assert_eq!(status, 400, "{shown}: {json}");
        assert_envelope(&json);
        assert_eq!(json["error"]["code"], code, "{shown}: {json}");
        assert_eq!(json["error"]["param"].as_str(), param, "{shown}: {json}");
    }
    // The router still answers after all that.
    let (status, _) = call(&router, key, hi.as_bytes()).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_wrong_method_is_405_with_allow_and_an_unknown_route_404() {
    let (_node, router) = setup("").await;
    for (method, path, allow) in [
        (reqwest::Method::GET, "/v1/chat/completions", "POST"),
        (reqwest::Method::PUT, "/v1/chat/completions", "POST"),
        (reqwest::Method::POST, "/v1/models", "GET,HEAD"),
        (reqwest::Method::DELETE, "/healthz", "GET,HEAD"),
    ] {
        let resp = client().request(method.clone(), format!("{}{path}", router.url)).send().await.unwrap();
        assert_eq!(resp.status(), 405, "{method} {path}");
        assert_eq!(resp.headers()["allow"], allow, "{method} {path}");
        let json: serde_json::Value = resp.json().await.unwrap();
        assert_envelope(&json);
        assert_eq!(json["error"]["code"], "method_not_allowed", "{json}");
        assert!(json["error"]["message"].as_str().unwrap().contains(path), "{json}");
    }
    for path in ["/v1/nothing", "/v1/chat/completions/extra", "/"] {
        let resp = client().post(format!("{}{path}", router.url)).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let json: serde_json::Value = resp.json().await.unwrap();
        assert_envelope(&json);
        assert_eq!(json["error"]["code"], "not_found", "{json}");
    }
}

#[tokio::test]
async fn a_full_router_answers_429_with_retry_after() {
    let node = sim(SimKind::Vllm, LLAMA, |a| a.token_delay_ms = 100).await;
    let router = router(&config(&node.base_url(), "limits: {max_concurrency: 1}"), KEYS).await;
    let url = router.url.clone();
    let (streaming, started) = tokio::sync::oneshot::channel();
    let slow = tokio::spawn(async move {
        let resp = client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth("sk-support")
            .json(&json!({"model": "summarise", "stream": true, "messages": [{"role": "user", "content": "x"}]}))
            .send()
            .await
            .unwrap();
        // Its head is here: it holds the one slot until its last token.
        let _ = streaming.send(());
        resp.text().await.unwrap()
    });
    started.await.expect("the slow stream got its head");
    let resp = client()
        .post(format!("{}/v1/chat/completions", router.url))
        .bearer_auth("sk-support")
        .json(&json!({"model": "summarise", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert!(slow.await.unwrap().contains("[DONE]"));
}

/// An OpenAI-compatible upstream that answers every call with the recorded OpenAI stream.
async fn recorded_stream_upstream() -> String {
    let app = axum::Router::new().fallback(|| async {
        ([("content-type", "text/event-stream")], include_str!("../fixtures/openai/chat_stream.sse"))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_stream_from_an_openai_upstream_is_relayed_with_its_own_fields_under_our_head() {
    let upstream = recorded_stream_upstream().await;
    let yaml = format!(
        r#"
backends:
  - {{name: compat, kind: openai_compatible, base_url: "{upstream}/v1", model: gpt-4o-mini}}
tasks:
  - {{name: summarise, backends: [compat], slo: {{ttft_ms: 2000}}}}
"#
    );
    let router = router(&yaml, &[]).await;
    let mut body = body("summarise", true);
    body["stream_options"] = json!({"include_usage": true});
    let streamed = post_stream(&router.url, &body).await;
    assert_eq!(streamed.status, 200);
    assert!(streamed.done());
    assert_eq!(streamed.text(), "Hello — café time!");
    let chunks = streamed.chunks();
    assert_eq!(chunks.len(), 6, "the upstream's six chunks, none added: {chunks:#?}");
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-") && id != "chatcmpl-123", "{id}");
    for chunk in &chunks {
        assert_eq!(chunk["id"], id, "one id for the whole stream");
        assert_eq!(chunk["model"], "summarise", "the task, not the upstream's model");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["system_fingerprint"], "fp_44709d6fcb", "the upstream's own field is kept");
    }
    assert_eq!(chunks.iter().filter(|c| c["choices"][0]["delta"]["role"] == "assistant").count(), 1);
    assert!(chunks[1]["choices"][0].get("logprobs").is_some(), "{}", chunks[1]);
    let usage = &chunks[5]["usage"];
    assert_eq!(
        usage["completion_tokens_details"]["reasoning_tokens"], 0,
        "usage as the upstream wrote it: {usage}"
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 1024);

    // The same stream to a client that did not ask for usage: no usage anywhere.
    let streamed = post_stream(&router.url, &common::body("summarise", true)).await;
    let chunks = streamed.chunks();
    assert_eq!(chunks.len(), 5, "{chunks:#?}");
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{chunks:#?}");

    // The ledger and metrics still read the usage of relayed answers (recorded once each
    // stream has ended, so wait for the counter).
    let series = r#"spillway_tokens_total{backend="compat",kind="input",task="summarise"}"#;
    let input = wait_metric(&router, series, 2400.0, Duration::from_secs(5)).await;
    assert_eq!(input, 2400.0, "two answers of 1,200 input tokens each");
}
