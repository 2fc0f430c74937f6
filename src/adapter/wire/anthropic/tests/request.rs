//! Parts of the Messages request the adapter writes, as units: tool choices and schemas,
//! structured output and images, a later system message. Whole bodies over `send` (a client's
//! own body and beta header, the cache breakpoints) are the cases of tests/fixtures/anthropic/cases/.
use super::*;

#[test]
fn every_tool_choice_and_schema_is_mapped_as_it_is() {
    let tool_choice =
        |choice| serde_json::to_value(super::super::body::translated::tool_choice(&choice)).unwrap();
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
        messages: vec![Message::new(Role::System, "Be exact."), user].into(),
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
    let plain = request_body(&ChatRequest {
        messages: vec![Message::new(Role::User, "hi")].into(),
        ..Default::default()
    });
    assert!(plain.get("output_config").is_none() && plain.get("system").is_none());
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
        ]
        .into(),
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
