//! Anthropic Messages API.
//!
//! `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version: 2023-06-01`. System
//! messages go to the top-level `system`; tool calls and results become `tool_use` and
//! `tool_result` content blocks; consecutive messages of one role are merged, as the API wants
//! roles to alternate. A stream is complete only once `message_stop` has arrived.
//!
//! Structured output follows Anthropic's documented, generally available form (Claude
//! Sonnet 4.5, Opus 4.5 and Haiku 4.5 and later; no beta header): a `json_schema` response
//! format becomes `output_config: {format: {type: "json_schema", schema}}`, and the answer
//! comes back as text holding the JSON. Anthropic has no schema-less JSON mode, so
//! `json_object` adds one line to the system prompt asking for a single JSON object; in both
//! cases dispatch checks the answer before anything reaches the client. Images become `image`
//! blocks after the message's text: a base64 `data:` URL as a `base64` source, any other
//! address as a `url` source.

use std::collections::HashMap;

use reqwest::header::{HeaderMap, HeaderName, ACCEPT, CONTENT_TYPE};
use serde_json::{json, Map, Value};

use crate::adapter::error::parse_retry_after;
use crate::adapter::transport;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::{system_turn, Call, EventStream, Transport};
use crate::canonical::{
    ChatRequest, Dialect, ErrorClass, Event, FinishReason, Image, NativeEvent, ResponseFormat, Role,
    ToolChoice, UpstreamError, Usage,
};

pub mod cache;
mod count;
pub mod host;
pub(crate) mod native;
pub mod provenance;

pub(in crate::adapter) use count::count_tokens;
pub use host::ClaudeHost;

/// The API version this adapter speaks.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by Anthropic; used when the request has none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Appended to the system prompt for `response_format: json_object` (no native JSON mode).
pub const JSON_OBJECT_INSTRUCTION: &str =
    "Answer with a single JSON object and nothing else: no prose and no code fences.";

/// `POST` in the Messages format to `host`: Anthropic itself, a node that serves the Messages
/// API natively, or a cloud's Claude. A request that came in Messages form goes as the client
/// wrote it (see [`native`]); any other is translated from the canonical request.
pub(in crate::adapter) async fn send_to(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
    host: &dyn ClaudeHost,
) -> Result<EventStream, UpstreamError> {
    let client = req.native.as_ref().filter(|n| n.dialect == Dialect::AnthropicMessages);
    let url = host.url(&call.upstream.base_url, call.model, call.stream);
    let (mut headers, mut body) = prepared(call, req, host);
    if call.stream {
        headers.push((ACCEPT, host.stream_type().to_string()));
    }
    // Claude caches where told to; a node caches every prefix on its own.
    if let (Some(placement), true) = (&call.cache_placement, host.signer().is_some()) {
        let placed = cache::place(&mut body, placement);
        tracing::debug!(?placed, "prompt-cache breakpoints");
    }
    let body = Value::Object(body).to_string().into_bytes();
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer =
        transport::eventstream::unframed(http::post(transport, &url, &headers, body, host.classify()).await?);
    let relay = req.relay && client.is_some();
    let signer = host.signer();
    let parse = move |b: &Value| if relay { relayed(b, signer) } else { parse_response(b) };
    Ok(http::answer_events(
        answer,
        call.stream,
        AnthropicStream { relay, signer, ..AnthropicStream::default() },
        parse,
    ))
}

