//! OpenAI's Responses API (`POST {base_url}/responses`), for a Responses request pinned to
//! OpenAI because it leans on state that OpenAI keeps (`previous_response_id`, `store: true`,
//! `conversation`, `item_reference` items). The client's body goes as it wrote it: only
//! `model` (the backend's), `stream` (whether dispatch streams) and `max_output_tokens` (the
//! request's cap, which the task may have lowered) are rewritten.
//!
//! The answer, streamed or whole, is read into canonical events: `response.output_text.delta`
//! (and refusal text) → text, `response.function_call_arguments.delta` with the call id and
//! name from its `response.output_item.added` → tool-call deltas, reasoning text → reasoning,
//! `response.completed` / `response.incomplete` → usage and finish. With `req.relay` every
//! upstream event is handed on first as [`Event::Native`], so the client gets OpenAI's own
//! events (its response id, its stored items) as they came. Only output commits dispatch:
//! `response.created` and `response.in_progress` are not output, so an upstream that fails
//! right after opening its stream has failed before its first token. `response.failed` and
//! `error` are classified errors, never relayed: the door writes the failure itself.
//!
//! This module never translates a canonical request: one without a Responses body is refused.

use std::collections::{HashMap, HashSet};

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{json, Value};

use super::error;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{
    ChatRequest, Dialect, ErrorClass, Event, FinishReason, NativeEvent, NativeRequest, UpstreamError, Usage,
};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let Some(client) = req.native.as_ref().filter(|n| n.dialect == Dialect::OpenAiResponses) else {
        return Err(UpstreamError::new(
            ErrorClass::InvalidRequest,
            None,
            "the Responses API is called only with the client's own Responses request",
        ));
    };
    let url = call.upstream.url("responses");
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(call.upstream.openai_key());
    if call.stream {
        headers.push((ACCEPT, "text/event-stream".to_string()));
    }
    let body = body(req, call, client).to_string().into_bytes();
    let answer = http::post(transport, &url, &headers, body, error::classify).await?;
    let parse = if req.relay { parse_response_relayed } else { parse_response };
    Ok(http::answer_events(answer, call.stream, ResponsesStream::new(req.relay), parse))
}

/// The body for this call: the client's, with the call's `model`, `stream` and output cap.
pub(crate) fn body(req: &ChatRequest, call: &Call, client: &NativeRequest) -> Value {
    let mut body = call.native_body(client);
    if let Some(cap) = req.max_tokens {
        body.insert("max_output_tokens".into(), json!(cap));
    }
    Value::Object(body)
}

/// The class of a Responses error (`response.failed`'s `error`, or an `error` event): its
/// own codes first, then what the chat adapter reads from an OpenAI error object.
fn failure(error: &Value) -> UpstreamError {
    let error = match error.get("error") {
        Some(inner) if inner.is_object() => inner,
        _ => error,
    };
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    let class = match code {
        "server_error" => ErrorClass::ServerError,
        "rate_limit_exceeded" => ErrorClass::RateLimited,
        "vector_store_timeout" => ErrorClass::Timeout,
        c if c.ends_with("content_policy_violation") => ErrorClass::ContentPolicy,
        c if c.starts_with("invalid_") || c.contains("image") => ErrorClass::InvalidRequest,
        _ => return error::in_band_error(error),
    };
    let message = error.get("message").and_then(Value::as_str).unwrap_or("the response failed");
    UpstreamError::new(class, None, message)
}

fn usage(value: &Value) -> Usage {
    Usage {
        input_tokens: http::as_u32(value.get("input_tokens")),
        cached_input_tokens: http::as_u32(value.pointer("/input_tokens_details/cached_tokens")),
        output_tokens: http::as_u32(value.get("output_tokens")),
        // OpenAI caches on its own and bills no writes.
        cache_write_tokens: 0,
    }
}

/// A finished Response object's usage and finish (`called`: it holds function calls).
fn ending(response: &Value, called: bool) -> Vec<Event> {
    let mut events = Vec::new();
    if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
        events.push(Event::Usage(usage(u)));
    }
    let finish = match response.get("status").and_then(Value::as_str) {
        Some("incomplete") => match response.pointer("/incomplete_details/reason").and_then(Value::as_str) {
            Some("content_filter") => FinishReason::ContentFilter,
            _ => FinishReason::Length,
        },
        _ if called => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    };
    events.push(Event::Finish(finish));
    events
}

/// [`parse_response`], with the whole body first as a [`NativeEvent`] named `response`.
fn parse_response_relayed(body: &Value) -> Result<Vec<Event>, UpstreamError> {
    let mut events = parse_response(body)?;
    let data = body.to_string().into_bytes().into();
    events.insert(0, Event::Native(NativeEvent { name: "response".into(), data }));
    Ok(events)
}

