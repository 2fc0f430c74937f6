//! The client's own chat body, sent as written, means what the typed body means: read back by
//! the chat door's own decoder, both give the same canonical request, for any request the door
//! accepts and any call (model, stream, a task's system prompt, whether `prompt_cache_key`
//! goes on); every member the wire passes on reaches the upstream as the client wrote it, and
//! no other member does.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::{written_body, ChatBody, PASSED};
use crate::adapter::{Call, Upstream, WireFormat};
use crate::api::wire::decode_bytes;
use crate::canonical::{ChatRequest, WrittenBody};

/// A body as the chat door reads it: decoded and checked, its bytes kept.
fn door(body: &[u8]) -> ChatRequest {
    let mut request = decode_bytes(&bytes::Bytes::copy_from_slice(body))
        .unwrap_or_else(|e| panic!("{e:?}: {}", String::from_utf8_lossy(body)));
    request.to_canonical(Some(4096)).unwrap()
}

/// The body forwarded for `call`, from the members where the door found them; the same as from
/// the members found in the bytes again.
fn forwarded(req: &ChatRequest, call: &Call, cache_key: bool) -> Vec<u8> {
    let written = req.written.as_ref().expect("the door keeps the body");
    let body = written_body(written, req, call, cache_key).expect("an object");
    let again = WrittenBody::of(written.bytes.clone());
    assert_eq!(body, written_body(&again, req, call, cache_key).unwrap(), "the same from the bytes");
    body
}

/// Both bodies of `call` of the client body `body`, checked to mean the same; the forwarded one.
fn forwarded_means_the_typed(
    body: &Value,
    model: &str,
    stream: bool,
    variant: Option<&str>,
    cache_key: bool,
) -> Value {
    let bytes = serde_json::to_vec(body).unwrap();
    let req = door(&bytes);
    let call = Call { model, stream, ..Call::as_written(WireFormat::OpenAi, Upstream::default(), &req) };
    let call = call.with_variant(variant);
    let typed = serde_json::to_vec(&ChatBody::of(&req, &call, cache_key)).unwrap();
    let forwarded = forwarded(&req, &call, cache_key);
    let read = |b: &[u8]| ChatRequest { written: None, ..door(b) };
    assert_eq!(read(&forwarded), read(&typed), "{}", String::from_utf8_lossy(&forwarded));
    let sent: Value = serde_json::from_slice(&forwarded).unwrap();
    let typed: Value = serde_json::from_slice(&typed).unwrap();
    for owned in ["model", "stream", "stream_options", "prompt_cache_key"] {
        assert_eq!(sent.get(owned), typed.get(owned), "{owned}");
    }
    for (key, value) in body.as_object().unwrap() {
        let passed = PASSED.contains(&key.as_str()) && !(key == "messages" && variant.is_some());
        if passed {
            assert_eq!(sent.get(key), Some(value), "{key} as the client wrote it");
        }
    }
    // The cap may go under the client's name for it; every other member is one the typed body sends.
    for key in sent.as_object().unwrap().keys() {
        let typed_name = if key == "max_completion_tokens" { "max_tokens" } else { key };
        assert!(typed.get(typed_name).is_some(), "{key} is sent only where the typed body sends it");
    }
    sent
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 .,]{0,40}",
        Just("caf\u{e9} \"quoted\" \\ back\nline \u{1f600} \u{0}".to_string())
    ]
}

fn message() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(|t| json!({"role": "system", "content": t})),
        text().prop_map(|t| json!({"role": "user", "content": t})),
        (text(), text()).prop_map(|(a, b)| json!({"role": "user", "content": [
            {"type": "text", "text": a},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
            {"type": "text", "text": b}]})),
        (text(), any::<bool>()).prop_map(|(t, empty)| json!({"role": "assistant",
            "content": if empty { Value::Null } else { Value::String(t) },
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"src/a.rs\"}"}}]})),
        text().prop_map(|t| json!({"role": "tool", "tool_call_id": "call_1", "content": t})),
        text().prop_map(|t| json!({"role": "assistant", "content": t, "name": "helper"})),
    ]
}

