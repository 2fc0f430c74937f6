//! `POST /v1/messages` through a real router in front of simulators: translated to a vLLM
//! node's chat completions, passed through to Anthropic and to a node that serves Messages
//! natively, spilled from a full fleet to Anthropic, counted, listed, and refused in
//! Anthropic's envelope.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use spillway::sim::SimKind;

use crate::common::{self, router, sim, Router};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const CLAUDE: &str = "claude-sonnet-4-5";
const ADMIN: &str = "messages-admin-token";

/// A fleet node (`local`), Anthropic (`claude`), and tasks over them: `coder` prefers the
/// fleet and spills to Anthropic, `claude-only` and `native` have one backend each.
fn config(local: &str, anthropic: &str, native: &str, ledger: &str, local_extra: &str) -> String {
    format!(
        r#"
backends:
  - {{name: local, kind: vllm, endpoints: ["{local}"], model: {LLAMA}{local_extra}}}
  - {{name: native, kind: vllm, endpoints: ["{native}"], model: {LLAMA}, messages: native}}
  - {{name: claude, kind: anthropic, base_url: "{anthropic}", model: {CLAUDE}, api_key_env: ANTHROPIC_KEY,
      price: {{input_per_mtok: "3", output_per_mtok: "15"}}}}
tasks:
  - {{name: coder, aliases: [claude-sonnet-4-6], backends: [local, claude], slo: {{ttft_ms: 5000}}}}
  - {{name: claude-only, backends: [claude], slo: {{ttft_ms: 5000}}}}
  - {{name: native, backends: [native], slo: {{ttft_ms: 5000}}}}
ledger: {{url: "{ledger}"}}
admin_token_env: MESSAGES_ADMIN
"#
    )
}

struct Setup {
    router: Router,
    ledger: String,
    _sims: Vec<spillway::sim::SimHandle>,
}

async fn setup(local_extra: &str, tune_local: impl FnOnce(&mut spillway::sim::SimArgs)) -> Setup {
    let local = sim(SimKind::Vllm, LLAMA, tune_local).await;
    let native = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let anthropic = sim(SimKind::Anthropic, CLAUDE, |a| a.api_key = Some("sk-ant-sim".into())).await;
    let ledger = common::temp_ledger_url();
    let yaml = config(&local.base_url(), &anthropic.base_url(), &native.base_url(), &ledger, local_extra);
    let router = router(&yaml, &[("ANTHROPIC_KEY", "sk-ant-sim"), ("MESSAGES_ADMIN", ADMIN)]).await;
    Setup { router, ledger, _sims: vec![local, native, anthropic] }
}

fn request(model: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 16, "stream": stream, "system": "be brief",
           "messages": [{"role": "user", "content": "summarise: disk full on node 3"}]})
}

async fn post(router: &Router, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", router.url))
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// A streamed answer's events, as (name, data).
async fn events(response: reqwest::Response) -> Vec<(String, Value)> {
    let mut events = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    while let Some(Ok(event)) = events.next().await {
        out.push((event.event, serde_json::from_str(&event.data).unwrap()));
    }
    out
}

/// One coherent Messages stream: one start, blocks opened, filled and closed in index order,
/// one stop; returns the text of its text blocks.
fn coherent_text(events: &[(String, Value)]) -> String {
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).filter(|n| *n != "ping").collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"], "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "message_start").count(), 1);
    let (mut open, mut next, mut text) = (None, 0, String::new());
    for (name, data) in events {
        match name.as_str() {
            "content_block_start" => {
                assert_eq!((open, data["index"].as_u64()), (None, Some(next)), "{events:?}");
                open = Some(next);
                next += 1;
            }
            "content_block_delta" => {
                assert_eq!(data["index"].as_u64(), open, "{events:?}");
                text.push_str(data["delta"]["text"].as_str().unwrap_or(""));
            }
            "content_block_stop" => open = None,
            "error" => panic!("the stream failed: {data}"),
            _ => {}
        }
    }
    text
}