/// The headers and body of `call` of `req` as `host` takes them: the client's own body (or
/// the translation of the canonical request), with the client's version and the betas the
/// host takes.
fn prepared(
    call: &Call<'_>,
    req: &ChatRequest,
    host: &dyn ClaudeHost,
) -> (Vec<(HeaderName, String)>, Map<String, Value>) {
    let client = req.native.as_ref().filter(|n| n.dialect == Dialect::AnthropicMessages);
    let version = client.and_then(|n| n.header("anthropic-version")).unwrap_or(API_VERSION);
    let flags = client
        .and_then(|n| n.header("anthropic-beta"))
        .map(|h| h.split(',').map(str::trim).filter(|f| !f.is_empty()).collect());
    let betas = host.betas(flags.unwrap_or_default());
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(host.headers(version, &betas, call.upstream.api_key.as_deref()));
    let body = match client {
        Some(client) => native::body(req, call, client, host.signer()),
        None => request_body(req, call),
    };
    let Value::Object(mut body) = body else { unreachable!("a Messages body is an object") };
    host.fit(&mut body, &betas);
    (headers, body)
}

/// The Messages request body for `call` of `req`.
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(call.model));
    body.insert("max_tokens".into(), json!(req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    let system = match (call.system_prompt(req), &req.response_format) {
        (Some(system), ResponseFormat::JsonObject) => Some(format!("{system}\n\n{JSON_OBJECT_INSTRUCTION}")),
        (None, ResponseFormat::JsonObject) => Some(JSON_OBJECT_INSTRUCTION.to_string()),
        (system, _) => system,
    };
    if let Some(system) = system {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages(req, call)));
    if let ResponseFormat::JsonSchema { schema, .. } = &req.response_format {
        body.insert("output_config".into(), json!({"format": {"type": "json_schema", "schema": schema}}));
    }
    if let Some(temperature) = req.temperature {
        // Anthropic accepts 0..=1 (OpenAI 0..=2).
        body.insert("temperature".into(), json!(temperature.clamp(0.0, 1.0)));
    }
    if let Some(top_p) = req.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if let Some(top_k) = req.top_k {
        body.insert("top_k".into(), json!(top_k));
    }
    if let Some(user) = &req.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop));
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), json!(t.name));
                if let Some(description) = &t.description {
                    tool.insert("description".into(), json!(description));
                }
                // The API let through only an object schema or none; Anthropic requires one.
                let schema = match &t.parameters {
                    Value::Null => json!({"type": "object", "properties": {}}),
                    schema => schema.clone(),
                };
                tool.insert("input_schema".into(), schema);
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    body.insert("stream".into(), json!(call.stream));
    Value::Object(body)
}

/// OpenAI's `tool_choice` in Anthropic's words.
pub(crate) fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
    }
}

/// The conversation after the system prompt, as alternating user/assistant content blocks (a
/// later system message a user turn at its place: [`system_turn`]).
fn messages(req: &ChatRequest, call: &Call) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in call.turns(req) {
        let (role, blocks) = match m.role {
            Role::System => ("user", text_block(&system_turn(&m.content)).into_iter().collect()),
            Role::User => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                blocks.extend(m.images.iter().map(image_block));
                ("user", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                for call in &m.tool_calls {
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({
                        "type": "tool_use", "id": call.id, "name": call.name, "input": input,
                    }));
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect()
}

/// An `image` content block: inline bytes as a `base64` source, an address as a `url` source.
fn image_block(image: &Image) -> Value {
    let source = match image.inline_data() {
        Some((media_type, data)) => json!({"type": "base64", "media_type": media_type, "data": data}),
        None => json!({"type": "url", "url": image.url}),
    };
    json!({"type": "image", "source": source})
}

/// Anthropic rejects empty text blocks.
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// Classify a non-2xx answer: `{"type": "error", "error": {"type", "message"}}`.
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let retry_after = parse_retry_after(headers);
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|b| b.get("error")).filter(|e| e.is_object());
    let class = error.map(|e| class_of(Some(status), e)).unwrap_or(ErrorClass::from_status(status));
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| http::excerpt(body));
    UpstreamError::new(class, Some(status), message).with_retry_after(retry_after)
}