fn body() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(message(), 1..6),
        (any::<bool>(), any::<bool>(), proptest::option::of(1u32..10_000), any::<bool>()),
        (any::<bool>(), proptest::option::of(0.0f64..2.0), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(mut messages, (stream, usage, cap, completion_name), (tools, temperature, key, extra))| {
                messages.push(json!({"role": "user", "content": "go on"}));
                let mut body = Map::new();
                body.insert("model".into(), json!("coder"));
                body.insert("messages".into(), Value::Array(messages));
                body.insert("stream".into(), json!(stream));
                if stream && usage {
                    body.insert(
                        "stream_options".into(),
                        json!({"include_usage": false, "include_obfuscation": true}),
                    );
                }
                if let Some(cap) = cap {
                    let name = if completion_name { "max_completion_tokens" } else { "max_tokens" };
                    body.insert(name.into(), json!(cap));
                }
                if tools {
                    body.insert(
                        "tools".into(),
                        json!([{"type": "function", "function": {"name": "read_file",
                    "description": "Read a file.", "parameters": {"type": "object",
                    "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]),
                    );
                    body.insert(
                        "tool_choice".into(),
                        json!({"type": "function", "function": {"name": "read_file"}}),
                    );
                }
                if let Some(t) = temperature {
                    body.insert("temperature".into(), json!(t));
                }
                if key {
                    body.insert("prompt_cache_key".into(), json!("session-7"));
                    body.insert("user".into(), json!("dev@example.com"));
                }
                if extra {
                    // Members the typed body does not write: left out, as it leaves them.
                    body.insert("logprobs".into(), json!(true));
                    body.insert("metadata".into(), json!({"ticket": "T-1", "nested": {"a": [1, 2.5, null]}}));
                    body.insert("reasoning_effort".into(), json!("low"));
                }
                Value::Object(body)
            },
        )
}

proptest! {
    #[test]
    fn the_forwarded_body_means_what_the_typed_body_means(
        body in body(),
        stream in any::<bool>(),
        variant in proptest::option::of(text()),
        cache_key in any::<bool>(),
    ) {
        forwarded_means_the_typed(&body, "served-model", stream, variant.as_deref(), cache_key);
    }
}

/// An agent's turn as benches/agent_turn.py writes one: a long system prompt, tool schemas and
/// a history of tool calls and results.
fn agent_turn() -> Value {
    let tool = |name: &str| {
        json!({"type": "function", "function": {"name": name, "description": "A tool.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Where."}},
        "required": ["path"], "additionalProperties": false}}})
    };
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent. ".repeat(800)})];
    for i in 0..40 {
        let id = format!("call_{i:04}");
        messages.push(json!({"role": "assistant", "content": "Reading.", "tool_calls": [{"id": id,
            "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"src/lib.rs\"}"}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": "    let a = b(&c);\n".repeat(100)}));
    }
    messages.push(json!({"role": "user", "content": "Now run the tests again."}));
    let tools: Vec<Value> = (0..12).map(|i| tool(&format!("tool_{i}"))).collect();
    json!({"model": "coder", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 4096,
        "messages": messages, "tools": tools, "tool_choice": "auto"})
}

#[test]
fn an_agents_turn_goes_as_written_but_its_model_and_its_cap() {
    let body = agent_turn();
    let bytes = serde_json::to_vec(&body).unwrap();
    assert!(bytes.len() > 100_000, "{}", bytes.len());
    let sent = forwarded_means_the_typed(&body, "served-model", true, None, false);
    assert_eq!((&sent["model"], &sent["max_tokens"]), (&json!("served-model"), &json!(4096)));
    // With no variant, the conversation's bytes are the client's, byte for byte.
    let req = door(&bytes);
    let call =
        Call { model: "served-model", ..Call::as_written(WireFormat::OpenAi, Upstream::default(), &req) };
    assert!(req.written.as_ref().is_some_and(|w| w.members.is_some()), "one pass found the members");
    let forwarded = forwarded(&req, &call, false);
    let messages = serde_json::to_vec(&body["messages"]).unwrap();
    assert!(forwarded.windows(messages.len()).any(|w| w == messages.as_slice()));
}

#[test]
fn a_task_prompt_goes_first_and_the_cap_keeps_the_clients_name() {
    let body = json!({"model": "coder", "max_completion_tokens": 9000,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]});
    let sent = forwarded_means_the_typed(&body, "o4-mini", false, Some("Use JSON."), true);
    assert_eq!(sent["messages"][0], json!({"role": "system", "content": "Use JSON."}));
    assert_eq!(sent["messages"][1], json!({"role": "system", "content": "be brief"}));
    // The door caps the output at the task's 4096, under the name the client used.
    assert_eq!((sent.get("max_tokens"), &sent["max_completion_tokens"]), (None, &json!(4096)));
    assert_eq!((sent.get("stream_options"), &sent["stream"]), (None, &json!(false)));
}
