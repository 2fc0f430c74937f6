//! `POST /v1/responses` end to end: a real router in front of real simulators, over sockets.
//! A Responses request is routed, priced and counted exactly as a chat request is; an upstream
//! that fails before its first token is failed over; one that breaks after it ends the stream
//! with `response.failed` and `error`; bad input is a 400 naming its field. State kept at
//! OpenAI (`previous_response_id`, `store: true`) passes through to a task whose first backend
//! is OpenAI, pinned there, and is refused for any other.

use crate::common;

use std::time::Duration;

use common::*;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use spillway::sim::SimKind;

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// A task `t` over a local node then hosted OpenAI, `local-only` over the node alone (a vLLM
/// pool with tools and no vision), `openai-first` over hosted OpenAI then the node, with the ledger at
/// `ledger`.
fn config(local: &str, hosted: &str, ledger: &str) -> String {
    format!(
        r#"
backends:
  - {{name: local, kind: vllm, endpoints: [{local}], model: {LLAMA}, capabilities: {{tools: true}}}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt-5.6}}
tasks:
  - {{name: t, backends: [local, hosted], slo: {{ttft_ms: 2000}}}}
  - {{name: local-only, backends: [local], slo: {{ttft_ms: 2000}}}}
  - {{name: openai-first, backends: [hosted, local], slo: {{ttft_ms: 2000}}}}
  - {{name: strict, backends: [local], slo: {{ttft_ms: 2000}}, unsupported_tools: refuse}}
dispatch: {{backoff_base_ms: 1, backoff_max_ms: 5}}
ledger: {{url: "{ledger}"}}
"#
    )
}

/// The chat body of `common::body` said as a Responses request.
fn responses_body(stream: bool) -> Value {
    json!({"model": "t", "stream": stream, "max_output_tokens": 12, "instructions": "be brief", "input": "hello there"})
}

async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new().post(format!("{url}/v1/responses")).json(body).send().await.unwrap()
}

/// A streamed answer's events (`type` and data), checking each `event:` line names its type.
async fn events(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream().eventsource();
    let mut events = Vec::new();
    while let Some(Ok(event)) = stream.next().await {
        let data: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(data["type"], event.event.as_str(), "{data}");
        events.push(data);
    }
    events
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap_or_default()).collect()
}

fn streamed_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

#[tokio::test]
async fn a_responses_request_is_routed_priced_and_counted_like_a_chat_request() {
    let local = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let ledger = temp_ledger_url();
    let router = router(&config(&local.base_url(), &hosted.base_url(), &ledger), &[]).await;

    let (status, chat_headers, _) = post_json(&router.url, &body("t", false)).await;
    assert_eq!(status, 200);
    let whole = post(&router.url, &responses_body(false)).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["x-spillway-backend"], chat_headers["x-spillway-backend"]);
    assert_eq!(whole.headers()["x-spillway-attempts"], "1");
    let whole: Value = whole.json().await.unwrap();
    assert!(whole["id"].as_str().unwrap().starts_with("resp_"), "{whole}");
    assert_eq!((whole["object"].as_str(), whole["model"].as_str()), (Some("response"), Some("t")));
    assert_eq!(whole["status"], "incomplete", "12 tokens of the sim's 64: {whole}");
    assert_eq!(whole["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(whole["usage"]["output_tokens"], 12);
    assert!(!whole["output"][0]["content"][0]["text"].as_str().unwrap().is_empty(), "{whole}");
    let streamed = events(post(&router.url, &responses_body(true)).await).await;
    assert_eq!(types(&streamed)[..2], ["response.created", "response.in_progress"]);
    assert_eq!(types(&streamed).last(), Some(&"response.incomplete"));
    assert!(!streamed_text(&streamed).is_empty());

    // One counter for every dialect, and one ledger row per request with the same usage.
    let series = r#"spillway_requests_total{backend="local",outcome="completed",task="t"}"#;
    assert_eq!(wait_metric(&router, series, 3.0, Duration::from_secs(5)).await, 3.0);
    wait_ledger_written(&router).await;
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let rows = store.query(0, i64::MAX).await.unwrap();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    for row in &rows {
        assert_eq!((row.task.as_str(), row.backend.as_str()), ("t", "local"));
        assert_eq!(row.outcome, spillway::ledger::Outcome::Completed);
        assert_eq!(
            (row.input_tokens, row.output_tokens),
            (rows[0].input_tokens, 12),
            "the same prompt reached the node for each dialect: {rows:#?}"
        );
    }
}

#[tokio::test]
async fn an_upstream_that_fails_before_its_first_token_is_failed_over() {
    let local = sim(SimKind::Vllm, LLAMA, |a| a.error_rate = 1.0).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&config(&local.base_url(), &hosted.base_url(), &temp_ledger_url()), &[]).await;
    let response = post(&router.url, &responses_body(true)).await;
    assert_eq!(response.headers()["x-spillway-backend"], "hosted");
    assert_eq!(response.headers()["x-spillway-attempts"], "2");
    let streamed = events(response).await;
    assert_eq!(types(&streamed).iter().filter(|t| **t == "response.created").count(), 1);
    assert_eq!(types(&streamed).last(), Some(&"response.incomplete"), "{streamed:#?}");
    let done = &streamed.last().unwrap()["response"];
    assert_eq!(done["output"][0]["content"][0]["text"].as_str(), Some(streamed_text(&streamed).as_str()));
}