/// Every event of a whole Response object.
pub(in crate::adapter) fn parse_response(body: &Value) -> Result<Vec<Event>, UpstreamError> {
    if body.get("status").and_then(Value::as_str) == Some("failed") {
        return Err(failure(body.get("error").unwrap_or(&Value::Null)));
    }
    let output = body
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::new(ErrorClass::StreamBroken, None, "the response has no output"))?;
    let mut events = Vec::new();
    let mut calls = 0;
    let text = |v: &Value, key: &str| {
        v.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string)
    };
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    let piece = match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => text(part, "text"),
                        Some("refusal") => text(part, "refusal"),
                        _ => None,
                    };
                    events.extend(piece.map(Event::TextDelta));
                }
            }
            Some("function_call") => {
                events.push(Event::ToolCallDelta {
                    index: calls,
                    id: text(item, "call_id"),
                    name: text(item, "name"),
                    arguments: text(item, "arguments").unwrap_or_default(),
                });
                calls += 1;
            }
            Some("reasoning") => {
                let summary = item.get("summary").and_then(Value::as_array).into_iter().flatten();
                events.extend(summary.filter_map(|part| text(part, "text")).map(Event::ReasoningDelta));
            }
            _ => {}
        }
    }
    events.extend(ending(body, calls > 0));
    Ok(events)
}

/// Parser state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct ResponsesStream {
    /// Hand each event on raw, as an [`Event::Native`] ahead of the events read from it.
    relay: bool,
    /// A function call's output index → its canonical index, and whether its arguments came.
    calls: HashMap<u64, (u32, bool)>,
    /// The `(output_index, content_index)` of text parts that arrived in deltas.
    texted: HashSet<(u64, u64)>,
    done: bool,
}

impl ResponsesStream {
    pub(crate) fn new(relay: bool) -> ResponsesStream {
        ResponsesStream { relay, ..ResponsesStream::default() }
    }
}

fn index_of(payload: &Value, key: &str) -> u64 {
    payload.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn string(payload: &Value, key: &str) -> String {
    payload.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

impl StreamParser for ResponsesStream {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let payload: Value = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
        let kind = payload.get("type").and_then(Value::as_str).unwrap_or(event);
        let mut events = Vec::new();
        if self.relay && !matches!(kind, "error" | "response.failed") {
            let data = bytes::Bytes::copy_from_slice(data.as_bytes());
            events.push(Event::Native(NativeEvent { name: kind.into(), data }));
        }
        let at = index_of(&payload, "output_index");
        let part = (at, index_of(&payload, "content_index"));
        match kind {
            "response.output_item.added" => {
                let item = &payload["item"];
                if item.get("type").and_then(Value::as_str) == Some("function_call") {
                    let index = self.calls.len() as u32;
                    let arguments = string(item, "arguments");
                    self.calls.insert(at, (index, !arguments.is_empty()));
                    events.push(Event::ToolCallDelta {
                        index,
                        id: Some(string(item, "call_id")),
                        name: Some(string(item, "name")),
                        arguments,
                    });
                }
            }
            "response.function_call_arguments.delta" => {
                let delta = string(&payload, "delta");
                if let (Some((index, came)), false) = (self.calls.get_mut(&at), delta.is_empty()) {
                    *came = true;
                    events.push(Event::ToolCallDelta {
                        index: *index,
                        id: None,
                        name: None,
                        arguments: delta,
                    });
                }
            }
            // Arguments that came only whole.
            "response.function_call_arguments.done" => {
                let arguments = string(&payload, "arguments");
                if let (Some((index, came @ false)), false) = (self.calls.get_mut(&at), arguments.is_empty())
                {
                    *came = true;
                    events.push(Event::ToolCallDelta { index: *index, id: None, name: None, arguments });
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                self.texted.insert(part);
                let delta = string(&payload, "delta");
                if !delta.is_empty() {
                    events.push(Event::TextDelta(delta));
                }
            }
            // Text that came only whole.
            "response.output_text.done" | "response.refusal.done" => {
                let key = if kind == "response.output_text.done" { "text" } else { "refusal" };
                let text = string(&payload, key);
                if self.texted.insert(part) && !text.is_empty() {
                    events.push(Event::TextDelta(text));
                }
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                let delta = string(&payload, "delta");
                if !delta.is_empty() {
                    events.push(Event::ReasoningDelta(delta));
                }
            }
            "response.completed" | "response.incomplete" => {
                self.done = true;
                events.extend(ending(&payload["response"], !self.calls.is_empty()));
            }
            "response.failed" => {
                return Err(failure(payload.pointer("/response/error").unwrap_or(&Value::Null)))
            }
            "error" => return Err(failure(&payload)),
            // response.created, response.in_progress, content parts, item done, and the rest.
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
            Err(http::truncated("response.completed"))
        }
    }
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
