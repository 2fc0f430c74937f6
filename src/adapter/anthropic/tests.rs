//! Tests of the anthropic adapter against the recorded fixtures in tests/fixtures/.
use std::time::Duration;

use futures::StreamExt;

use super::*;
use crate::adapter::http::testing::{canned_server, run_sse};
use crate::canonical::{Message, Tool, ToolCall, ToolChoice};

fn text(s: &str) -> Event {
    Event::TextDelta(s.to_string())
}

fn sample_request(stream: bool) -> ChatRequest {
    let mut assistant = Message::new(Role::Assistant, "Let me look.");
    assistant.tool_calls.push(ToolCall {
        id: "toolu_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"location":"Paris"}"#.into(),
    });
    assistant.tool_calls.push(ToolCall {
        id: "toolu_2".into(),
        name: "get_time".into(),
        arguments: "not json".into(),
    });
    let mut result1 = Message::new(Role::Tool, "21C");
    result1.tool_call_id = Some("toolu_1".into());
    let mut result2 = Message::new(Role::Tool, "14:00");
    result2.tool_call_id = Some("toolu_2".into());
    ChatRequest {
        model: "claude-sonnet-4-20250514".into(),
        messages: vec![
            Message::new(Role::System, "Be brief."),
            Message::new(Role::User, "Weather in Paris?"),
            Message::new(Role::User, "And the time?"),
            assistant,
            result1,
            result2,
            Message::new(Role::System, "Answer in French."),
        ],
        max_tokens: None,
        temperature: Some(1.4),
        top_p: None,
        stop: vec!["END".into()],
        tools: vec![Tool {
            name: "get_weather".into(),
            description: Some("Current weather".into()),
            parameters: json!({"type":"object","properties":{"location":{"type":"string"}}}),
        }],
        tool_choice: Some(ToolChoice::Function("get_weather".into())),
        seed: Some(1),
        stream,
        response_format: ResponseFormat::Text,
        relay: false,
        ..ChatRequest::default()
    }
}

#[test]
fn request_body_follows_messages_api() {
    assert_eq!(
        request_body(&sample_request(true)),
        json!({
            "model": "claude-sonnet-4-20250514",
            "max_tokens": 4096,
            "system": "Be brief.\n\nAnswer in French.",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather in Paris?"},
                    {"type": "text", "text": "And the time?"},
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"location": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21C"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "14:00"},
                ]},
            ],
            "temperature": 1.0,
            "stop_sequences": ["END"],
            "tools": [{"name": "get_weather", "description": "Current weather",
                       "input_schema": {"type":"object","properties":{"location":{"type":"string"}}}}],
            "tool_choice": {"type": "tool", "name": "get_weather"},
            "stream": true,
        })
    );
}