#[tokio::test]
async fn a_messages_request_is_routed_priced_and_counted_like_chat() {
    let s = setup("", |_| {}).await;
    let response = post(&s.router, "/v1/messages", &request("coder", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-spillway-backend"], "local");
    let message: Value = response.json().await.unwrap();
    assert_eq!((message["type"].clone(), message["role"].clone()), (json!("message"), json!("assistant")));
    assert_eq!(message["model"], "coder");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert!(!message["content"][0]["text"].as_str().unwrap().is_empty(), "{message}");
    assert_eq!(message["stop_reason"], "max_tokens");
    assert_eq!(message["usage"]["output_tokens"], 16);

    // The alias names the same task; streamed to Anthropic, it is priced.
    let streamed = post(&s.router, "/v1/messages", &request("claude-only", true)).await;
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    assert!(!coherent_text(&events(streamed).await).is_empty());
    let alias = post(&s.router, "/v1/messages", &request("claude-sonnet-4-6", false)).await;
    assert_eq!(alias.status(), 200);

    common::wait_ledger_written(&s.router).await;
    let store = spillway::ledger::Store::open(&s.ledger).await.unwrap();
    let rows = store.query(i64::MIN, i64::MAX).await.unwrap();
    let row = |task: &str| {
        rows.iter().find(|r| r.task == task).unwrap_or_else(|| panic!("no row for {task}: {rows:?}"))
    };
    assert_eq!((row("coder").backend.as_str(), row("coder").output_tokens), ("local", 16));
    assert_eq!(rows.iter().filter(|r| r.task == "coder").count(), 2, "the alias is counted under its task");
    let claude = row("claude-only");
    assert_eq!(claude.backend, "claude");
    assert!(claude.input_tokens > 0 && claude.output_tokens > 0, "{claude:?}");
    assert!(claude.cost_usd.is_some_and(|c| c > rust_decimal::Decimal::ZERO), "{claude:?}");
    let metrics = common::metrics_text(&s.router).await;
    let served =
        |task| common::series_sum(&metrics, "spillway_requests_total", &[("task", task)]).unwrap_or(0.0);
    assert_eq!((served("coder"), served("claude-only")), (2.0, 1.0), "{metrics}");
}

#[tokio::test]
async fn a_messages_stream_spills_from_a_full_fleet_to_anthropic_as_one_answer() {
    let s = setup(", max_inflight_per_node: 1", |a| a.token_delay_ms = 30).await;
    // A long answer holds the fleet's only slot; its headers mean it has committed there.
    let mut long = request("coder", true);
    long["max_tokens"] = json!(400);
    let holder = post(&s.router, "/v1/messages", &long).await;
    assert_eq!(holder.headers()["x-spillway-backend"], "local");

    let spilled = post(&s.router, "/v1/messages", &request("coder", true)).await;
    assert_eq!(spilled.status(), 200);
    assert_eq!(spilled.headers()["x-spillway-backend"], "claude");
    let events = events(spilled).await;
    let text = coherent_text(&events);
    assert!(!text.is_empty(), "{events:?}");
    assert_eq!(events[0].1["message"]["model"], "coder", "the client sees the model it asked for");
    assert_eq!(events.iter().rev().nth(1).unwrap().1["delta"]["stop_reason"], "max_tokens");

    // The pool's demand it did not serve: the spilled prompt (about a dozen tokens) per second
    // over the last minute. The pool the task does not use reads 0, not nothing.
    let spilled = |pool: &str| format!(r#"spillway_pool_spilled_tokens_per_second{{backend="{pool}"}}"#);
    let within = std::time::Duration::from_secs(5);
    let rate = common::wait_metric(&s.router.url, &spilled("local"), f64::MIN_POSITIVE, within).await;
    assert!(rate > 0.0 && rate < 1.0, "{rate} tokens/s");
    let text = common::metrics_text(&s.router.url).await;
    assert!(text.lines().any(|l| l == format!("{} 0", spilled("native"))), "{text}");
    drop(holder);
}

#[tokio::test]
async fn a_session_that_spills_and_comes_home_has_its_moves_counted_and_listed() {
    let s = setup(", max_inflight_per_node: 1", |a| a.token_delay_ms = 30).await;
    let url = &s.router.url;
    let turn = || async move {
        reqwest::Client::new()
            .post(format!("{url}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .header("x-claude-code-session-id", "session-7")
            .json(&request("coder", false))
            .send()
            .await
            .unwrap()
    };
    let backend = |r: &reqwest::Response| r.headers()["x-spillway-backend"].to_str().unwrap().to_string();
    assert_eq!(backend(&turn().await), "local", "the session starts on the fleet");
    // Another client's long answer fills the fleet's only slot: the session spills...
    let mut long = request("coder", true);
    long["max_tokens"] = json!(400);
    let holder = post(&s.router, "/v1/messages", &long).await;
    assert_eq!(holder.headers()["x-spillway-backend"], "local");
    assert_eq!(backend(&turn().await), "claude");
    // ...and comes home once the slot is free again.
    drop(holder);
    let home = || {
        let answer = turn();
        async move { backend(&answer.await) == "local" }
    };
    common::wait_until(std::time::Duration::from_secs(10), "the session back on the fleet", home).await;

    let moves =
        |direction: &str| format!(r#"spillway_session_moves_total{{direction="{direction}",task="coder"}}"#);
    let within = std::time::Duration::from_secs(5);
    assert_eq!(common::wait_metric(&s.router.url, &moves("home"), 1.0, within).await, 1.0);
    assert_eq!(common::metric(&s.router.url, &moves("to_hosted")).await, 1.0);

    let listed: Value = reqwest::Client::new()
        .get(format!("{}/admin/sessions", s.router.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "only the session's requests are a session: {listed}");
    let session = &sessions[0];
    assert_eq!((session["to_hosted"].as_u64(), session["home"].as_u64()), (Some(1), Some(1)), "{session}");
    assert_eq!(
        (&session["place"], &session["backend"], &session["task"]),
        (&json!("fleet"), &json!("local"), &json!("coder"))
    );
    assert_eq!(session["source"], "session_header");
    assert!(!listed.to_string().contains("session-7"), "a session is named by its hash only: {listed}");
    let one = reqwest::Client::new()
        .get(format!("{}/admin/sessions/{}", s.router.url, session["session"].as_str().unwrap()))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 200);
    assert_eq!(one.json::<Value>().await.unwrap(), *session);
}

#[tokio::test]
async fn anthropic_gets_the_body_as_written_and_its_signatures_come_back() {
    let s = setup("", |_| {}).await;
    let mut body = request("claude-only", false);
    body["max_tokens"] = json!(2048);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    // A thinking block a local model wrote before a spill has no signature: Anthropic would
    // refuse the request (as the simulator does), so it is dropped for Anthropic.
    body["messages"] = json!([
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "local reasoning"}, {"type": "text", "text": "an answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}}]},
    ]);
    let response = post(&s.router, "/v1/messages", &body).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert!(message["id"].as_str().unwrap().starts_with("msg_sim"), "Anthropic's own message: {message}");
    assert_eq!(message["content"][0]["type"], "thinking", "{message}");
    // Marked with its signer (adapter/wire/anthropic/provenance.rs), so that it goes back to
    // Anthropic alone.
    let signature = message["content"][0]["signature"].as_str().unwrap();
    assert!(signature.starts_with("spillway:anthropic:sim-signature-anthropic-"), "{message}");
    assert_eq!(message["model"], "claude-only");

    body["stream"] = json!(true);
    let events = events(post(&s.router, "/v1/messages", &body).await).await;
    coherent_text(&events);
    let signature = events.iter().find(|(_, d)| d["delta"]["type"] == "signature_delta");
    let signature = signature.map(|(_, d)| d["delta"]["signature"].as_str().unwrap_or_default());
    assert!(
        signature.is_some_and(|s| s.starts_with("spillway:anthropic:")),
        "the signature is relayed, marked: {events:?}"
    );
}

#[tokio::test]
async fn a_node_that_serves_messages_gets_them_natively() {
    let s = setup("", |_| {}).await;
    let response = post(&s.router, "/v1/messages", &request("native", false)).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert!(message["id"].as_str().unwrap().starts_with("msg_sim"), "the node's own message: {message}");
    assert_eq!(message["usage"]["output_tokens"], 16);
    let translated: Value =
        post(&s.router, "/v1/messages", &request("coder", false)).await.json().await.unwrap();
    assert!(
        !translated["id"].as_str().unwrap().starts_with("msg_sim"),
        "a chat node's answer is Spillway's: {translated}"
    );
}

#[tokio::test]
async fn count_tokens_says_whose_count_and_whether_it_is_exact() {
    let s = setup("", |_| {}).await;
    let mut body = request("claude-only", false);
    body.as_object_mut().unwrap().remove("max_tokens");
    let exact = post(&s.router, "/v1/messages/count_tokens", &body).await;
    assert_eq!(exact.status(), 200);
    assert_eq!(exact.headers()["x-spillway-token-count"], "exact");
    assert_eq!(exact.headers()["x-spillway-backend"], "claude");
    let count: Value = exact.json().await.unwrap();
    assert!(count["input_tokens"].as_u64().unwrap() > 5, "{count}");

    body["model"] = json!("coder");
    let estimate = post(&s.router, "/v1/messages/count_tokens", &body).await;
    assert_eq!(estimate.headers()["x-spillway-token-count"], "estimate");
    assert_eq!(estimate.headers()["x-spillway-backend"], "local");
}

#[tokio::test]
async fn models_are_listed_in_anthropics_shape_with_aliases() {
    let s = setup("", |_| {}).await;
    let client = reqwest::Client::new();
    let anthropic: Value = client
        .get(format!("{}/v1/models", s.router.url))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> =
        anthropic["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["coder", "claude-sonnet-4-6", "claude-only", "native"]);
    assert_eq!(anthropic["data"][0]["type"], "model");
    assert_eq!(anthropic["has_more"], false);
    let openai: Value =
        client.get(format!("{}/v1/models", s.router.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(openai["object"], "list");
    assert_eq!(openai["data"][1]["id"], "claude-sonnet-4-6");
}

#[tokio::test]
async fn mistakes_and_failures_come_back_in_anthropics_envelope() {
    let s = setup("", |a| a.drop_after = Some(3)).await;
    let refused = |status: u16, kind: &'static str, needle: &'static str| {
        move |(got, body): (u16, Value)| {
            assert_eq!(got, status, "{body}");
            assert_eq!(body["type"], "error", "{body}");
            assert_eq!(body["error"]["type"], kind, "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains(needle), "{message}");
        }
    };
    let send = |body: Value| {
        let router = &s.router;
        async move {
            let response = post(router, "/v1/messages", &body).await;
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let mut no_max = request("coder", false);
    no_max.as_object_mut().unwrap().remove("max_tokens");
    refused(400, "invalid_request_error", "max_tokens")(send(no_max).await);
    let mut orphan = request("coder", false);
    orphan["messages"] = json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "42"}]}]);
    refused(400, "invalid_request_error", "tool_use_id")(send(orphan).await);
    refused(404, "not_found_error", "no-such-task")(send(request("no-such-task", false)).await);

    // The local node drops every stream after three tokens: once a token has reached the
    // client, the break ends the stream with an error event, never another model's text.
    let events = events(post(&s.router, "/v1/messages", &request("coder", true)).await).await;
    let last = events.last().unwrap();
    assert_eq!(last.0, "error", "{events:?}");
    assert_eq!(last.1["type"], "error");
    assert!(events.iter().all(|(n, _)| n != "message_stop"), "{events:?}");
}

#[tokio::test]
async fn thinking_only_anthropic_can_read_stays_with_anthropic_and_its_absence_is_said() {
    let s = setup("", |_| {}).await;
    // A session that spilled to Anthropic and comes home: its history holds signed thinking.
    let body = |model: &str| {
        json!({"model": model, "max_tokens": 16, "messages": [
            {"role": "user", "content": "plan the fix"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "look at the disk first", "signature": "EqQBCkYIBxgCKkD"},
                {"type": "text", "text": "Check the disk."}]},
            {"role": "user", "content": "done, what next?"}]})
    };
    let home = post(&s.router, "/v1/messages", &body("native")).await;
    assert_eq!(home.status(), 200);
    assert_eq!(home.headers()["x-spillway-dropped-content"], "thinking", "the node got no signed thinking");
    let translated = post(&s.router, "/v1/messages", &body("coder")).await;
    assert_eq!(translated.status(), 200);
    assert_eq!(translated.headers()["x-spillway-backend"], "local");
    assert_eq!(translated.headers()["x-spillway-dropped-content"], "thinking");
    let anthropic = post(&s.router, "/v1/messages", &body("claude-only")).await;
    assert_eq!(anthropic.status(), 200);
    assert!(anthropic.headers().get("x-spillway-dropped-content").is_none(), "Anthropic reads its own");
}

#[tokio::test]
async fn server_tools_reach_anthropic_and_are_left_out_elsewhere_saying_so() {
    let native = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let anthropic = sim(SimKind::Anthropic, CLAUDE, |a| a.api_key = Some("sk-ant-sim".into())).await;
    let yaml = format!(
        r#"
backends:
  - {{name: native, kind: vllm, endpoints: ["{native}"], model: {LLAMA}, messages: native, capabilities: {{tools: true}}}}
  - {{name: claude, kind: anthropic, base_url: "{anthropic}", model: {CLAUDE}, api_key_env: ANTHROPIC_KEY}}
tasks:
  - {{name: on-claude, backends: [claude], slo: {{ttft_ms: 5000}}}}
  - {{name: on-native, backends: [native], slo: {{ttft_ms: 5000}}}}
  - {{name: strict, backends: [native, claude], slo: {{ttft_ms: 5000}}, unsupported_tools: refuse}}
"#,
        native = native.base_url(),
        anthropic = anthropic.base_url(),
    );
    let router = router(&yaml, &[("ANTHROPIC_KEY", "sk-ant-sim")]).await;
    let body = |model: &str| {
        json!({"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "news?"}],
               "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1},
                         {"name": "grep", "input_schema": {"type": "object"}}]})
    };
    let to_anthropic = post(&router, "/v1/messages", &body("on-claude")).await;
    assert_eq!(to_anthropic.status(), 200);
    assert!(to_anthropic.headers().get("x-spillway-dropped-tools").is_none(), "Anthropic runs its own");
    let to_node = post(&router, "/v1/messages", &body("on-native")).await;
    assert_eq!(to_node.status(), 200);
    assert_eq!(to_node.headers()["x-spillway-dropped-tools"], "web_search_20250305");
    // A task that refuses them says which, in Anthropic's envelope.
    let strict = post(&router, "/v1/messages", &body("strict")).await;
    assert_eq!(strict.status(), 400);
    let error: Value = strict.json().await.unwrap();
    assert!(error["error"]["message"].as_str().unwrap().starts_with("tools.0.type"), "{error}");
}
