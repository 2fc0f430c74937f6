//! Tests of the gemini adapter against the recorded fixtures in tests/fixtures/.
use super::request::ToolConfig;
use super::*;
use crate::adapter::transport::http::testing::run_sse;
use crate::adapter::transport::http::StreamParser;
use crate::adapter::{Call, WireFormat};
use crate::canonical::{ErrorClass, Event, FinishReason, Image, ResponseFormat, Role, Usage};
use crate::canonical::{Message, ToolChoice};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::time::Duration;

/// The body of a call made as the request is written.
fn request_body(req: &ChatRequest) -> Value {
    let call = Call::as_written(WireFormat::Gemini, Default::default(), req);
    super::request_body(req, &call)
}

fn text(s: &str) -> Event {
    Event::TextDelta(s.to_string())
}

/// The request body itself is the case tests/fixtures/gemini/cases/every_field.json.
#[test]
fn the_url_names_the_model_and_its_route() {
    assert_eq!(
        url("https://generativelanguage.googleapis.com/v1beta", "models/gemini-2.5-flash", true),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(url("http://h/v1beta/", "g", false), "http://h/v1beta/models/g:generateContent");
}

#[test]
fn every_tool_choice_and_schema_is_mapped_as_it_is() {
    let mode = |choice: ToolChoice| {
        serde_json::to_value(ToolConfig::of(&choice)).unwrap()["functionCallingConfig"].clone()
    };
    assert_eq!(mode(ToolChoice::None), json!({"mode": "NONE"}));
    assert_eq!(mode(ToolChoice::Auto), json!({"mode": "AUTO"}));
    assert_eq!(mode(ToolChoice::Required), json!({"mode": "ANY"}));
    assert_eq!(mode(ToolChoice::Function("f".into())), json!({"mode": "ANY", "allowedFunctionNames": ["f"]}));
    // Straight from the client's JSON: what decodes reaches Gemini unchanged in meaning.
    let body = json!({"model": "t", "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "g", "description": "no arguments"}},
        ],
        "tool_choice": "none"});
    let req = crate::api::wire::decode(body.to_string().as_bytes()).unwrap().to_canonical(None).unwrap();
    let out = request_body(&req);
    assert_eq!(
        out["tools"],
        json!([{"functionDeclarations": [
            {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}},
            {"name": "g", "description": "no arguments"},
        ]}])
    );
    assert_eq!(out["toolConfig"], json!({"functionCallingConfig": {"mode": "NONE"}}));
}

#[test]
fn parses_non_stream_responses() {
    let body: Value =
        serde_json::from_str(include_str!("../../../../tests/fixtures/gemini/generate_content.json"))
            .unwrap();
    assert_eq!(
        parse_response(body.to_string().as_bytes()).unwrap(),
        vec![
            text("AI learns patterns from data to make predictions or decisions."),
            Event::Usage(Usage {
                input_tokens: 4120,
                cached_input_tokens: 4096,
                output_tokens: 62,
                cache_write_tokens: 0
            }),
            Event::Finish(FinishReason::Stop),
        ]
    );
    let body: Value = serde_json::from_str(include_str!(
        "../../../../tests/fixtures/gemini/generate_content_function_call.json"
    ))
    .unwrap();
    let mut parser = GeminiStream::with_id_prefix("t");
    let mut events = parser.on_event("", &body.to_string()).unwrap();
    events.extend(parser.on_end().unwrap());
    assert_eq!(
        events,
        vec![
            Event::ToolCallDelta {
                index: 0,
                id: Some("t_0".into()),
                name: Some("schedule_meeting".into()),
                arguments: r#"{"attendees":["Bob","Alice"],"date":"2025-03-27","time":"10:00","topic":"Q3 planning"}"#.into(),
            },
            Event::Usage(Usage { input_tokens: 111, cached_input_tokens: 0, output_tokens: 37, cache_write_tokens: 0 }),
            Event::Finish(FinishReason::ToolCalls),
        ]
    );
    // Synthesised ids differ between answers.
    let a = parse_response(body.to_string().as_bytes()).unwrap();
    let b = parse_response(body.to_string().as_bytes()).unwrap();
    assert_ne!(a[0], b[0]);
}

#[test]
fn blocked_prompt_is_a_content_policy_error() {
    let body: Value =
        serde_json::from_str(include_str!("../../../../tests/fixtures/gemini/prompt_blocked.json")).unwrap();
    let err = parse_response(body.to_string().as_bytes()).unwrap_err();
    assert_eq!(err.class, ErrorClass::ContentPolicy);
    assert!(err.message.contains("SAFETY"));
}