#[test]
fn every_tool_choice_and_schema_is_mapped_as_it_is() {
    assert_eq!(tool_choice(&ToolChoice::None), json!({"type": "none"}));
    assert_eq!(tool_choice(&ToolChoice::Auto), json!({"type": "auto"}));
    assert_eq!(tool_choice(&ToolChoice::Required), json!({"type": "any"}));
    assert_eq!(tool_choice(&ToolChoice::Function("f".into())), json!({"type": "tool", "name": "f"}));
    // Straight from the client's JSON: what decodes reaches Anthropic unchanged in meaning.
    let body = json!({"model": "t", "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "g"}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "g"}}});
    let req = crate::api::wire::decode(body.to_string().as_bytes()).unwrap().to_canonical(None).unwrap();
    let out = request_body(&req);
    assert_eq!(
        out["tools"],
        json!([
            {"name": "f", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}},
            {"name": "g", "input_schema": {"type": "object", "properties": {}}},
        ])
    );
    assert_eq!(out["tool_choice"], json!({"type": "tool", "name": "g"}));
    let mut none = req.clone();
    none.tool_choice = None;
    assert!(request_body(&none).get("tool_choice").is_none());
}

#[test]
fn parses_non_stream_responses() {
    let body: Value =
        serde_json::from_str(include_str!("../../../tests/fixtures/anthropic/message.json")).unwrap();
    assert_eq!(
        parse_response(&body).unwrap(),
        vec![
            text("Hi! My name is Claude."),
            Event::Usage(Usage {
                input_tokens: 3895,
                cached_input_tokens: 1800,
                output_tokens: 503,
                cache_write_tokens: 0
            }),
            Event::Finish(FinishReason::Stop),
        ]
    );
    let body: Value =
        serde_json::from_str(include_str!("../../../tests/fixtures/anthropic/message_tool_use.json"))
            .unwrap();
    assert_eq!(
        parse_response(&body).unwrap(),
        vec![
            text("I'll check the current weather in San Francisco for you."),
            Event::ToolCallDelta {
                index: 0,
                id: Some("toolu_01A09q90qw90lq917835lq9".into()),
                name: Some("get_weather".into()),
                arguments: r#"{"location":"San Francisco, CA","unit":"celsius"}"#.into(),
            },
            Event::Usage(Usage {
                input_tokens: 572,
                cached_input_tokens: 0,
                output_tokens: 91,
                cache_write_tokens: 100
            }),
            Event::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn parses_text_stream_in_any_chunking() {
    let events = run_sse(
        include_str!("../../../tests/fixtures/anthropic/message_stream.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(
        events,
        vec![
            Ok(text("Hello")),
            Ok(text("! Ça va?")),
            Ok(Event::Usage(Usage {
                input_tokens: 1035,
                cached_input_tokens: 1000,
                output_tokens: 15,
                cache_write_tokens: 10
            })),
            Ok(Event::Finish(FinishReason::Stop)),
        ]
    );
}

#[tokio::test]
async fn parses_tool_use_stream() {
    let events = run_sse(
        include_str!("../../../tests/fixtures/anthropic/message_stream_tool_use.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(
        events,
        vec![
            Ok(text("Okay, let's check the weather.")),
            Ok(Event::ToolCallDelta {
                index: 0,
                id: Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6".into()),
                name: Some("get_weather".into()),
                arguments: String::new(),
            }),
            Ok(Event::ToolCallDelta { index: 0, id: None, name: None, arguments: "{\"location\":".into() }),
            Ok(Event::ToolCallDelta {
                index: 0,
                id: None,
                name: None,
                arguments: " \"San Francisco, CA\"}".into(),
            }),
            Ok(Event::Usage(Usage {
                input_tokens: 472,
                cached_input_tokens: 0,
                output_tokens: 89,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ]
    );
}

#[tokio::test]
async fn truncated_stream_ends_with_stream_broken() {
    let events = run_sse(
        include_str!("../../../tests/fixtures/anthropic/message_stream_truncated.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("Hello")));
    assert_eq!(events[1].as_ref().unwrap_err().class, ErrorClass::StreamBroken);
}

#[tokio::test]
async fn overloaded_error_event_is_classified_and_last() {
    let events = run_sse(
        include_str!("../../../tests/fixtures/anthropic/message_stream_error.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("Once upon")));
    let err = events[1].as_ref().unwrap_err();
    assert_eq!(err.class, ErrorClass::Overloaded);
    assert_eq!(err.message, "Overloaded");
}

#[test]
fn classifies_error_bodies() {
    let mut h = HeaderMap::new();
    h.insert("retry-after", "30".parse().unwrap());
    let e = classify(429, &h, include_str!("../../../tests/fixtures/anthropic/error_429_rate_limit.json"));
    assert_eq!(e.class, ErrorClass::RateLimited);
    assert_eq!(e.retry_after, Some(Duration::from_secs(30)));
    assert!(e.message.starts_with("This request would exceed the rate limit"));

    let none = HeaderMap::new();
    let cases = [
        (
            529,
            include_str!("../../../tests/fixtures/anthropic/error_529_overloaded.json"),
            ErrorClass::Overloaded,
        ),
        (
            400,
            include_str!("../../../tests/fixtures/anthropic/error_400_prompt_too_long.json"),
            ErrorClass::ContextLength,
        ),
        (
            400,
            include_str!("../../../tests/fixtures/anthropic/error_400_invalid_request.json"),
            ErrorClass::InvalidRequest,
        ),
        (
            401,
            include_str!("../../../tests/fixtures/anthropic/error_401_authentication.json"),
            ErrorClass::Auth,
        ),
        (
            500,
            include_str!("../../../tests/fixtures/anthropic/error_500_api_error.json"),
            ErrorClass::ServerError,
        ),
        (502, "upstream connect error", ErrorClass::ServerError),
    ];
    for (status, body, class) in cases {
        let e = classify(status, &none, body);
        assert_eq!((e.class, e.status), (class, Some(status)), "{body}");
    }
    let e = classify(
        400,
        &none,
        include_str!("../../../tests/fixtures/anthropic/error_400_prompt_too_long.json"),
    );
    assert_eq!(e.message, "prompt is too long: 215064 tokens > 200000 maximum");
}

#[tokio::test]
async fn send_streams_over_http_with_anthropic_headers() {
    let (base, seen) = canned_server(
        200,
        &[("content-type", "text/event-stream")],
        include_str!("../../../tests/fixtures/anthropic/message_stream.sse"),
    )
    .await;
    let upstream = Upstream {
        base_url: base,
        api_key: Some("sk-ant-test".into()),
        serves_messages: false,
        serves_responses: false,
    };
    let stream = send(&reqwest::Client::new().into(), &upstream, &sample_request(true)).await.unwrap();
    let events: Vec<_> = stream.collect().await;
    assert_eq!(events.last(), Some(&Ok(Event::Finish(FinishReason::Stop))));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.uri, "/v1/messages");
    assert_eq!(seen.headers["x-api-key"], "sk-ant-test");
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.headers["content-type"], "application/json");
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["max_tokens"], json!(4096));
}

#[tokio::test]
async fn send_classifies_529() {
    let (base, _) = canned_server(
        529,
        &[("content-type", "application/json")],
        include_str!("../../../tests/fixtures/anthropic/error_529_overloaded.json"),
    )
    .await;
    let upstream =
        Upstream { base_url: base, api_key: None, serves_messages: false, serves_responses: false };
    let err = send(&reqwest::Client::new().into(), &upstream, &sample_request(false)).await.err().unwrap();
    assert_eq!((err.class, err.status), (ErrorClass::Overloaded, Some(529)));
}

#[tokio::test]
async fn send_reports_cut_stream_as_broken() {
    let (base, _) = canned_server(
        200,
        &[("content-type", "text/event-stream")],
        include_str!("../../../tests/fixtures/anthropic/message_stream_truncated.sse"),
    )
    .await;
    let upstream =
        Upstream { base_url: base, api_key: None, serves_messages: false, serves_responses: false };
    let stream = send(&reqwest::Client::new().into(), &upstream, &sample_request(true)).await.unwrap();
    let events: Vec<_> = stream.collect().await;
    assert_eq!(events.last().unwrap().as_ref().unwrap_err().class, ErrorClass::StreamBroken);
}

#[tokio::test]
async fn send_non_stream_over_http() {
    let (base, _) = canned_server(
        200,
        &[("content-type", "application/json")],
        include_str!("../../../tests/fixtures/anthropic/message_tool_use.json"),
    )
    .await;
    let upstream =
        Upstream { base_url: base, api_key: None, serves_messages: false, serves_responses: false };
    let stream = send(&reqwest::Client::new().into(), &upstream, &sample_request(false)).await.unwrap();
    let events: Vec<_> = stream.collect().await;
    assert_eq!(events.len(), 4);
    assert_eq!(events.last(), Some(&Ok(Event::Finish(FinishReason::ToolCalls))));
}

#[test]
fn structured_output_and_images_follow_the_messages_api() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                        "additionalProperties": false});
    let mut user = Message::new(Role::User, "Count the cats.");
    user.images.push(Image { url: "https://example.com/cats.jpg".into(), detail: Some("low".into()) });
    user.images.push(Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None });
    let req = ChatRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![Message::new(Role::System, "Be exact."), user],
        response_format: ResponseFormat::JsonSchema {
            name: "count".into(),
            schema: schema.clone(),
            strict: true,
        },
        ..Default::default()
    };
    let body = request_body(&req);
    assert_eq!(body["output_config"], json!({"format": {"type": "json_schema", "schema": schema}}));
    assert_eq!(body["system"], json!("Be exact."));
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Count the cats."},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cats.jpg"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        ]}])
    );
    // No schema-less JSON mode: the system prompt asks for one object, dispatch checks it.
    let req = ChatRequest { response_format: ResponseFormat::JsonObject, ..req };
    let body = request_body(&req);
    assert!(body.get("output_config").is_none());
    assert_eq!(body["system"], json!(format!("Be exact.\n\n{JSON_OBJECT_INSTRUCTION}")));
    let plain =
        request_body(&ChatRequest { messages: vec![Message::new(Role::User, "hi")], ..Default::default() });
    assert!(plain.get("output_config").is_none() && plain.get("system").is_none());
}

