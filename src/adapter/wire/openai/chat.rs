//! OpenAI Chat Completions, as spoken by vLLM, OpenAI and any OpenAI-compatible endpoint.
//!
//! `POST {base_url}/chat/completions` (the base URL already ends in `/v1`), `Authorization:
//! Bearer` when the upstream has a key. Streams always ask for `stream_options.include_usage`
//! so that usage arrives in a last chunk with empty `choices` before `data: [DONE]`.
//!
//! Being the client's own wire format, everything passes through: tools and `tool_choice`,
//! `response_format` (`json_object`, `json_schema` with its `strict` flag), and images as
//! `image_url` content parts after the message's text.

use std::borrow::Cow;

use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::relay::SplitChunk;
use crate::adapter::error::parse_retry_after;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{
    ChatRequest, ErrorClass, Event, FinishReason, Message, ResponseFormat, Role, ToolChoice, UpstreamError,
    Usage,
};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let upstream = &call.upstream;
    let url = upstream.url("chat/completions");
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(upstream.openai_key());
    if call.stream {
        headers.push((ACCEPT, "text/event-stream".to_string()));
    }
    let body = serde_json::to_vec(&upstream_body(req, call)).expect("a JSON value serialises");
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, classify).await?;
    Ok(http::answer_events(
        answer,
        call.stream,
        OpenAiStream::new(req.relay && req.native.is_none()),
        parse_response,
    ))
}

/// What the call's upstream is sent: [`request_body`], and to OpenAI itself (the upstream that serves
/// Responses) the fields only it reads: `prompt_cache_key`. vLLM logs a warning for every
/// request with a field it does not know, and other OpenAI-compatible servers may refuse one.
fn upstream_body(req: &ChatRequest, call: &Call) -> Value {
    let mut body = request_body(req, call);
    if let (true, Some(key)) = (call.upstream.serves_responses, &req.prompt_cache_key) {
        body["prompt_cache_key"] = json!(key);
    }
    body
}

/// The Chat Completions request body for `call` of `req`.
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(call.model));
    body.insert("messages".into(), Value::Array(call.messages(req).map(message).collect()));
    body.insert("stream".into(), json!(call.stream));
    if call.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(max_tokens) = req.max_tokens {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    if let Some(temperature) = req.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = req.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if !req.stop.is_empty() {
        body.insert("stop".into(), json!(req.stop));
    }
    if let Some(seed) = req.seed {
        body.insert("seed".into(), json!(seed));
    }
    if let Some(user) = &req.user {
        body.insert("user".into(), json!(user));
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut function = Map::new();
                function.insert("name".into(), json!(t.name));
                if let Some(description) = &t.description {
                    function.insert("description".into(), json!(description));
                }
                if !t.parameters.is_null() {
                    function.insert("parameters".into(), t.parameters.clone());
                }
                json!({"type": "function", "function": function})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    match &req.response_format {
        ResponseFormat::Text => {}
        ResponseFormat::JsonObject => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        ResponseFormat::JsonSchema { name, schema, strict } => {
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}),
            );
        }
    }
    Value::Object(body)
}

/// A canonical tool choice in OpenAI's own words.
pub(crate) fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!("none"),
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

fn message(m: &Message) -> Value {
    match m.role {
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User if m.images.is_empty() => json!({"role": "user", "content": m.content}),
        Role::User => {
            let mut parts = Vec::with_capacity(m.images.len() + 1);
            if !m.content.is_empty() {
                parts.push(json!({"type": "text", "text": m.content}));
            }
            for image in &m.images {
                let mut url = json!({"url": image.url});
                if let Some(detail) = &image.detail {
                    url["detail"] = json!(detail);
                }
                parts.push(json!({"type": "image_url", "image_url": url}));
            }
            json!({"role": "user", "content": parts})
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
        Role::Assistant => {
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            if m.tool_calls.is_empty() || !m.content.is_empty() {
                out.insert("content".into(), json!(m.content));
            } else {
                out.insert("content".into(), Value::Null);
            }
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        })
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(out)
        }
    }
}

/// Classify a non-2xx answer: OpenAI's `{"error": {message, type, code}}` or vLLM's older
/// top-level `{"object": "error", message, type, code}`.
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let retry_after = parse_retry_after(headers);
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().map(error_object);
    let class = error.map(|e| class_of(Some(status), e)).unwrap_or(ErrorClass::from_status(status));
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| http::excerpt(body));
    UpstreamError::new(class, Some(status), message).with_retry_after(retry_after)
}