fn class_of(status: Option<u16>, error: &Value) -> ErrorClass {
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "overloaded_error" => ErrorClass::Overloaded,
        "rate_limit_error" => ErrorClass::RateLimited,
        // Out of credit: this backend cannot serve now, like an exhausted quota.
        "billing_error" => ErrorClass::RateLimited,
        // An unavailable service (503) is overload whatever the body calls it.
        "api_error" if status == Some(503) => ErrorClass::Overloaded,
        "api_error" => ErrorClass::ServerError,
        "timeout_error" => ErrorClass::Timeout,
        "authentication_error" | "permission_error" => ErrorClass::Auth,
        "invalid_request_error" | "request_too_large" => {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
            if message.contains("prompt is too long")
                || message.contains("context limit")
                || message.contains("context window")
            {
                ErrorClass::ContextLength
            } else {
                ErrorClass::InvalidRequest
            }
        }
        "not_found_error" => ErrorClass::InvalidRequest,
        _ => status.map(ErrorClass::from_status).unwrap_or(ErrorClass::ServerError),
    }
}

fn in_band_error(error: &Value) -> UpstreamError {
    let message = error.get("message").and_then(Value::as_str).unwrap_or("upstream error");
    UpstreamError::new(class_of(None, error), None, message)
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        // end_turn, stop_sequence, pause_turn and anything new.
        _ => FinishReason::Stop,
    }
}

/// Canonical usage from an Anthropic `usage` object, whose `input_tokens` counts only the
/// uncached prompt: canonical input counts every prompt token, those read from the cache
/// (`cache_read_input_tokens`) and written to it (`cache_creation_input_tokens`) included.
fn usage(value: &Value) -> Usage {
    let read = http::as_u32(value.get("cache_read_input_tokens"));
    let created = http::as_u32(value.get("cache_creation_input_tokens"));
    Usage {
        input_tokens: http::as_u32(value.get("input_tokens")).saturating_add(read).saturating_add(created),
        cached_input_tokens: read,
        output_tokens: http::as_u32(value.get("output_tokens")),
        cache_write_tokens: created,
    }
}

/// [`parse_response`], with the whole body first as a [`NativeEvent`] named `message`, its
/// thinking signatures marked with their `signer` ([`provenance`]).
fn relayed(body: &Value, signer: Option<&str>) -> Result<Vec<Event>, UpstreamError> {
    let mut events = parse_response(body)?;
    let data = match signer.filter(|_| provenance::signed(body)) {
        Some(signer) => {
            let mut marked = body.clone();
            provenance::mark_all(signer, &mut marked);
            serde_json::to_vec(&marked)
        }
        None => serde_json::to_vec(body),
    };
    let data = data.unwrap_or_default().into();
    events.insert(0, Event::Native(NativeEvent { name: "message".into(), data }));
    Ok(events)
}

/// Every event of a non-streamed `message` body.
pub(in crate::adapter) fn parse_response(body: &Value) -> Result<Vec<Event>, UpstreamError> {
    if body.get("type").and_then(Value::as_str) == Some("error") {
        return Err(in_band_error(&body["error"]));
    }
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::new(ErrorClass::StreamBroken, None, "message has no content"))?;
    let mut events = Vec::new();
    let mut tool_index = 0;
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    events.push(Event::TextDelta(text.to_string()));
                }
            }
            Some("thinking") => {
                if let Some(text) = block.get("thinking").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    events.push(Event::ReasoningDelta(text.to_string()));
                }
            }
            Some("tool_use") => {
                events.push(Event::ToolCallDelta {
                    index: tool_index,
                    id: block.get("id").and_then(Value::as_str).map(str::to_string),
                    name: block.get("name").and_then(Value::as_str).map(str::to_string),
                    arguments: block.get("input").unwrap_or(&json!({})).to_string(),
                });
                tool_index += 1;
            }
            _ => {}
        }
    }
    if let Some(u) = body.get("usage").filter(|u| u.is_object()) {
        events.push(Event::Usage(usage(u)));
    }
    let reason = body.get("stop_reason").and_then(Value::as_str).unwrap_or("end_turn");
    events.push(Event::Finish(finish_reason(reason)));
    Ok(events)
}