#[tokio::test]
async fn parallel_tool_use_blocks_stream_their_inputs_by_block_index() {
    let sse = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Checking.\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_a\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Pa\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ris\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_b\",\"name\":\"get_time\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"tz\\\": \\\"CET\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":40}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let events = run_sse(sse, AnthropicStream::default).await;
    let start = |index, id: &str, name: &str| {
        Ok(Event::ToolCallDelta {
            index,
            id: Some(id.into()),
            name: Some(name.into()),
            arguments: String::new(),
        })
    };
    let piece = |index, arguments: &str| {
        Ok(Event::ToolCallDelta { index, id: None, name: None, arguments: arguments.into() })
    };
    assert_eq!(
        events,
        vec![
            Ok(text("Checking.")),
            start(0, "toolu_a", "get_weather"),
            piece(0, "{\"city\": \"Pa"),
            piece(0, "ris\"}"),
            start(1, "toolu_b", "get_time"),
            piece(1, "{\"tz\": \"CET\"}"),
            Ok(Event::Usage(Usage {
                input_tokens: 50,
                cached_input_tokens: 0,
                output_tokens: 40,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ]
    );
}

/// A Messages request as a client wrote it, with the client's beta header.
fn messages_client(stream: bool) -> ChatRequest {
    let body = json!({"model": "coder", "max_tokens": 50, "context_management": {"edits": []},
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]});
    let Value::Object(body) = body else { unreachable!() };
    ChatRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![Message::new(Role::User, "hi")],
        max_tokens: Some(40),
        stream,
        relay: true,
        native: Some(crate::canonical::NativeRequest {
            dialect: crate::canonical::Dialect::AnthropicMessages,
            body: std::sync::Arc::new(body),
            headers: vec![
                ("anthropic-version", "2023-06-01".into()),
                ("anthropic-beta", "context-management-2025-06-27".into()),
            ],
        }),
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn a_messages_client_passes_through_to_anthropic_with_its_beta_header_and_relays_events() {
    let (base, seen) = canned_server(
        200,
        &[("content-type", "text/event-stream")],
        include_str!("../../../tests/fixtures/anthropic/message_stream.sse"),
    )
    .await;
    let upstream = Upstream {
        base_url: base,
        api_key: Some("sk-ant-test".into()),
        serves_messages: false,
        serves_responses: false,
    };
    let events: Vec<_> = send(&reqwest::Client::new().into(), &upstream, &messages_client(true))
        .await
        .unwrap()
        .collect()
        .await;
    let natives = events.iter().filter(|e| matches!(e, Ok(Event::Native(_)))).count();
    assert!(natives >= 5, "every upstream event is relayed: {events:?}");
    assert!(matches!(events[0], Ok(Event::Native(ref n)) if &*n.name == "message_start"));
    assert!(events.iter().any(|e| matches!(e, Ok(Event::TextDelta(_)))), "and read: {events:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.headers["anthropic-beta"], "context-management-2025-06-27");
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!((body["model"].clone(), body["max_tokens"].clone()), (json!("claude-sonnet-4-5"), json!(40)));
    assert_eq!(body["messages"][0]["content"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(body["context_management"], json!({"edits": []}));
}

#[tokio::test]
async fn a_node_serving_messages_gets_them_without_beta_fields() {
    let (base, seen) = canned_server(
        200,
        &[("content-type", "text/event-stream")],
        include_str!("../../../tests/fixtures/anthropic/message_stream.sse"),
    )
    .await;
    let upstream = Upstream {
        base_url: format!("{base}/v1"),
        api_key: Some("node-key".into()),
        serves_messages: true,
        serves_responses: false,
    };
    let req = messages_client(true);
    let events: Vec<_> = crate::adapter::send(
        crate::adapter::WireFormat::OpenAi,
        &reqwest::Client::new().into(),
        &upstream,
        &req,
    )
    .await
    .unwrap()
    .collect()
    .await;
    assert!(events.iter().any(|e| matches!(e, Ok(Event::Native(_)))));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.uri, "/v1/messages");
    assert_eq!(seen.headers["authorization"], "Bearer node-key");
    assert!(seen.headers.get("anthropic-beta").is_none());
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert!(body.get("context_management").is_none(), "{body}");
    assert_eq!(body["messages"][0]["content"][0]["cache_control"]["type"], "ephemeral");
}

#[tokio::test]
async fn breakpoints_are_placed_for_anthropic_only_and_never_over_a_clients_own() {
    let sent = |req: ChatRequest, serves_messages: bool| async move {
        let (base, seen) = canned_server(
            200,
            &[("content-type", "text/event-stream")],
            include_str!("../../../tests/fixtures/anthropic/message_stream.sse"),
        )
        .await;
        let base = if serves_messages { format!("{base}/v1") } else { base };
        let upstream = Upstream { base_url: base, api_key: None, serves_messages, serves_responses: false };
        let format = if serves_messages {
            crate::adapter::WireFormat::OpenAi
        } else {
            crate::adapter::WireFormat::Anthropic
        };
        let transport = reqwest::Client::new().into();
        let _: Vec<_> =
            crate::adapter::send(format, &transport, &upstream, &req).await.unwrap().collect().await;
        let body = seen.lock().unwrap().body.clone();
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let placement = Some(crate::canonical::CachePlacement::default());
    let mut canonical = sample_request(true);
    canonical.tools =
        vec![Tool { name: "get_weather".into(), description: None, parameters: json!({"type": "object"}) }];
    canonical.cache_placement = placement;
    let body = sent(canonical.clone(), false).await;
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(body["tools"][0]["cache_control"], ephemeral);
    assert_eq!(body["system"][0]["cache_control"], ephemeral);
    assert_eq!(body["system"][0]["text"], "Be brief.\n\nAnswer in French.");
    // The tool results are the last user turn, the two questions the one before.
    assert_eq!(body["messages"][2]["content"][1]["cache_control"], ephemeral);
    assert_eq!(body["messages"][0]["content"][1]["cache_control"], ephemeral);
    assert!(body["messages"][0]["content"][0].get("cache_control").is_none(), "{body}");
    canonical.cache_placement = None;
    assert!(!sent(canonical, false).await.to_string().contains("cache_control"), "none asked for");

    // A Messages client that marked its request itself gets it as written.
    let mut client = messages_client(true);
    client.cache_placement = placement;
    let body = sent(client.clone(), false).await;
    assert_eq!(body["messages"], client.native.as_ref().unwrap().body["messages"]);
    // A node caches by itself: no marks of ours for it.
    let mut unmarked = client.clone();
    let native = unmarked.native.as_mut().unwrap();
    std::sync::Arc::make_mut(&mut native.body)["messages"] = json!([{"role": "user", "content": "hi"}]);
    let node = sent(unmarked.clone(), true).await;
    assert_eq!(node["messages"], json!([{"role": "user", "content": "hi"}]));
    let anthropic = sent(unmarked, false).await;
    assert_eq!(anthropic["messages"][0]["content"][0]["cache_control"], ephemeral);
}

#[tokio::test]
async fn cache_writes_and_reads_are_read_from_the_final_message_delta() {
    let sse = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":4096,\"output_tokens\":7}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let events = run_sse(sse, AnthropicStream::default).await;
    let usage =
        Usage { input_tokens: 6156, cached_input_tokens: 4096, output_tokens: 7, cache_write_tokens: 2048 };
    assert_eq!(events, vec![Ok(text("ok")), Ok(Event::Usage(usage)), Ok(Event::Finish(FinishReason::Stop))]);
    assert_eq!(usage.uncached_input_tokens(), 12);
}