#[tokio::test]
async fn parses_crlf_text_stream_in_any_chunking() {
    let events =
        run_sse(include_str!("../../../../tests/fixtures/gemini/stream_generate_content.sse"), || {
            GeminiStream::with_id_prefix("t")
        })
        .await;
    assert_eq!(
        events,
        vec![
            Ok(text("The")),
            Ok(text(" sky appears blue because of Rayleigh scattering — été.")),
            Ok(text("\n")),
            Ok(Event::Usage(Usage {
                input_tokens: 9,
                cached_input_tokens: 0,
                output_tokens: 24,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::Stop)),
        ]
    );
}

#[tokio::test]
async fn parses_function_call_stream() {
    let events = run_sse(include_str!("../../../../tests/fixtures/gemini/stream_function_call.sse"), || {
        GeminiStream::with_id_prefix("t")
    })
    .await;
    let call = |index, id: &str, location: &str| {
        Ok(Event::ToolCallDelta {
            index,
            id: Some(id.into()),
            name: Some("get_weather".into()),
            arguments: format!(r#"{{"location":"{location}"}}"#),
        })
    };
    assert_eq!(
        events,
        vec![
            Ok(text("Let me check both cities.")),
            call(0, "t_0", "Paris"),
            call(1, "t_1", "London"),
            Ok(Event::Usage(Usage {
                input_tokens: 60,
                cached_input_tokens: 0,
                output_tokens: 20,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ]
    );
}

#[tokio::test]
async fn truncated_stream_ends_with_stream_broken() {
    let events = run_sse(include_str!("../../../../tests/fixtures/gemini/stream_truncated.sse"), || {
        GeminiStream::with_id_prefix("t")
    })
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("The")));
    assert_eq!(events[1].as_ref().unwrap_err().class, ErrorClass::StreamBroken);
}

#[tokio::test]
async fn error_inside_stream_is_classified_and_last() {
    let events = run_sse(include_str!("../../../../tests/fixtures/gemini/stream_error.sse"), || {
        GeminiStream::with_id_prefix("t")
    })
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("Once upon")));
    assert_eq!(events[1].as_ref().unwrap_err().class, ErrorClass::Overloaded);
}

#[test]
fn classifies_error_bodies() {
    let none = HeaderMap::new();
    let e = classify(
        429,
        &none,
        include_str!("../../../../tests/fixtures/gemini/error_429_resource_exhausted.json"),
    );
    assert_eq!(e.class, ErrorClass::RateLimited);
    assert_eq!(e.retry_after, Some(Duration::from_secs(17)));
    assert!(e.message.starts_with("You exceeded your current quota"));

    let mut h = HeaderMap::new();
    h.insert("retry-after", "3".parse().unwrap());
    let e = classify(
        429,
        &h,
        include_str!("../../../../tests/fixtures/gemini/error_429_resource_exhausted.json"),
    );
    assert_eq!(e.retry_after, Some(Duration::from_secs(3)));

    let cases = [
        (
            503,
            include_str!("../../../../tests/fixtures/gemini/error_503_unavailable.json"),
            ErrorClass::Overloaded,
        ),
        (
            400,
            include_str!("../../../../tests/fixtures/gemini/error_400_token_limit.json"),
            ErrorClass::ContextLength,
        ),
        (
            400,
            include_str!("../../../../tests/fixtures/gemini/error_400_invalid_argument.json"),
            ErrorClass::InvalidRequest,
        ),
        (
            403,
            include_str!("../../../../tests/fixtures/gemini/error_403_permission_denied.json"),
            ErrorClass::Auth,
        ),
        (
            500,
            r#"{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}"#,
            ErrorClass::ServerError,
        ),
        (
            504,
            r#"{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}"#,
            ErrorClass::Timeout,
        ),
        (
            401,
            r#"[{"error":{"code":401,"message":"API key not valid.","status":"UNAUTHENTICATED"}}]"#,
            ErrorClass::Auth,
        ),
        (502, "Bad Gateway", ErrorClass::ServerError),
    ];
    for (status, body, class) in cases {
        let e = classify(status, &none, body);
        assert_eq!((e.class, e.status), (class, Some(status)), "{body}");
    }
}

#[test]
fn structured_output_and_images_follow_generate_content() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                        "additionalProperties": false});
    let mut user = Message::new(Role::User, "Count the cats.");
    user.images.push(Image { url: "https://example.com/cats.webp".into(), detail: None });
    user.images.push(Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None });
    let req = ChatRequest {
        model: "gemini-2.5-flash".into(),
        messages: vec![user].into(),
        max_tokens: Some(50),
        response_format: ResponseFormat::JsonSchema {
            name: "count".into(),
            schema: schema.clone(),
            strict: true,
        },
        ..Default::default()
    };
    let body = request_body(&req);
    // The schema goes as standard JSON Schema (responseJsonSchema), untouched.
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens": 50, "responseMimeType": "application/json", "responseJsonSchema": schema})
    );
    assert_eq!(
        body["contents"],
        json!([{"role": "user", "parts": [
            {"text": "Count the cats."},
            {"fileData": {"mimeType": "image/webp", "fileUri": "https://example.com/cats.webp"}},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        ]}])
    );
    let req = ChatRequest { response_format: ResponseFormat::JsonObject, max_tokens: None, ..req };
    assert_eq!(request_body(&req)["generationConfig"], json!({"responseMimeType": "application/json"}));
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
        ]
        .into(),
        ..Default::default()
    };
    let body = request_body(&req);
    assert_eq!(body["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "hello"}]},
            {"role": "user", "parts": [{"text": "<system>\nTools changed.\n</system>"}]},
        ])
    );
}
