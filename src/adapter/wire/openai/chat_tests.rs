//! Tests of the openai_compat adapter against the recorded fixtures in tests/fixtures/.
use std::time::Duration;

use super::*;
use crate::adapter::transport::http::StreamParser;
use crate::adapter::wire::openai::error::classify;
use crate::adapter::wire::openai::request::ToolChoiceOut;
use crate::adapter::wire::openai::stream::{parse_response, OpenAiStream};
use crate::canonical::{
    ErrorClass, Event, FinishReason, Message, RelayChunk, Relaying, Role, ToolChoice, Usage,
};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

/// A tool choice as OpenAI's body writes it.
fn tool_choice(choice: &ToolChoice) -> Value {
    serde_json::to_value(ToolChoiceOut::of(choice)).unwrap()
}
use crate::adapter::transport::http::testing::run_sse;
use crate::adapter::{Call, Upstream, WireFormat};
use crate::canonical::{Image, ResponseFormat, Tool, ToolCall};

/// `send` as the request is written (its own model and stream flag).
async fn send(
    transport: &crate::adapter::Transport,
    upstream: &Upstream,
    req: &ChatRequest,
) -> Result<crate::adapter::EventStream, UpstreamError> {
    let call = Call::as_written(WireFormat::OpenAi, upstream.clone(), req);
    super::send(transport, &call, req).await
}

/// The body of a call made as the request is written.
fn request_body(req: &ChatRequest) -> Value {
    let call = Call::as_written(WireFormat::OpenAi, Default::default(), req);
    super::request_body(req, &call)
}

fn text(s: &str) -> Event {
    Event::TextDelta(s.to_string())
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, value.parse().unwrap());
    }
    map
}

fn sample_request(stream: bool) -> ChatRequest {
    let mut assistant = Message::new(Role::Assistant, "");
    assistant.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"location":"Paris"}"#.into(),
    });
    let mut tool = Message::new(Role::Tool, r#"{"temp_c":21}"#);
    tool.tool_call_id = Some("call_1".into());
    ChatRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![
            Message::new(Role::System, "Be brief."),
            Message::new(Role::User, "Weather in Paris?"),
            assistant,
            tool,
        ]
        .into(),
        max_tokens: Some(256),
        temperature: Some(0.2),
        top_p: Some(0.9),
        stop: vec!["\n\n".into()],
        tools: vec![Tool {
            name: "get_weather".into(),
            description: Some("Current weather".into()),
            parameters: json!({"type":"object","properties":{"location":{"type":"string"}}}).into(),
        }],
        tool_choice: Some(ToolChoice::Auto),
        seed: Some(7),
        stream,
        response_format: ResponseFormat::Text,
        relay: false,
        ..ChatRequest::default()
    }
}

#[test]
fn only_openai_itself_gets_the_prompt_cache_key() {
    let req = ChatRequest {
        model: "m".into(),
        messages: vec![Message::new(Role::User, "hi")].into(),
        user: Some("u-1".into()),
        prompt_cache_key: Some("session-9".into()),
        ..Default::default()
    };
    let upstream = |serves_responses| Upstream {
        base_url: "http://x.test/v1".into(),
        api_key: None,
        serves_messages: false,
        serves_responses,
        ..Default::default()
    };
    let openai = super::request_body(&req, &Call::as_written(WireFormat::OpenAi, upstream(true), &req));
    assert_eq!(
        (openai["prompt_cache_key"].as_str(), openai["user"].as_str()),
        (Some("session-9"), Some("u-1"))
    );
    let node = super::request_body(&req, &Call::as_written(WireFormat::OpenAi, upstream(false), &req));
    assert!(node.get("prompt_cache_key").is_none(), "{node}");
    assert_eq!(node["user"], "u-1", "`user` goes to every OpenAI-format upstream, as before");
    let without = ChatRequest { prompt_cache_key: None, ..req };
    assert!(super::request_body(&without, &Call::as_written(WireFormat::OpenAi, upstream(true), &without))
        .get("prompt_cache_key")
        .is_none());
}