/// The error object of an error body, whichever of the two shapes it has.
fn error_object(body: &Value) -> &Value {
    match body.get("error") {
        Some(e) if e.is_object() => e,
        _ => body,
    }
}

/// The class of an error object; `status` is the HTTP status when there was one (a mid-stream
/// error has none: then a numeric `code` stands in for it).
fn class_of(status: Option<u16>, error: &Value) -> ErrorClass {
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
    let message = error.get("message").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    let status = status
        .or_else(|| error.get("code").and_then(Value::as_u64).map(|c| c as u16))
        // Azure writes the status as a string `code`.
        .or_else(|| code.parse().ok())
        .or_else(|| error.get("status").and_then(Value::as_u64).map(|c| c as u16));
    if code == "context_length_exceeded"
        || (status.is_none_or(|s| (400..500).contains(&s))
            && (message.contains("maximum context length")
                || message.contains("context length exceeded")
                || message.contains("context window")))
    {
        return ErrorClass::ContextLength;
    }
    if matches!(code, "content_filter" | "content_policy_violation")
        || matches!(kind, "content_filter" | "content_policy_violation")
    {
        return ErrorClass::ContentPolicy;
    }
    match status {
        Some(status) => ErrorClass::from_status(status),
        None => match (kind, code) {
            ("insufficient_quota" | "rate_limit_error" | "tokens" | "requests", _)
            | (_, "rate_limit_exceeded" | "insufficient_quota") => ErrorClass::RateLimited,
            ("invalid_request_error" | "BadRequestError", _) => ErrorClass::InvalidRequest,
            ("authentication_error" | "permission_error", _) => ErrorClass::Auth,
            _ => ErrorClass::ServerError,
        },
    }
}

/// An error that arrived inside a 2xx stream or body.
pub(in crate::adapter) fn in_band_error(error: &Value) -> UpstreamError {
    let message = error.get("message").and_then(Value::as_str).unwrap_or("upstream error");
    UpstreamError::new(class_of(None, error), None, message)
}

pub(in crate::adapter) fn finish_reason(reason: &str) -> Result<FinishReason, UpstreamError> {
    Ok(match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        // vLLM reports an engine-side abort as a finish reason: the answer is not complete.
        "abort" | "error" => {
            return Err(UpstreamError::new(
                ErrorClass::StreamBroken,
                None,
                format!("upstream ended the answer with finish_reason {reason:?}"),
            ))
        }
        _ => FinishReason::Stop,
    })
}

pub(crate) fn usage(value: &Value) -> Option<Usage> {
    if !value.is_object() {
        return None;
    }
    Some(Usage {
        input_tokens: http::as_u32(value.get("prompt_tokens")),
        cached_input_tokens: http::as_u32(value.pointer("/prompt_tokens_details/cached_tokens")),
        output_tokens: http::as_u32(value.get("completion_tokens")),
        // OpenAI-format servers cache on their own and bill no writes.
        cache_write_tokens: 0,
    })
}

/// Every event of a non-streamed `chat.completion` body.
pub(in crate::adapter) fn parse_response(body: &Value) -> Result<Vec<Event>, UpstreamError> {
    if let Some(error) = body.get("error").filter(|e| e.is_object()) {
        return Err(in_band_error(error));
    }
    let choice = body
        .pointer("/choices/0")
        .ok_or_else(|| UpstreamError::new(ErrorClass::StreamBroken, None, "response has no choices"))?;
    let mut events = Vec::new();
    let message = &choice["message"];
    if let Some(text) = message.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
        events.push(Event::TextDelta(text.to_string()));
    }
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (index, call) in calls.iter().enumerate() {
            events.push(Event::ToolCallDelta {
                index: index as u32,
                id: call.get("id").and_then(Value::as_str).map(str::to_string),
                name: call.pointer("/function/name").and_then(Value::as_str).map(str::to_string),
                arguments: call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            });
        }
    }
    if let Some(usage) = body.get("usage").and_then(usage) {
        events.push(Event::Usage(usage));
    }
    let reason = choice.get("finish_reason").and_then(Value::as_str).unwrap_or("stop");
    events.push(Event::Finish(finish_reason(reason)?));
    Ok(events)
}

