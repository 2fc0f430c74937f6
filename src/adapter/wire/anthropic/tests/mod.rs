//! Tests of the anthropic adapter against the recorded fixtures in tests/fixtures/: the request
//! it writes (`request`), the responses and events it reads (`response`), and both over HTTP
//! (`send`). This file holds what they share.
use std::time::Duration;

use futures::StreamExt;

use super::*;
use crate::adapter::transport::http::testing::{canned_server, run_sse};
use crate::adapter::{Call, Upstream, WireFormat};
use crate::canonical::{ErrorClass, Event, FinishReason, Message, Tool, ToolCall, ToolChoice, Usage};
use reqwest::header::HeaderMap;

mod request;
mod response;
mod send;

/// `send` as the request is written (its own model and stream flag).
async fn send(
    transport: &crate::adapter::Transport,
    upstream: &Upstream,
    req: &ChatRequest,
) -> Result<crate::adapter::EventStream, UpstreamError> {
    let call = Call::as_written(
        WireFormat::Claude(&crate::adapter::provider::anthropic::Anthropic),
        upstream.clone(),
        req,
    );
    crate::adapter::send(transport, &call, req).await
}

/// The body of a call made as the request is written.
fn request_body(req: &ChatRequest) -> Value {
    let call = Call::as_written(
        WireFormat::Claude(&crate::adapter::provider::anthropic::Anthropic),
        Default::default(),
        req,
    );
    super::request_body(req, &call)
}

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
