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
//! upstream event is handed on as [`Event::Native`] (alone, or first, as
//! [`ChatRequest::relaying`] says), so the client gets OpenAI's own events (its response id,
//! its stored items) as they came. Only output commits dispatch:
//! `response.created` and `response.in_progress` are not output, so an upstream that fails
//! right after opening its stream has failed before its first token. `response.failed` and
//! `error` are classified errors, never relayed: the door writes the failure itself.
//!
//! This module never translates a canonical request: one without a Responses body is refused.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{self, ErrorBody, ErrorObject};
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::wire::output::Output;
use crate::adapter::wire::{count, event_type, Passed};
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{
    ChatRequest, Dialect, ErrorClass, Event, FinishReason, NativeEvent, NativeRequest, Relaying,
    UpstreamError, Usage,
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
    let body = serde_json::to_vec(&ResponsesBody::of(req, call, client)).expect("a typed body serialises");
    let answer = http::post(transport, &url, &headers, body, error::classify).await?;
    let relaying = req.relaying(true);
    let parse = move |b: &[u8]| {
        if relaying.is_on() {
            parse_response_relayed(b, relaying)
        } else {
            parse_response(b)
        }
    };
    Ok(http::answer_events(answer, call.stream, ResponsesStream::new(relaying), parse))
}

/// The body for this call: the client's members as it wrote them, with the call's `model`,
/// `stream` and output cap, and the task's variant before the client's `instructions`.
#[derive(Serialize)]
pub(crate) struct ResponsesBody<'a> {
    model: &'a str,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<Value>,
    #[serde(flatten)]
    rest: Passed<'a>,
}

impl<'a> ResponsesBody<'a> {
    pub(crate) fn of(req: &ChatRequest, call: &'a Call, client: &'a NativeRequest) -> ResponsesBody<'a> {
        let instructions = call.variant.as_ref().map(|variant| {
            Dialect::OpenAiResponses.system_with(client.body.get("instructions"), &variant.content)
        });
        // What the body writes itself; the client's other members pass on as written.
        let owned: &'static [&'static str] = match (req.max_tokens, &instructions) {
            (Some(_), Some(_)) => &["model", "stream", "max_output_tokens", "instructions"],
            (Some(_), None) => &["model", "stream", "max_output_tokens"],
            (None, Some(_)) => &["model", "stream", "instructions"],
            (None, None) => &["model", "stream"],
        };
        ResponsesBody {
            model: call.model,
            stream: call.stream,
            max_output_tokens: req.max_tokens,
            instructions,
            rest: Passed { members: client.body.root(), owned },
        }
    }
}

/// The class of a Responses error (`response.failed`'s `error`, or an `error` event): its
/// own codes first, then what the chat adapter reads from an OpenAI error object.
fn failure(error: &ErrorObject) -> UpstreamError {
    let class = match error.code().unwrap_or("") {
        "server_error" => ErrorClass::ServerError,
        "rate_limit_exceeded" => ErrorClass::RateLimited,
        "vector_store_timeout" => ErrorClass::Timeout,
        c if c.ends_with("content_policy_violation") => ErrorClass::ContentPolicy,
        c if c.starts_with("invalid_") || c.contains("image") => ErrorClass::InvalidRequest,
        _ => return error.in_band(),
    };
    UpstreamError::new(class, None, error.message().unwrap_or("the response failed"))
}

/// One streamed event, by its `type`.
#[derive(Deserialize)]
#[serde(tag = "type")]
enum StreamEvent<'a> {
    #[serde(rename = "response.output_item.added")]
    ItemAdded {
        #[serde(default)]
        output_index: u64,
        #[serde(borrow)]
        item: ItemIn<'a>,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        #[serde(default)]
        output_index: u64,
        #[serde(default, borrow)]
        delta: Cow<'a, str>,
    },
    /// Arguments that came only whole.
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        #[serde(default)]
        output_index: u64,
        #[serde(default, borrow)]
        arguments: Cow<'a, str>,
    },
    #[serde(rename = "response.output_text.delta", alias = "response.refusal.delta")]
    TextDelta {
        #[serde(flatten)]
        at: PartAt,
        #[serde(default, borrow)]
        delta: Cow<'a, str>,
    },
    /// Text that came only whole.
    #[serde(rename = "response.output_text.done", alias = "response.refusal.done")]
    TextDone {
        #[serde(flatten)]
        at: PartAt,
        #[serde(default, borrow, alias = "refusal")]
        text: Cow<'a, str>,
    },
    #[serde(rename = "response.reasoning_text.delta", alias = "response.reasoning_summary_text.delta")]
    ReasoningDelta {
        #[serde(default, borrow)]
        delta: Cow<'a, str>,
    },
    #[serde(rename = "response.completed", alias = "response.incomplete")]
    Ended {
        #[serde(borrow)]
        response: ResponseIn<'a>,
    },
    #[serde(rename = "response.failed")]
    Failed {
        #[serde(borrow)]
        response: ResponseIn<'a>,
    },
    #[serde(rename = "error")]
    Error(ErrorBody),
    /// response.created, response.in_progress, content parts, item done, and the rest.
    #[serde(other)]
    Unknown,
}

