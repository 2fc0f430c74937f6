//! The Messages request the adapter writes: roles, tools, schemas, images, a Messages client's
//! own body and beta header, and the cache breakpoints it places.
use super::*;

#[test]
fn request_body_follows_messages_api() {
    assert_eq!(
        request_body(&sample_request(true)),
        json!({
            "model": "claude-sonnet-4-20250514",
            "max_tokens": 4096,
            // A system message after the conversation started keeps its place, as a user turn.
            "system": "Be brief.",
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
                    {"type": "text", "text": "<system>\nAnswer in French.\n</system>"},
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
    let tool_choice = |choice| serde_json::to_value(super::super::request::tool_choice(&choice)).unwrap();
    assert_eq!(tool_choice(ToolChoice::None), json!({"type": "none"}));
    assert_eq!(tool_choice(ToolChoice::Auto), json!({"type": "auto"}));
    assert_eq!(tool_choice(ToolChoice::Required), json!({"type": "any"}));
    assert_eq!(tool_choice(ToolChoice::Function("f".into())), json!({"type": "tool", "name": "f"}));
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
        include_str!("../../../../../tests/fixtures/anthropic/message_stream.sse"),
    )
    .await;
    let upstream = Upstream {
        base_url: base,
        api_key: Some("sk-ant-test".into()),
        serves_messages: false,
        serves_responses: false,
        ..Default::default()
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
        include_str!("../../../../../tests/fixtures/anthropic/message_stream.sse"),
    )
    .await;
    let upstream = Upstream {
        base_url: format!("{base}/v1"),
        api_key: Some("node-key".into()),
        serves_messages: true,
        serves_responses: false,
        ..Default::default()
    };
    let req = messages_client(true);
    let call = crate::adapter::Call::as_written(crate::adapter::WireFormat::OpenAi, upstream, &req);
    let events: Vec<_> =
        crate::adapter::send(&reqwest::Client::new().into(), &call, &req).await.unwrap().collect().await;
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
    let sent = |req: ChatRequest, cache_placement, serves_messages: bool| async move {
        let (base, seen) = canned_server(
            200,
            &[("content-type", "text/event-stream")],
            include_str!("../../../../../tests/fixtures/anthropic/message_stream.sse"),
        )
        .await;
        let base = if serves_messages { format!("{base}/v1") } else { base };
        let upstream = Upstream {
            base_url: base,
            api_key: None,
            serves_messages,
            serves_responses: false,
            ..Default::default()
        };
        let format = if serves_messages {
            crate::adapter::WireFormat::OpenAi
        } else {
            crate::adapter::WireFormat::Claude(&crate::adapter::provider::anthropic::Anthropic)
        };
        let transport = reqwest::Client::new().into();
        let call = crate::adapter::Call {
            cache_placement,
            ..crate::adapter::Call::as_written(format, upstream, &req)
        };
        let _: Vec<_> = crate::adapter::send(&transport, &call, &req).await.unwrap().collect().await;
        let body = seen.lock().unwrap().body.clone();
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let placement = Some(crate::canonical::CachePlacement::default());
    let mut canonical = sample_request(true);
    canonical.tools =
        vec![Tool { name: "get_weather".into(), description: None, parameters: json!({"type": "object"}) }];
    let body = sent(canonical.clone(), placement, false).await;
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(body["tools"][0]["cache_control"], ephemeral);
    assert_eq!(body["system"][0]["cache_control"], ephemeral);
    assert_eq!(body["system"][0]["text"], "Be brief.");
    // The tool results (and the later system text) are the last user turn, the two questions
    // the one before.
    assert_eq!(body["messages"][2]["content"][2]["cache_control"], ephemeral);
    assert_eq!(body["messages"][0]["content"][1]["cache_control"], ephemeral);
    assert!(body["messages"][0]["content"][0].get("cache_control").is_none(), "{body}");
    assert!(!sent(canonical, None, false).await.to_string().contains("cache_control"), "none asked for");

    // A Messages client that marked its request itself gets it as written.
    let client = messages_client(true);
    let body = sent(client.clone(), placement, false).await;
    assert_eq!(body["messages"], client.native.as_ref().unwrap().body["messages"]);
    // A node caches by itself: no marks of ours for it.
    let mut unmarked = client.clone();
    let native = unmarked.native.as_mut().unwrap();
    std::sync::Arc::make_mut(&mut native.body)["messages"] = json!([{"role": "user", "content": "hi"}]);
    let node = sent(unmarked.clone(), placement, true).await;
    assert_eq!(node["messages"], json!([{"role": "user", "content": "hi"}]));
    let anthropic = sent(unmarked, placement, false).await;
    assert_eq!(anthropic["messages"][0]["content"][0]["cache_control"], ephemeral);
}

#[test]
fn a_later_system_message_becomes_a_user_turn_at_its_place() {
    let req = ChatRequest {
        model: "m".into(),
        messages: vec![
            Message::new(Role::System, "Be brief."),
            Message::new(Role::User, "hi"),
            Message::new(Role::Assistant, "hello"),
            Message::new(Role::System, "Tools changed."),
            Message::new(Role::User, "go on"),
        ],
        ..Default::default()
    };
    let body = request_body(&req);
    assert_eq!(body["system"], "Be brief.", "only the leading system prompt");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "<system>\nTools changed.\n</system>"},
                {"type": "text", "text": "go on"}]},
        ])
    );
}