#[tokio::test]
async fn a_break_after_the_first_token_ends_with_response_failed_and_error() {
    let local = sim(SimKind::Vllm, LLAMA, |a| a.drop_after = Some(3)).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&config(&local.base_url(), &hosted.base_url(), &temp_ledger_url()), &[]).await;
    let response = post(&router.url, &responses_body(true)).await;
    assert_eq!(response.headers()["x-spillway-backend"], "local");
    let streamed = events(response).await;
    let kinds = types(&streamed);
    assert_eq!(kinds[kinds.len() - 2..], ["response.failed", "error"], "{kinds:?}");
    assert!(!kinds.contains(&"response.completed") && !kinds.contains(&"response.incomplete"));
    let failed = &streamed[kinds.len() - 2]["response"];
    assert_eq!(failed["status"], "failed");
    assert!(failed["error"]["message"].as_str().unwrap().contains("backend `local`"), "{failed}");
    // Nothing stitched: only the local node's three words reached the client.
    let words = streamed_text(&streamed).split_whitespace().count();
    assert!((1..=3).contains(&words), "{streamed:#?}");
}

#[tokio::test]
async fn bad_input_is_a_400_in_openais_envelope_naming_the_field() {
    let local = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&config(&local.base_url(), &hosted.base_url(), &temp_ledger_url()), &[]).await;
    let cases = [
        (
            json!({"input": [{"role": "user", "content": "hi"}, {"type": "computer_call", "id": "c"}]}),
            "input[1].type",
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "42"}]}),
            "input[0].call_id",
        ),
        (json!({"input": "hi", "previous_response_id": "resp_1"}), "previous_response_id"),
        (json!({"input": "hi", "store": true}), "store"),
        (json!({"input": "hi", "tools": [{"type": "functoin", "name": "f"}]}), "tools[0].type"),
        (json!({"input": "hi", "max_output_tokens": -1}), "max_output_tokens"),
    ];
    for (mut body, param) in cases {
        body["model"] = json!("t");
        let response = post(&router.url, &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
    }
    // A tool that runs inside OpenAI is dropped for another backend, and the answer says so.
    let body = json!({"model": "t", "input": "hi", "tools": [{"type": "web_search"}]});
    let response = post(&router.url, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-spillway-dropped-tools"], "web_search");
    // A task that refuses them says which.
    let body = json!({"model": "strict", "input": "hi", "tools": [{"type": "web_search"}]});
    let response = post(&router.url, &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["param"], "tools[0].type", "{error}");
    // The core's own refusals name Responses' fields too.
    let image = json!({"type": "input_image", "image_url": "https://x.test/cat.png"});
    let body = json!({"model": "local-only", "input": [{"role": "user", "content": [image]}]});
    let error: Value = post(&router.url, &body).await.json().await.unwrap();
    assert_eq!(error["error"]["code"], "unsupported_capability", "{error}");
    assert_eq!(error["error"]["param"], "input", "{error}");
    let response = post(&router.url, &json!({"model": "no-such-task", "input": "hi"})).await;
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        (error["error"]["code"].as_str(), error["error"]["param"].as_str()),
        (Some("model_not_found"), Some("model"))
    );
}