/// Where a text part is: its output item and its place in that item.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Hash)]
struct PartAt {
    #[serde(default)]
    output_index: u64,
    #[serde(default)]
    content_index: u64,
}

/// A Response object, as far as Spillway reads it.
#[derive(Deserialize)]
struct ResponseIn<'a> {
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<ErrorBody>,
    #[serde(default, borrow)]
    output: Option<Vec<ItemIn<'a>>>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default, borrow)]
    incomplete_details: Option<Incomplete<'a>>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(default, borrow)]
    reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ItemIn<'a> {
    Message {
        #[serde(default, borrow)]
        content: Vec<PartIn<'a>>,
    },
    FunctionCall {
        #[serde(default, borrow)]
        call_id: Cow<'a, str>,
        #[serde(default, borrow)]
        name: Cow<'a, str>,
        #[serde(default, borrow)]
        arguments: Cow<'a, str>,
    },
    Reasoning {
        #[serde(default, borrow)]
        summary: Vec<SummaryIn<'a>>,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum PartIn<'a> {
    OutputText {
        #[serde(default, borrow)]
        text: Cow<'a, str>,
    },
    Refusal {
        #[serde(default, borrow)]
        refusal: Cow<'a, str>,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct SummaryIn<'a> {
    #[serde(default, borrow)]
    text: Cow<'a, str>,
}

#[derive(Deserialize)]
struct UsageIn {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<CachedIn>,
}

#[derive(Deserialize)]
struct CachedIn {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl UsageIn {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: count(self.input_tokens),
            cached_input_tokens: count(self.input_tokens_details.as_ref().and_then(|d| d.cached_tokens)),
            output_tokens: count(self.output_tokens),
            // OpenAI caches on its own and bills no writes.
            cache_write_tokens: 0,
        }
    }
}

impl ResponseIn<'_> {
    /// A failed response's error.
    fn failure(&self) -> UpstreamError {
        failure(self.error.as_ref().map_or(&ErrorObject::default(), ErrorBody::object))
    }

    /// A finished response's usage and finish (`called`: it holds function calls).
    fn ending(&self, called: bool) -> Vec<Event> {
        let mut events: Vec<Event> = self.usage.iter().map(|u| Event::Usage(u.to_usage())).collect();
        let finish = match self.status.as_deref() {
            Some("incomplete") => match self.incomplete_details.as_ref().and_then(|d| d.reason.as_deref()) {
                Some("content_filter") => FinishReason::ContentFilter,
                _ => FinishReason::Length,
            },
            _ if called => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        events.push(Event::Finish(finish));
        events
    }
}

/// [`parse_response`], with the whole body first as a [`NativeEvent`] named `response`, relayed
/// as `relaying` says.
fn parse_response_relayed(body: &[u8], relaying: Relaying) -> Result<Vec<Event>, UpstreamError> {
    let events = parse_response(body)?;
    // On one line, as the door may write it as one SSE event.
    let data =
        serde_json::from_slice::<Value>(body).map(|v| v.to_string()).unwrap_or_default().into_bytes().into();
    Ok(Output::of(relaying, events)
        .behind(|output| Event::Native(NativeEvent { name: "response".into(), data, output })))
}

/// Every event of a whole Response object.
pub(in crate::adapter) fn parse_response(body: &[u8]) -> Result<Vec<Event>, UpstreamError> {
    let response: ResponseIn = http::whole(body)?;
    if response.status.as_deref() == Some("failed") {
        return Err(response.failure());
    }
    let no_output = || UpstreamError::new(ErrorClass::StreamBroken, None, "the response has no output");
    let mut events = Vec::new();
    let mut calls = 0;
    let text = |t: &Cow<str>| (!t.is_empty()).then(|| t.to_string());
    for item in response.output.as_ref().ok_or_else(no_output)? {
        match item {
            ItemIn::Message { content } => {
                for part in content {
                    let piece = match part {
                        PartIn::OutputText { text: t } => text(t),
                        PartIn::Refusal { refusal } => text(refusal),
                        PartIn::Other => None,
                    };
                    events.extend(piece.map(Event::TextDelta));
                }
            }
            ItemIn::FunctionCall { call_id, name, arguments } => {
                events.push(Event::ToolCallDelta {
                    index: calls,
                    id: text(call_id),
                    name: text(name),
                    arguments: arguments.to_string(),
                });
                calls += 1;
            }
            ItemIn::Reasoning { summary } => {
                events.extend(summary.iter().filter_map(|part| text(&part.text)).map(Event::ReasoningDelta));
            }
            ItemIn::Other => {}
        }
    }
    events.extend(response.ending(calls > 0));
    Ok(events)
}

/// Parser state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct ResponsesStream {
    /// Hand each event on raw, as an [`Event::Native`] (ahead of the events read from it, or
    /// alone).
    relaying: Relaying,
    /// A function call's output index → its canonical index, and whether its arguments came.
    calls: HashMap<u64, (u32, bool)>,
    /// The text parts that arrived in deltas.
    texted: HashSet<PartAt>,
    done: bool,
}

impl ResponsesStream {
    pub(crate) fn new(relaying: Relaying) -> ResponsesStream {
        ResponsesStream { relaying, ..ResponsesStream::default() }
    }
}

impl StreamParser for ResponsesStream {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let event: StreamEvent<'_> = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
        let relayed =
            self.relaying.is_on() && !matches!(event, StreamEvent::Error(_) | StreamEvent::Failed { .. });
        let mut output = Output::new(self.relaying);
        match event {
            StreamEvent::ItemAdded {
                output_index,
                item: ItemIn::FunctionCall { call_id, name, arguments },
            } => {
                let index = self.calls.len() as u32;
                self.calls.insert(output_index, (index, !arguments.is_empty()));
                output.push(|| Event::ToolCallDelta {
                    index,
                    id: Some(call_id.into_owned()),
                    name: Some(name.into_owned()),
                    arguments: arguments.into_owned(),
                });
            }
            StreamEvent::ArgumentsDelta { output_index, delta } => {
                if let (Some((index, came)), false) = (self.calls.get_mut(&output_index), delta.is_empty()) {
                    *came = true;
                    output.push(|| Event::ToolCallDelta {
                        index: *index,
                        id: None,
                        name: None,
                        arguments: delta.into_owned(),
                    });
                }
            }
            StreamEvent::ArgumentsDone { output_index, arguments } => {
                if let (Some((index, came @ false)), false) =
                    (self.calls.get_mut(&output_index), arguments.is_empty())
                {
                    *came = true;
                    output.push(|| Event::ToolCallDelta {
                        index: *index,
                        id: None,
                        name: None,
                        arguments: arguments.into_owned(),
                    });
                }
            }
            StreamEvent::TextDelta { at, delta } => {
                self.texted.insert(at);
                if !delta.is_empty() {
                    output.push(|| Event::TextDelta(delta.into_owned()));
                }
            }
            StreamEvent::TextDone { at, text } => {
                if self.texted.insert(at) && !text.is_empty() {
                    output.push(|| Event::TextDelta(text.into_owned()));
                }
            }
            StreamEvent::ReasoningDelta { delta } => {
                if !delta.is_empty() {
                    output.push(|| Event::ReasoningDelta(delta.into_owned()));
                }
            }
            StreamEvent::Ended { response } => {
                self.done = true;
                for event in response.ending(!self.calls.is_empty()) {
                    output.keep(event);
                }
            }
            StreamEvent::Failed { response } => return Err(response.failure()),
            StreamEvent::Error(error) => return Err(failure(error.object())),
            StreamEvent::ItemAdded { .. } | StreamEvent::Unknown => {}
        }
        if !relayed {
            return Ok(output.events());
        }
        let name = event_type(data);
        let data = bytes::Bytes::copy_from_slice(data.as_bytes());
        Ok(output.behind(|output| Event::Native(NativeEvent { name, data, output })))
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