#[test]
fn every_tool_choice_is_sent_in_openai_words() {
    assert_eq!(tool_choice(&ToolChoice::None), json!("none"));
    assert_eq!(tool_choice(&ToolChoice::Auto), json!("auto"));
    assert_eq!(tool_choice(&ToolChoice::Required), json!("required"));
    assert_eq!(
        tool_choice(&ToolChoice::Function("get_weather".into())),
        json!({"type": "function", "function": {"name": "get_weather"}})
    );
}

#[test]
fn parses_non_stream_response() {
    let events =
        parse_response(include_bytes!("../../../../tests/fixtures/openai/chat_completion.json")).unwrap();
    assert_eq!(
        events,
        vec![
            text("Hello! How can I assist you today?"),
            Event::Usage(Usage {
                input_tokens: 19,
                cached_input_tokens: 0,
                output_tokens: 10,
                cache_write_tokens: 0
            }),
            Event::Finish(FinishReason::Stop),
        ]
    );
}

#[test]
fn parses_non_stream_tool_calls() {
    let events =
        parse_response(include_bytes!("../../../../tests/fixtures/openai/chat_completion_tool_calls.json"))
            .unwrap();
    assert_eq!(
        events,
        vec![
            Event::ToolCallDelta {
                index: 0,
                id: Some("call_abc123".into()),
                name: Some("get_current_weather".into()),
                arguments: "{\n\"location\": \"Boston, MA\"\n}".into(),
            },
            Event::Usage(Usage {
                input_tokens: 2082,
                cached_input_tokens: 1920,
                output_tokens: 17,
                cache_write_tokens: 0
            }),
            Event::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn parses_text_stream_in_any_chunking() {
    let events =
        run_sse(include_str!("../../../../tests/fixtures/openai/chat_stream.sse"), OpenAiStream::default)
            .await;
    assert_eq!(
        events,
        vec![
            Ok(text("Hello")),
            Ok(text(" — café")),
            Ok(text(" time!")),
            Ok(Event::Usage(Usage {
                input_tokens: 1200,
                cached_input_tokens: 1024,
                output_tokens: 5,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::Stop)),
        ]
    );
}

#[tokio::test]
async fn parses_tool_call_stream() {
    let events = run_sse(
        include_str!("../../../../tests/fixtures/openai/chat_stream_tool_calls.sse"),
        OpenAiStream::default,
    )
    .await;
    let delta = |index, id: Option<&str>, name: Option<&str>, arguments: &str| {
        Ok(Event::ToolCallDelta {
            index,
            id: id.map(str::to_string),
            name: name.map(str::to_string),
            arguments: arguments.to_string(),
        })
    };
    assert_eq!(
        events,
        vec![
            delta(0, Some("call_DdmO9pD3xa9XTPNJ32zg2hcA"), Some("get_weather"), ""),
            delta(0, None, None, "{\"lo"),
            delta(0, None, None, "cation\": \"Paris\"}"),
            delta(1, Some("call_q2nKxXyVXbZ7e4Rb1jT8hY5a"), Some("get_time"), ""),
            delta(1, None, None, "{\"tz\": \"Europe/Paris\"}"),
            Ok(Event::Usage(Usage {
                input_tokens: 85,
                cached_input_tokens: 0,
                output_tokens: 42,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ]
    );
}

#[tokio::test]
async fn truncated_stream_ends_with_stream_broken() {
    let events = run_sse(
        include_str!("../../../../tests/fixtures/openai/chat_stream_truncated.sse"),
        OpenAiStream::default,
    )
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("Hello")));
    assert_eq!(events[1].as_ref().unwrap_err().class, ErrorClass::StreamBroken);
}

#[tokio::test]
async fn error_inside_stream_is_classified_and_last() {
    let events = run_sse(
        include_str!("../../../../tests/fixtures/openai/chat_stream_error.sse"),
        OpenAiStream::default,
    )
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("The answer")));
    let err = events[1].as_ref().unwrap_err();
    assert_eq!(err.class, ErrorClass::ServerError);
    assert!(err.message.contains("server had an error"));
}

#[test]
fn classifies_error_bodies() {
    let h = headers(&[("retry-after", "2")]);
    let e = classify(429, &h, include_str!("../../../../tests/fixtures/openai/error_429_rate_limit.json"));
    assert_eq!(e.class, ErrorClass::RateLimited);
    assert_eq!(e.status, Some(429));
    assert_eq!(e.retry_after, Some(Duration::from_secs(2)));
    assert!(e.message.starts_with("Rate limit reached for gpt-4o"));

    let none = HeaderMap::new();
    let e = classify(
        429,
        &none,
        include_str!("../../../../tests/fixtures/openai/error_429_insufficient_quota.json"),
    );
    assert_eq!(e.class, ErrorClass::RateLimited);
    assert_eq!(e.retry_after, None);

    let e =
        classify(400, &none, include_str!("../../../../tests/fixtures/openai/error_400_context_length.json"));
    assert_eq!(e.class, ErrorClass::ContextLength);
    assert!(e.message.contains("maximum context length is 128000"));

    let e =
        classify(400, &none, include_str!("../../../../tests/fixtures/openai/error_400_content_filter.json"));
    assert_eq!(e.class, ErrorClass::ContentPolicy);

    let e = classify(503, &none, include_str!("../../../../tests/fixtures/openai/error_503_overloaded.json"));
    assert_eq!(e.class, ErrorClass::Overloaded);
    assert_eq!(e.message, "The engine is currently overloaded, please try again later");

    let e = classify(
        400,
        &none,
        include_str!("../../../../tests/fixtures/openai/vllm_error_400_context_length.json"),
    );
    assert_eq!(e.class, ErrorClass::ContextLength);

    let e = classify(502, &none, "<html>Bad Gateway</html>");
    assert_eq!(e.class, ErrorClass::ServerError);
    assert_eq!(e.message, "<html>Bad Gateway</html>");

    let e = classify(
        401,
        &none,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    );
    assert_eq!(e.class, ErrorClass::Auth);
}

#[test]
fn vllm_abort_is_not_a_complete_answer() {
    let mut parser = OpenAiStream::default();
    let err = parser
        .on_event("message", r#"{"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}"#)
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::StreamBroken);
}

#[tokio::test]
async fn send_maps_refused_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let upstream = Upstream {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        api_key: None,
        serves_messages: false,
        serves_responses: false,
        ..Default::default()
    };
    let err = send(&reqwest::Client::new().into(), &upstream, &sample_request(true)).await.err().unwrap();
    assert_eq!(err.class, ErrorClass::Connect);
}

#[test]
fn response_format_and_images_pass_through() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let mut user = Message::new(Role::User, "Count the cats.");
    user.images.push(Image { url: "https://example.com/cats.jpg".into(), detail: Some("high".into()) });
    user.images.push(Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None });
    let req = ChatRequest {
        model: "gpt-4o".into(),
        messages: vec![user].into(),
        response_format: ResponseFormat::JsonSchema {
            name: "count".into(),
            schema: schema.clone(),
            strict: true,
        },
        ..Default::default()
    };
    let body = request_body(&req);
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Count the cats."},
            {"type": "image_url", "image_url": {"url": "https://example.com/cats.jpg", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]})
    );
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "count", "schema": schema, "strict": true}})
    );
    let req = ChatRequest { response_format: ResponseFormat::JsonObject, ..req };
    assert_eq!(request_body(&req)["response_format"], json!({"type": "json_object"}));
}