#[tokio::test]
async fn the_simulator_serves_responses_with_tool_calls_and_faults() {
    let node =
        sim(SimKind::OpenAi, "gpt-5.6", |a| a.tool_call_args = Some(r#"{"city": "Paris"}"#.into())).await;
    let url = node.base_url();
    let tools = json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]);
    let whole: Value = post(&url, &json!({"model": "gpt-5.6", "input": "weather?", "tools": tools}))
        .await
        .json()
        .await
        .unwrap();
    let call = &whole["output"][0];
    assert_eq!(
        (call["type"].as_str(), call["name"].as_str()),
        (Some("function_call"), Some("get_weather")),
        "{whole}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(whole["status"], "completed");

    let faulty = |fault: &str| {
        reqwest::Client::new()
            .post(format!("{url}/v1/responses"))
            .header(spillway::sim::FAULT_HEADER, fault)
            .json(&json!({"model": "gpt-5.6", "input": "hi", "stream": true}))
            .send()
    };
    let streamed = events(faulty("error_event").await.unwrap()).await;
    let kinds = types(&streamed);
    assert_eq!(kinds[..3], ["response.created", "response.in_progress", "response.output_item.added"]);
    assert_eq!(kinds[kinds.len() - 2..], ["response.failed", "error"], "{kinds:?}");
    let refused = faulty("status=503").await.unwrap();
    assert_eq!(refused.status(), 503, "a fault before the first token is an HTTP error");
    let error: Value = refused.json().await.unwrap();
    assert!(error["error"]["message"].is_string(), "{error}");
}

/// A request that continues a stored response, for the task `model`.
fn continuing(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "max_output_tokens": 12, "input": "and then?",
           "previous_response_id": "resp_prev", "store": true})
}

#[tokio::test]
async fn state_kept_at_openai_passes_through_to_an_openai_first_task_and_is_relayed() {
    let local = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&config(&local.base_url(), &hosted.base_url(), &temp_ledger_url()), &[]).await;

    let whole = post(&router.url, &continuing("openai-first", false)).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["x-spillway-backend"], "hosted");
    let whole: Value = whole.json().await.unwrap();
    assert_eq!(
        (whole["previous_response_id"].as_str(), whole["store"].as_bool()),
        (Some("resp_prev"), Some(true)),
        "OpenAI got the fields and echoed them: {whole}"
    );
    assert!(whole["id"].as_str().unwrap().starts_with("resp_sim"), "OpenAI's own response id: {whole}");
    assert_eq!(whole["model"], "openai-first");
    assert_eq!(whole["usage"]["output_tokens"], 12);

    let streamed = events(post(&router.url, &continuing("openai-first", true)).await).await;
    let kinds = types(&streamed);
    assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
    assert_eq!(kinds.last(), Some(&"response.incomplete"), "{kinds:?}");
    for event in streamed.iter().filter(|e| e.get("response").is_some()) {
        let response = &event["response"];
        assert!(response["id"].as_str().unwrap().starts_with("resp_sim"), "{event}");
        assert_eq!(
            (response["model"].as_str(), response["previous_response_id"].as_str()),
            (Some("openai-first"), Some("resp_prev"))
        );
    }
    assert!(!streamed_text(&streamed).is_empty());

    // A tool output may answer a call that only the stored response holds.
    let mut answer = continuing("openai-first", false);
    answer["input"] = json!([{"type": "function_call_output", "call_id": "call_stored", "output": "42"}]);
    assert_eq!(post(&router.url, &answer).await.status(), 200);

    // A task whose first backend is not OpenAI still refuses, naming the field.
    let refused = post(&router.url, &continuing("t", false)).await;
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["param"], "store", "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("first backend is OpenAI"), "{error}");
}

