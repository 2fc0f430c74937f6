//! A batch line through its dialect's door and the pipeline, in process: the status, the
//! body and the backend are the pipeline's (the key's task permission, the task, the backend
//! the answer committed to, its outcome record), each in the line's dialect.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

use super::*;
use crate::config::Priority;
use crate::dispatch::Keys;
use crate::keys::{KeyBoard, StaticKeys};
use crate::outcome::Record;
use crate::serve::Serving;
use crate::sim::{SimArgs, SimHandle, SimKind};

struct Case {
    lines: InProcess,
    records: mpsc::UnboundedReceiver<Record>,
    _hosted: SimHandle,
}

/// A hosted OpenAI backend; `open` takes any key, `team-a` only the key in `KEY_A`; the keys in
/// `KEY_A` and `KEY_B` exist. `slots`: the router's concurrency.
async fn case(slots: usize) -> Case {
    let mut args = SimArgs::for_kind(SimKind::OpenAi, "gpt-5.6");
    args.reply = Some("Hello there".into());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hosted = crate::sim::spawn(args, listener).await.unwrap();
    let config = crate::config::parse(&format!(
        "client_keys_env: [KEY_A, KEY_B]\nbackends:\n  - {{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}\n\
         tasks:\n  - {{name: open, backends: [hosted], slo: {{ttft_ms: 5000}}}}\n  \
         - {{name: team-a, backends: [hosted], slo: {{ttft_ms: 5000}}, allowed_keys: [KEY_A]}}\n",
        hosted.base_url()
    ))
    .unwrap();
    let (tx, records) = mpsc::unbounded_channel();
    let serving = Arc::new(Serving::in_process(Arc::new(config), Keys::default(), tx));
    let values: HashMap<String, String> =
        [("sk-a", "KEY_A"), ("sk-b", "KEY_B")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
    let door = front::Door {
        client_keys: Arc::new(KeyBoard::new(StaticKeys::new(&values))),
        limiter: Arc::new(Semaphore::new(slots)),
        max_body_bytes: 4096,
        body_read_timeout: std::time::Duration::from_secs(5),
    };
    let lines = InProcess::new(Doors { serving, door }, Tracing::off());
    Case { lines, records, _hosted: hosted }
}

fn call(owner: &str, endpoint: &str, body: Value) -> LineCall {
    LineCall {
        owner: Some(owner.into()),
        endpoint: endpoint.into(),
        body: body.to_string(),
        fleet_only: false,
        request_id: "batch_1-0".into(),
    }
}

fn chat(task: &str) -> Value {
    json!({"model": task, "messages": [{"role": "user", "content": "hi"}]})
}

fn messages(task: &str) -> Value {
    json!({"model": task, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
}

fn body(answer: &LineAnswer) -> Value {
    serde_json::from_str(&answer.body).unwrap()
}

#[tokio::test]
async fn a_served_line_is_its_dialects_whole_answer_from_the_backend_it_committed_to() {
    let mut case = case(4).await;
    let answer = case.lines.call(call("KEY_B", "/v1/chat/completions", chat("open"))).await;
    assert_eq!((answer.status, answer.backend.as_deref()), (200, Some("hosted")), "{}", answer.body);
    let json = body(&answer);
    assert_eq!((json["object"].as_str(), json["model"].as_str()), (Some("chat.completion"), Some("open")));
    assert_eq!(json["choices"][0]["message"]["content"], "Hello there");

    let answer = case.lines.call(call("KEY_A", "/v1/messages", messages("team-a"))).await;
    assert_eq!((answer.status, answer.backend.as_deref()), (200, Some("hosted")), "{}", answer.body);
    let json = body(&answer);
    assert_eq!((json["type"].as_str(), json["model"].as_str()), (Some("message"), Some("team-a")));
    assert_eq!(json["content"][0]["text"], "Hello there");

    // Each was dispatched as its owner's, at batch priority, under the line's request id.
    let mut requests = Vec::new();
    while requests.len() < 2 {
        if let Record::Request(r) = case.records.recv().await.unwrap() {
            requests.push(r);
        }
    }
    for (r, key) in requests.iter().zip(["KEY_B", "KEY_A"]) {
        assert_eq!(
            (r.meta.priority, r.meta.client_key.as_deref(), r.meta.request_id.as_str()),
            (Priority::Batch, Some(key), "batch_1-0"),
        );
        assert_eq!(r.backend, "hosted");
    }
}

#[tokio::test]
async fn a_line_the_pipeline_refuses_gets_the_dialects_envelope_and_status() {
    let case = case(4).await;
    // The owner's key may not use the task: refused by the pipeline, no backend.
    let denied = case.lines.call(call("KEY_B", "/v1/chat/completions", chat("team-a"))).await;
    assert_eq!((denied.status, denied.backend.as_deref()), (403, None));
    assert_eq!(body(&denied)["error"]["type"], "permission_error", "{}", denied.body);
    let denied = case.lines.call(call("KEY_B", "/v1/messages", messages("team-a"))).await;
    assert_eq!((denied.status, denied.backend.as_deref()), (403, None));
    assert_eq!(body(&denied)["type"], "error", "Anthropic's envelope: {}", denied.body);
    assert_eq!(body(&denied)["error"]["type"], "permission_error");

    // No such task; a body the door refuses; a key that no longer exists.
    let lost = case.lines.call(call("KEY_A", "/v1/embeddings", json!({"model": "nope", "input": "x"}))).await;
    assert_eq!((lost.status, body(&lost)["error"]["code"].as_str()), (404, Some("model_not_found")));
    let bad = case.lines.call(call("KEY_A", "/v1/messages", json!({"model": "open", "messages": []}))).await;
    assert_eq!((bad.status, body(&bad)["error"]["type"].as_str()), (400, Some("invalid_request_error")));
    let gone = case.lines.call(call("KEY_GONE", "/v1/messages", messages("open"))).await;
    assert_eq!((gone.status, body(&gone)["error"]["type"].as_str()), (401, Some("authentication_error")));
}

#[tokio::test]
async fn a_line_beyond_the_routers_concurrency_is_turned_away_for_the_runner_to_retry() {
    let case = case(0).await;
    let full = case.lines.call(call("KEY_A", "/v1/chat/completions", chat("open"))).await;
    assert_eq!((full.status, body(&full)["error"]["code"].as_str()), (429, Some("router_overloaded")));
    let full = case.lines.call(call("KEY_A", "/v1/messages", messages("open"))).await;
    assert_eq!((full.status, body(&full)["error"]["type"].as_str()), (529, Some("overloaded_error")));
}