/// Parser state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    relay: bool,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    done: bool,
}

/// One streamed chunk, read without building a JSON tree: strings borrow from the event's
/// text unless they hold escapes, and fields Spillway does not use are skipped.
#[derive(Deserialize)]
struct ChunkIn<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default, borrow)]
    choices: Option<Vec<ChoiceIn<'a>>>,
}

#[derive(Deserialize)]
struct ChoiceIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<DeltaIn<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaIn<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    /// vLLM's reasoning parsers write `reasoning_content`; newer releases `reasoning` (some
    /// both, with the same text).
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize)]
struct FunctionIn<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct UsageIn {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<CachedIn>,
}

#[derive(Deserialize)]
struct CachedIn {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl UsageIn {
    fn to_usage(&self) -> Usage {
        let n = |v: Option<u64>| v.map_or(0, |v| v.min(u32::MAX as u64) as u32);
        Usage {
            input_tokens: n(self.prompt_tokens),
            cached_input_tokens: n(self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens)),
            output_tokens: n(self.completion_tokens),
            cache_write_tokens: 0,
        }
    }
}

impl OpenAiStream {
    /// A parser for one answer; `relay`: also yield each chunk as [`Event::Relay`].
    pub(crate) fn new(relay: bool) -> OpenAiStream {
        OpenAiStream { relay, ..OpenAiStream::default() }
    }

    /// The canonical events of one chunk (usage and finish are held for `[DONE]`).
    fn read(&mut self, chunk: ChunkIn<'_>) -> Result<Vec<Event>, UpstreamError> {
        if let Some(error) = chunk.error.as_ref().filter(|e| e.is_object()) {
            return Err(in_band_error(error));
        }
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.to_usage());
        }
        let mut events = Vec::new();
        // One answer per request (n = 1): only choice 0 is read.
        let Some(choice) = chunk.choices.into_iter().flatten().find(|c| c.index.unwrap_or(0) == 0) else {
            return Ok(events);
        };
        if let Some(delta) = choice.delta {
            if let Some(text) = delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty()) {
                events.push(Event::ReasoningDelta(text.into_owned()));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                events.push(Event::TextDelta(text.into_owned()));
            }
            for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                let index = call.index.unwrap_or(position as u64);
                let (name, arguments) = match call.function {
                    Some(f) => (f.name, f.arguments.unwrap_or_default()),
                    None => (None, Cow::Borrowed("")),
                };
                if call.id.is_none() && name.is_none() && arguments.is_empty() {
                    continue;
                }
                events.push(Event::ToolCallDelta {
                    index: index as u32,
                    id: call.id.map(Cow::into_owned),
                    name: name.map(Cow::into_owned),
                    arguments: arguments.into_owned(),
                });
            }
        }
        if let Some(reason) = choice.finish_reason {
            self.finish = Some(finish_reason(&reason)?);
        }
        Ok(events)
    }
}

impl StreamParser for OpenAiStream {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            let mut events = Vec::new();
            if let Some(usage) = self.usage.take() {
                events.push(Event::Usage(usage));
            }
            events.push(Event::Finish(self.finish.take().unwrap_or(FinishReason::Stop)));
            return Ok(events);
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if !self.relay {
            let chunk: ChunkIn<'_> = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
            return self.read(chunk);
        }
        let malformed = |e: serde_json::Error| http::malformed(data, &e);
        let split: SplitChunk<'_> = serde_json::from_str(data).map_err(malformed)?;
        let chunk = ChunkIn {
            error: split.error.map(|e| serde_json::from_str(e.get())).transpose().map_err(malformed)?,
            usage: split
                .usage
                .map(|u| serde_json::from_str(u.get()))
                .transpose()
                .map_err(malformed)?
                .flatten(),
            choices: split.choices.map(|c| serde_json::from_str(c.get())).transpose().map_err(malformed)?,
        };
        let no_choices = chunk.choices.as_ref().is_none_or(Vec::is_empty);
        let mut events = self.read(chunk)?;
        events.insert(0, Event::Relay(split.relay(no_choices)));
        Ok(events)
    }

    fn is_closed(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        if self.done {
            Ok(Vec::new())
        } else {
            Err(http::truncated("data: [DONE]"))
        }
    }
}

#[cfg(test)]
#[path = "chat_tests.rs"]
mod tests;