/// What Codex sends on a later turn: its tools in an `additional_tools` item (grouped, a
/// `custom` grammar tool among them, OpenAI's `web_search`), OpenAI's encrypted reasoning from
/// the turn before, and a `custom_tool_call` with its output.
fn codex_like(model: &str) -> Value {
    let reasoning = format!("{}-turn-1", spillway::sim::ENCRYPTED_PREFIX);
    json!({"model": model, "stream": false, "store": false, "max_output_tokens": 12,
        "include": ["reasoning.encrypted_content"], "tools": [], "input": [
        {"type": "additional_tools", "role": "developer", "tools": [
            {"type": "namespace", "name": "functions", "tools": [
                {"type": "custom", "name": "exec", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}]},
            {"type": "web_search", "external_web_access": false}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "compute"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": reasoning},
        {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "namespace": "functions", "input": "text(6*7)"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "42"}]})
}

#[tokio::test]
async fn openai_gets_the_body_as_written_and_another_backend_is_told_what_it_did_not_get() {
    let local = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let router = router(&config(&local.base_url(), &hosted.base_url(), &temp_ledger_url()), &[]).await;

    // To OpenAI: namespaces, the custom tool, web_search and the reasoning, as Codex wrote them.
    let to_openai = post(&router.url, &codex_like("openai-first")).await;
    assert_eq!(to_openai.headers()["x-spillway-backend"], "hosted");
    assert!(to_openai.headers().get("x-spillway-dropped-tools").is_none(), "OpenAI runs web_search");
    assert!(to_openai.headers().get("x-spillway-dropped-content").is_none(), "OpenAI reads its reasoning");
    let answer: Value = to_openai.json().await.unwrap();
    assert_eq!(answer["model"], "openai-first", "{answer}");
    assert!(answer["id"].as_str().unwrap().starts_with("resp_sim"), "OpenAI's own answer: {answer}");
    let sent = hosted.requests().pop().unwrap();
    let mut expected = codex_like("gpt-5.6");
    expected["max_output_tokens"] = json!(12);
    assert_eq!(sent["input"], expected["input"], "the input went as written");
    assert_eq!(sent["include"], expected["include"]);

    // To the node: flat function tools, no reasoning, and the answer names both.
    let to_node = post(&router.url, &codex_like("t")).await;
    assert_eq!(to_node.headers()["x-spillway-backend"], "local");
    assert_eq!(to_node.headers()["x-spillway-dropped-tools"], "web_search");
    assert_eq!(to_node.headers()["x-spillway-dropped-content"], "reasoning");
    let sent = local.requests().pop().unwrap();
    assert_eq!(sent["tools"][0]["function"]["name"], "exec", "{sent}");
    assert!(!sent.to_string().contains(spillway::sim::ENCRYPTED_PREFIX), "no reasoning reached the node");

    // A task that refuses what its backends cannot run refuses web_search only where a backend
    // is not OpenAI.
    let refused = post(&router.url, &codex_like("strict")).await;
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["param"], "input[0].tools[1].type", "{error}");
}

#[tokio::test]
async fn a_request_pinned_to_openai_is_never_failed_over() {
    let local = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |a| a.error_rate = 1.0).await;
    let router = router(&config(&local.base_url(), &hosted.base_url(), &temp_ledger_url()), &[]).await;

    // Stateless, the same task fails over to the node...
    let stateless =
        post(&router.url, &json!({"model": "openai-first", "input": "hi", "max_output_tokens": 4})).await;
    assert_eq!(stateless.status(), 200);
    assert_eq!(stateless.headers()["x-spillway-backend"], "local");
    assert_eq!(stateless.headers()["x-spillway-attempts"], "2");
    // ...pinned, the client gets OpenAI's failure, streamed or not: the node was never asked.
    for stream in [false, true] {
        let pinned = post(&router.url, &continuing("openai-first", stream)).await;
        assert_eq!(pinned.status(), 503, "stream: {stream}");
        assert!(pinned.headers().get("x-spillway-backend").is_none());
        let error: Value = pinned.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("hosted") && !message.contains("local"), "{error}");
    }
}