/// Parser state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    /// Hand each event on raw, as an [`Event::Native`] ahead of the events read from it.
    relay: bool,
    /// Who signs the thinking relayed ([`provenance`]); `None`: a node, which signs none.
    signer: Option<&'static str>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    /// Content block index → canonical tool call index.
    tool_blocks: HashMap<u64, u32>,
    done: bool,
}

impl StreamParser for AnthropicStream {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let payload: Value = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
        let kind = payload.get("type").and_then(Value::as_str).unwrap_or(event);
        let mut events = Vec::new();
        if self.relay && kind != "error" {
            let data = match self.signer.filter(|_| provenance::signed(&payload)) {
                Some(signer) => {
                    let mut marked = payload.clone();
                    provenance::mark_all(signer, &mut marked);
                    bytes::Bytes::from(marked.to_string())
                }
                None => bytes::Bytes::copy_from_slice(data.as_bytes()),
            };
            events.push(Event::Native(NativeEvent { name: kind.into(), data }));
        }
        match kind {
            "message_start" => {
                if let Some(u) = payload.pointer("/message/usage").filter(|u| u.is_object()) {
                    self.usage = Some(usage(u));
                }
            }
            "content_block_start" => {
                let index = payload.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = &payload["content_block"];
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) =
                            block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
                        {
                            events.push(Event::TextDelta(text.to_string()));
                        }
                    }
                    Some("tool_use") => {
                        let tool_index = self.tool_blocks.len() as u32;
                        self.tool_blocks.insert(index, tool_index);
                        events.push(Event::ToolCallDelta {
                            index: tool_index,
                            id: block.get("id").and_then(Value::as_str).map(str::to_string),
                            name: block.get("name").and_then(Value::as_str).map(str::to_string),
                            arguments: String::new(),
                        });
                    }
                    // thinking (its text comes in deltas), redacted_thinking, server tools.
                    _ => {}
                }
            }
            "content_block_delta" => {
                let index = payload.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = &payload["delta"];
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) =
                            delta.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
                        {
                            events.push(Event::TextDelta(text.to_string()));
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(text) =
                            delta.get("thinking").and_then(Value::as_str).filter(|t| !t.is_empty())
                        {
                            events.push(Event::ReasoningDelta(text.to_string()));
                        }
                    }
                    Some("input_json_delta") => {
                        let partial = delta.get("partial_json").and_then(Value::as_str).unwrap_or("");
                        if let (Some(&tool_index), false) = (self.tool_blocks.get(&index), partial.is_empty())
                        {
                            events.push(Event::ToolCallDelta {
                                index: tool_index,
                                id: None,
                                name: None,
                                arguments: partial.to_string(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = payload.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.finish = Some(finish_reason(reason));
                }
                if let Some(u) = payload.get("usage").filter(|u| u.is_object()) {
                    // Counts in message_delta are cumulative; input counts may be absent.
                    let mut current = self.usage.unwrap_or_default();
                    if u.get("output_tokens").is_some() {
                        current.output_tokens = http::as_u32(u.get("output_tokens"));
                    }
                    if u.get("input_tokens").is_some() {
                        let update = usage(u);
                        current.input_tokens = update.input_tokens;
                        current.cached_input_tokens = update.cached_input_tokens;
                        current.cache_write_tokens = update.cache_write_tokens;
                    }
                    self.usage = Some(current);
                }
            }
            "message_stop" => {
                self.done = true;
                if let Some(usage) = self.usage.take() {
                    events.push(Event::Usage(usage));
                }
                events.push(Event::Finish(self.finish.take().unwrap_or(FinishReason::Stop)));
            }
            "error" => return Err(in_band_error(&payload["error"])),
            // ping, content_block_stop, and event types added later.
            _ => {}
        }
        Ok(events)
    }

    fn is_closed(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        if self.done {
            Ok(Vec::new())
        } else {
            Err(http::truncated("message_stop"))
        }
    }
}

#[cfg(test)]
mod tests;