#[tokio::test]
async fn tool_call_arguments_split_across_chunks_are_kept_in_order() {
    let sse = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,",
        "\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\",",
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"ci\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\":\\\"Zür\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ich\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let events = run_sse(sse, OpenAiStream::default).await;
    let piece = |arguments: &str| {
        Ok(Event::ToolCallDelta { index: 0, id: None, name: None, arguments: arguments.into() })
    };
    assert_eq!(
        events,
        vec![
            Ok(Event::ToolCallDelta {
                index: 0,
                id: Some("call_9".into()),
                name: Some("get_weather".into()),
                arguments: String::new()
            }),
            piece("{\"ci"),
            piece("ty\":\"Zür"),
            piece("ich\"}"),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ]
    );
}

#[tokio::test]
async fn escaped_text_nulls_and_unknown_fields_in_chunks_are_read_as_before() {
    let sse = concat!(
        "data: {\"id\":\"x\",\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\\"b\\n\\u00e9\"}}],\"usage\":null}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other choice\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":null,\"finish_reason\":\"length\"}]}\n\n",
        "data: {\"choices\":null,\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"prompt_tokens_details\":null}}\n\n",
        "data: [DONE]\n\n",
    );
    let events = run_sse(sse, OpenAiStream::default).await;
    assert_eq!(
        events,
        vec![
            Ok(text("a\"b\né")),
            Ok(Event::Usage(Usage {
                input_tokens: 3,
                cached_input_tokens: 0,
                output_tokens: 2,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::Length)),
        ]
    );
    let broken =
        run_sse("data: {\"choices\":[{\"delta\":{\"content\":7}}]}\n\n", OpenAiStream::default).await;
    assert!(matches!(broken.as_slice(), [Err(e)] if e.class == ErrorClass::StreamBroken), "{broken:?}");
}

#[tokio::test]
async fn a_relaying_parser_hands_on_every_chunk_and_reads_the_same_events() {
    let sse = include_str!("../../../../tests/fixtures/openai/chat_stream.sse");
    let plain = run_sse(sse, OpenAiStream::default).await;
    let relaying = run_sse(sse, || OpenAiStream::new(Relaying::WithEvents)).await;
    let (relays, canonical): (Vec<_>, Vec<_>) =
        relaying.iter().cloned().partition(|e| matches!(e, Ok(Event::Relay(_))));
    assert_eq!(canonical, plain, "relaying changes nothing of what the ledger and dispatch read");
    assert_eq!(relays.len(), sse.matches("chat.completion.chunk").count(), "one relay per chunk");
    let Some(Ok(Event::Relay(last))) = relays.last() else { unreachable!() };
    assert!(last.no_choices);
    assert!(std::str::from_utf8(last.usage.as_ref().unwrap()).unwrap().contains("\"cached_tokens\":1024"));
    for relay in &relays {
        let Ok(Event::Relay(chunk)) = relay else { unreachable!() };
        let fields = std::str::from_utf8(&chunk.fields).unwrap();
        assert!(fields.starts_with(r#","system_fingerprint":"fp_44709d6fcb","choices":"#), "{fields}");
        assert!(
            !fields.contains("chatcmpl-123") && !fields.contains("gpt-4o-mini"),
            "the head is dropped: {fields}"
        );
    }
    // Each relay comes before the events read from its chunk: the first text follows the
    // second chunk's relay.
    assert!(matches!(relaying[..3], [Ok(Event::Relay(_)), Ok(Event::Relay(_)), Ok(Event::TextDelta(_))]));
    // Alone, each relay says whether its chunk held output, which no event then carries; the
    // usage and the finish still come as events.
    let mut held = Vec::new();
    for event in relaying.iter().flatten() {
        match event {
            Event::Relay(chunk) => {
                assert!(!chunk.output, "with events, the events carry the output");
                held.push(false);
            }
            event if event.is_output() => *held.last_mut().unwrap() = true,
            _ => {}
        }
    }
    let alone = run_sse(sse, || OpenAiStream::new(Relaying::Alone)).await;
    let (relays, rest): (Vec<_>, Vec<_>) = alone.into_iter().partition(|e| matches!(e, Ok(Event::Relay(_))));
    let alone_held: Vec<bool> =
        relays.iter().map(|r| matches!(r, Ok(Event::Relay(RelayChunk { output: true, .. })))).collect();
    assert_eq!(alone_held, held);
    assert!(held.iter().any(|&h| h) && held.iter().any(|&h| !h), "the fixture has both kinds of chunk");
    let not_output: Vec<_> = plain.into_iter().filter(|e| !e.as_ref().is_ok_and(Event::is_output)).collect();
    assert_eq!(rest, not_output);
}

#[tokio::test]
async fn a_relaying_parser_still_ends_on_errors_and_aborts() {
    let error = run_sse(include_str!("../../../../tests/fixtures/openai/chat_stream_error.sse"), || {
        OpenAiStream::new(Relaying::WithEvents)
    })
    .await;
    assert!(matches!(error.last(), Some(Err(_))), "{error:?}");
    let abort = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"abort\"}]}\n\n";
    let events = run_sse(abort, || OpenAiStream::new(Relaying::WithEvents)).await;
    assert!(matches!(events[..], [Err(ref e)] if e.class == ErrorClass::StreamBroken), "{events:?}");
}
