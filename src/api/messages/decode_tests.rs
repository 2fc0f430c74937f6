use axum::http::{HeaderMap, HeaderValue};
use serde_json::{json, Value};

use super::*;
use crate::api::error::ErrorCode;

fn decoded(body: Value) -> Decoded {
    decode(&body.to_string().into(), Asked::Answer).unwrap_or_else(|e| panic!("refused: {e:?}"))
}

fn refused(body: Value) -> ApiError {
    match decode(&body.to_string().into(), Asked::Answer) {
        Err(e) => e,
        Ok(d) => d.to_canonical(&HeaderMap::new(), None).expect_err("accepted"),
    }
}

#[test]
fn a_full_request_becomes_the_canonical_one_and_keeps_its_body() {
    let body = json!({
        "model": "coder", "max_tokens": 4000, "stream": true, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
        "stop_sequences": ["END"], "metadata": {"user_id": "dev-7"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "Use tools."}],
        "tools": [{"name": "read_file", "description": "read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "tool_choice": {"type": "any"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "open a.rs"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "I should read it", "signature": "s1"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.rs"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "fn main() {}"}]},
                {"type": "text", "text": "explain"}]},
        ],
    });
    let mut headers = HeaderMap::new();
    headers.insert("anthropic-beta", HeaderValue::from_static("interleaved-thinking-2025-05-14"));
    let d = decoded(body.clone());
    assert!(d.wants_stream());
    let c = d.to_canonical(&headers, Some(1000)).unwrap();
    assert_eq!(c.max_tokens, Some(1000), "capped by the task");
    assert_eq!((c.temperature, c.top_p, c.top_k), (Some(0.5), Some(0.9), Some(40)));
    assert_eq!(c.stop, ["END"]);
    assert_eq!(c.user.as_deref(), Some("dev-7"));
    assert_eq!(c.tool_choice, Some(ToolChoice::Required));
    assert_eq!(c.tools[0].parameters.tree()["properties"]["path"]["type"], "string");
    let roles: Vec<Role> = c.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::Tool, Role::User]);
    assert_eq!(c.messages[0].content, "You are terse.\n\nUse tools.");
    assert_eq!(c.messages[1].images[0].url, "data:image/png;base64,AAAA");
    assert_eq!(c.messages[2].content, "Reading.");
    assert_eq!(c.messages[2].tool_calls[0].arguments, r#"{"path":"a.rs"}"#);
    assert_eq!(c.messages[3].tool_call_id.as_deref(), Some("toolu_1"));
    assert_eq!(c.messages[3].content, "fn main() {}");
    assert_eq!(c.messages[4].content, "explain");
    let native = c.native.as_ref().unwrap();
    assert_eq!(native.body.tree()["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(native.body.tree()["messages"][1]["content"][0]["signature"], "s1");
    assert_eq!(native.header("anthropic-beta"), Some("interleaved-thinking-2025-05-14"));
    assert_eq!(native.header("anthropic-version"), Some(DEFAULT_VERSION), "defaulted");
    assert!(c.relay && c.stream);
}

#[test]
fn each_mistake_is_a_400_naming_its_field() {
    let base =
        || json!({"model": "coder", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = base();
        f(&mut b);
        refused(b)
    };
    let cases: Vec<(ApiError, &str)> = vec![
        (
            with(&|b| {
                b.as_object_mut().unwrap().remove("max_tokens");
            }),
            "max_tokens",
        ),
        (with(&|b| b["max_tokens"] = json!(0)), "max_tokens"),
        (with(&|b| b["messages"] = json!([])), "messages"),
        (with(&|b| b["temperature"] = json!(1.5)), "temperature"),
        (with(&|b| b["messages"][0]["role"] = json!("narrator")), "messages[0].role"),
        (
            with(&|b| {
                b["messages"][0] = json!({"role": "system", "content": [{"type": "image", "source": {}}]})
            }),
            "messages.0.content.0.type",
        ),
        (
            with(
                &|b| b["messages"] = json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]),
            ),
            "messages.0.content.0.tool_use_id",
        ),
        (
            with(&|b| b["messages"][0]["content"] = json!([{"type": "video", "url": "x"}])),
            "messages.0.content.0.type",
        ),
        (
            with(&|b| {
                b["messages"][0]["content"] =
                    json!([{"type": "tool_use", "id": "t", "name": "n", "input": {}}])
            }),
            "messages.0.content.0.type",
        ),
        (with(&|b| b["messages"][0]["content"] = json!(7)), "messages.0.content"),
        (with(&|b| b["tools"] = json!([{"name": "f", "input_schema": "nope"}])), "tools.0.input_schema"),
        (with(&|b| b["tools"] = json!([{"type": "bogus_20250305", "name": "bogus"}])), "tools.0.type"),
        (
            with(&|b| {
                b["tools"] = json!([{"name": "f", "input_schema": {"type": "object"}}]);
                b["tool_choice"] = json!({"type": "tool", "name": "g"});
            }),
            "tool_choice.name",
        ),
        (
            with(&|b| b["thinking"] = json!({"type": "enabled", "budget_tokens": 50})),
            "thinking.budget_tokens",
        ),
        (with(&|b| b["system"] = json!([{"type": "image"}])), "system.0"),
    ];
    for (error, param) in cases {
        assert_eq!(error.status, 400, "{error:?}");
        assert_eq!(error.param.as_deref(), Some(param), "{error:?}");
        assert_ne!(error.code, ErrorCode::InvalidJson);
    }
    let not_json = decode(&Bytes::from_static(b"{\"model\": "), Asked::Answer).err().unwrap();
    assert_eq!(not_json.code, ErrorCode::InvalidJson);
    let array = decode(&Bytes::from_static(b"[1]"), Asked::Answer).err().unwrap();
    assert_eq!(array.status, 400);
}

#[test]
fn a_system_message_inside_the_conversation_keeps_its_place() {
    // What Claude Code sends with the mid-conversation-tool-changes beta.
    let d = decoded(json!({"model": "m", "max_tokens": 5, "system": "be kind", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": [{"type": "text", "text": "Tools changed."}, {"type": "text", "text": "Use grep."}]},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "bye"}]}));
    let c = d.to_canonical(&HeaderMap::new(), None).unwrap();
    let got: Vec<(Role, &str)> = c.messages.iter().map(|m| (m.role, m.content.as_str())).collect();
    assert_eq!(
        got,
        [
            (Role::System, "be kind"),
            (Role::User, "hi"),
            (Role::Assistant, "hello"),
            (Role::System, "Tools changed.\n\nUse grep."),
            (Role::System, "Be brief."),
            (Role::User, "bye"),
        ]
    );
    assert_eq!(c.native.unwrap().body.tree()["messages"][2]["role"], "system", "the body as written");
}

#[test]
fn a_string_system_and_string_contents_are_taken_as_they_are() {
    let d = decoded(json!({"model": "m", "max_tokens": 5, "system": "be kind",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]}));
    let c = d.to_canonical(&HeaderMap::new(), None).unwrap();
    let texts: Vec<&str> = c.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["be kind", "hi", "hello", "bye"]);
    assert_eq!(c.max_tokens, Some(5));
    assert!(!d.wants_stream());
}

/// Claude Code's recorded turn (tests/fixtures/agents/): its system blocks, a system message
/// inside the conversation, 32 KB of tool schemas and beta fields.
fn claude_code() -> (Value, HeaderMap) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/agents/claude-code-2.1.332.json");
    let captured: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut headers = HeaderMap::new();
    for name in ["anthropic-version", "anthropic-beta"] {
        headers.insert(name, HeaderValue::from_str(captured["headers"][name].as_str().unwrap()).unwrap());
    }
    (captured["body"].clone(), headers)
}

#[test]
fn claude_codes_recorded_turn_goes_on_as_written_and_means_what_it_meant() {
    use crate::adapter::wire::anthropic::native::BETA_FIELDS;
    use crate::adapter::wire::anthropic::tests::written;
    use crate::adapter::{Call, WireFormat};
    let (body, headers) = claude_code();
    let canonical = |body: &Value| decoded(body.clone()).to_canonical(&headers, Some(4096)).unwrap();
    let mut req = canonical(&body);
    req.model = "claude-served".into();
    assert_eq!(req.tools.len(), body["tools"].as_array().unwrap().len());
    let client = req.native.clone().unwrap();
    let format = WireFormat::Claude(&crate::adapter::provider::anthropic::Anthropic);
    let call = Call::as_written(format, Default::default(), &req);
    let owned = ["model", "max_tokens", "stream"];
    for signer in [Some("anthropic"), None] {
        let sent = written(&req, &call, &client, signer);
        assert_eq!((&sent["model"], &sent["max_tokens"]), (&json!("claude-served"), &json!(4096)));
        for (key, value) in body.as_object().unwrap() {
            let dropped = signer.is_none() && BETA_FIELDS.contains(&key.as_str());
            let turned = signer.is_none() && key == "messages";
            if !owned.contains(&key.as_str()) && !dropped && !turned {
                assert_eq!(sent.get(key), Some(value), "{key} as Claude Code wrote it ({signer:?})");
            }
        }
        for key in sent.as_object().unwrap().keys() {
            assert!(body.get(key).is_some(), "{key} is Claude Code's ({signer:?})");
        }
        match signer {
            // Anthropic's body, read by the door again, is the same request.
            Some(_) => {
                let again = ChatRequest { model: req.model.clone(), native: None, ..canonical(&sent) };
                assert_eq!(again, ChatRequest { native: None, ..req.clone() });
            }
            // A node takes the system message inside the conversation as a user turn there.
            None => {
                let roles = |b: &Value| -> Vec<Value> {
                    b["messages"].as_array().unwrap().iter().map(|m| m["role"].clone()).collect()
                };
                assert!(roles(&body).contains(&json!("system")));
                assert!(!roles(&sent).contains(&json!("system")));
                assert_eq!(roles(&sent).len(), roles(&body).len());
            }
        }
    }
}

mod written_forms {
    //! One Messages body in three written forms (compact, pretty, every non-ASCII character
    //! escaped) is one request: the door reads the same canonical request from each, and each
    //! kind of host is sent the same body, whatever the client's bytes looked like.

    use proptest::prelude::*;

    use super::*;
    use crate::adapter::wire::anthropic::tests::written;
    use crate::adapter::{Call, WireFormat};

    fn text() -> impl Strategy<Value = String> {
        "[a-z \\\\\"\n\t/é☃😀]{0,8}"
    }

    fn block(role: &'static str) -> BoxedStrategy<Value> {
        let signature = prop_oneof![
            Just(None),
            Just(Some("")),
            Just(Some("direct")),
            Just(Some("spillway:anthropic:S1")),
            Just(Some("spillway:bedrock:S2")),
        ];
        let text_block = (text(), any::<bool>()).prop_map(|(text, mark)| match mark {
            true => json!({"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}),
            false => json!({"type": "text", "text": text}),
        });
        match role {
            "assistant" => prop_oneof![
                text_block,
                (text(), signature).prop_map(|(thinking, signature)| match signature {
                    Some(s) => json!({"type": "thinking", "thinking": thinking, "signature": s}),
                    None => json!({"type": "thinking", "thinking": thinking}),
                }),
                Just(json!({"type": "redacted_thinking", "data": "spillway:anthropic:R"})),
                text().prop_map(
                    |t| json!({"type": "tool_use", "id": "t1", "name": "read", "input": {"path": t}})
                ),
            ]
            .boxed(),
            _ => text_block.boxed(),
        }
    }

    fn message() -> impl Strategy<Value = Value> {
        prop_oneof![Just("user"), Just("assistant"), Just("system")].prop_flat_map(|role| {
            let content = prop_oneof![
                text().prop_map(Value::String),
                proptest::collection::vec(block(role), 1..4).prop_map(Value::Array),
            ];
            content.prop_map(move |content| json!({"role": role, "content": content}))
        })
    }

    fn body() -> impl Strategy<Value = Value> {
        let system = prop_oneof![
            Just(None),
            text().prop_map(|t| Some(json!(t))),
            text().prop_map(|t| Some(
                json!([{"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}])
            )),
        ];
        let tools = proptest::collection::vec(text(), 0..3);
        (system, proptest::collection::vec(message(), 1..5), tools, any::<bool>()).prop_map(
            |(system, messages, tools, thinking)| {
                let tools: Vec<Value> = tools
                    .iter()
                    .enumerate()
                    .map(|(i, d)| json!({"name": format!("t{i}"), "description": d,
                        "input_schema": {"type": "object", "properties": {"p": {"type": "string", "description": d}}}}))
                    .collect();
                let mut body = json!({"model": "m", "max_tokens": 2000, "messages": messages, "tools": tools,
                    "metadata": {"user_id": "u é"}, "x-unknown": [1.5, {"a": null}]});
                if let Some(system) = system {
                    body["system"] = system;
                }
                if thinking {
                    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
                }
                body
            },
        )
    }

    /// `text` with every character outside ASCII written as `\uXXXX` (JSON's escape).
    fn ascii(text: &str) -> String {
        let mut out = String::new();
        for c in text.chars() {
            match c.is_ascii() {
                true => out.push(c),
                false => {
                    c.encode_utf16(&mut [0; 2]).iter().for_each(|u| out.push_str(&format!("\\u{u:04x}")))
                }
            }
        }
        out
    }

    /// What the door and each kind of host make of `text`: the canonical request (a tool
    /// call's arguments read as JSON) and the body each host is sent.
    fn read(text: &str) -> Option<(ChatRequest, Vec<Value>)> {
        let decoded = decode(&bytes::Bytes::from(text.to_string()), Asked::Answer).ok()?;
        let mut req = decoded.to_canonical(&HeaderMap::new(), Some(1000)).ok()?;
        req.model = "served".into();
        let format = WireFormat::Claude(&crate::adapter::provider::anthropic::Anthropic);
        let call = Call::as_written(format, Default::default(), &req);
        let client = req.native.clone()?;
        let sent =
            [Some("anthropic"), Some("bedrock"), None].map(|signer| written(&req, &call, &client, signer));
        for m in req.messages_mut() {
            for call in &mut m.tool_calls {
                call.arguments = serde_json::from_str::<Value>(&call.arguments).unwrap().to_string();
            }
        }
        Some((ChatRequest { native: None, ..req }, sent.to_vec()))
    }

    proptest! {
        #[test]
        fn every_written_form_of_a_body_is_one_request(body in body()) {
            let compact = serde_json::to_string(&body).unwrap();
            let read_compact = read(&compact);
            prop_assert!(read_compact.is_some(), "the door takes {}", compact);
            for other in [serde_json::to_string_pretty(&body).unwrap(), ascii(&compact)] {
                prop_assert_eq!(&read(&other), &read_compact, "{}", other);
            }
            // Anthropic's body holds the client's members as it wrote them, but for those the
            // door owns and the blocks a host cannot read.
            let (_, sent) = read_compact.unwrap();
            for key in ["metadata", "x-unknown", "tools", "system"] {
                prop_assert_eq!(sent[0].get(key), body.get(key), "{}", key);
            }
        }
    }
}
