//! The SSE body of a streamed Messages answer, in Anthropic's event sequence:
//! `message_start` (with usage), `ping`, then per content block `content_block_start`,
//! `content_block_delta`… (`thinking_delta`, `text_delta`, `input_json_delta`),
//! `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.
//!
//! A backend that speaks Messages itself hands its events on as [`Event::Native`]; they are
//! written as they came (signatures, citations and all), with only `message_start`'s model
//! set to the one the client asked for. Any other backend's canonical events are written by
//! [`Blocks`]. A `ping` goes out whenever the upstream has been quiet for [`PING_EVERY`], and
//! an upstream failure after the first token ends the stream with an `error` event, never
//! with another model's text.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use serde_json::{json, Value};

use super::answer::stop_reason;
use crate::api::error::ApiError;
use crate::api::frames::{sse_frames, FrameWriter, Frames, Next};
use crate::canonical::EventStream;
use crate::canonical::{Event, FinishReason, NativeEvent, Usage};

/// How long the stream may be quiet before a `ping` keeps the connection alive.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(10);

/// What every event of one answer shares.
pub(crate) struct Head {
    pub id: String,
    /// The model the client asked for (a task, or one of its aliases).
    pub model: String,
    /// Spillway's estimate of the prompt, for `message_start` when the backend reports its
    /// count only at the end (the exact count follows in `message_delta`).
    pub estimated_input_tokens: u32,
}

fn write(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    serde_json::to_writer(&mut *out, data).expect("a JSON value serialises");
    out.extend_from_slice(b"\n\n");
}

/// The content blocks of a translated answer, opened and closed as the canonical events come.
#[derive(Default)]
pub(crate) struct Blocks {
    /// The open block's index and what it holds.
    open: Option<(u32, Open)>,
    next_index: u32,
    /// Canonical tool call index → its block's index.
    tools: Vec<(u32, u32)>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

#[derive(Clone, Copy, PartialEq)]
enum Open {
    Thinking,
    Text,
    Tool,
}

impl Blocks {
    pub fn start(&self, out: &mut Vec<u8>, head: &Head) {
        let usage = json!({"input_tokens": head.estimated_input_tokens, "output_tokens": 0,
                           "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
        let message = json!({"id": head.id, "type": "message", "role": "assistant", "model": head.model,
                             "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage});
        write(out, "message_start", &json!({"type": "message_start", "message": message}));
        ping(out);
    }

    /// Open a block of `kind` unless it is the open one.
    fn open(&mut self, out: &mut Vec<u8>, kind: Open, block: Value) -> u32 {
        if let Some((index, open)) = self.open {
            if open == kind && kind != Open::Tool {
                return index;
            }
            self.close(out);
        }
        let index = self.next_index;
        self.next_index += 1;
        write(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
        self.open = Some((index, kind));
        index
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            write(out, "content_block_stop", &json!({"type": "content_block_stop", "index": index}));
        }
    }

    fn delta(out: &mut Vec<u8>, index: u32, delta: Value) {
        write(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
    }

    pub fn event(&mut self, out: &mut Vec<u8>, event: Event) {
        match event {
            Event::ReasoningDelta(text) => {
                let index = self.open(out, Open::Thinking, json!({"type": "thinking", "thinking": ""}));
                Self::delta(out, index, json!({"type": "thinking_delta", "thinking": text}));
            }
            Event::TextDelta(text) => {
                let index = self.open(out, Open::Text, json!({"type": "text", "text": ""}));
                Self::delta(out, index, json!({"type": "text_delta", "text": text}));
            }
            Event::ToolCallDelta { index: call, id, name, arguments } => {
                let block = match self.tools.iter().find(|(c, _)| *c == call) {
                    Some(&(_, block)) if id.is_none() => block,
                    _ => {
                        let start = json!({"type": "tool_use", "id": id.unwrap_or_default(),
                                           "name": name.unwrap_or_default(), "input": {}});
                        let block = self.open(out, Open::Tool, start);
                        self.tools.push((call, block));
                        block
                    }
                };
                if !arguments.is_empty() {
                    Self::delta(out, block, json!({"type": "input_json_delta", "partial_json": arguments}));
                }
            }
            Event::Usage(usage) => self.usage = Some(usage),
            Event::Finish(reason) => self.finish = Some(reason),
            Event::Relay(_) | Event::Native(_) | Event::Embeddings(_) => {}
        }
    }

    /// Close the open block, then `message_delta` with the stop reason and the backend's
    /// counts, and `message_stop`.
    pub fn end(&mut self, out: &mut Vec<u8>) {
        self.close(out);
        let usage = self.usage.unwrap_or_default();
        let delta = json!({"stop_reason": stop_reason(self.finish.unwrap_or(FinishReason::Stop)), "stop_sequence": null});
        let usage = super::answer::usage_json(&usage);
        write(out, "message_delta", &json!({"type": "message_delta", "delta": delta, "usage": usage}));
        write(out, "message_stop", &json!({"type": "message_stop"}));
    }
}

fn ping(out: &mut Vec<u8>) {
    write(out, "ping", &json!({"type": "ping"}));
}

/// A relayed event as it came; `message_start` names the model the client asked for.
fn relay(out: &mut Vec<u8>, event: &NativeEvent, model: &str) {
    if &*event.name == "message_start" {
        if let Ok(mut start) = serde_json::from_slice::<Value>(&event.data) {
            if let Some(message) = start.get_mut("message").and_then(Value::as_object_mut) {
                message.insert("model".into(), json!(model));
            }
            write(out, "message_start", &start);
            return;
        }
    }
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(&event.data);
    out.extend_from_slice(b"\n\n");
}

/// Canonical (or relayed) events → the SSE response; `hold` (the admission permit) lives as
/// long as the body.
pub fn response<H: Send + Unpin + 'static>(
    events: EventStream,
    backend: String,
    head: Head,
    hold: H,
) -> Response {
    let mut response = Response::new(Body::from_stream(frames(events, backend, head, hold, PING_EVERY)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

pub(super) fn frames<H: Send + Unpin + 'static>(
    events: EventStream,
    backend: String,
    head: Head,
    hold: H,
    ping_every: Duration,
) -> Frames {
    let messages = MessagesFrames {
        backend,
        head,
        ping_every,
        blocks: Blocks::default(),
        relaying: false,
        out: Vec::new(),
    };
    sse_frames(events, messages, hold)
}

/// A streamed Messages answer's events, as [`sse_frames`] feeds them.
struct MessagesFrames {
    backend: String,
    head: Head,
    ping_every: Duration,
    blocks: Blocks,
    /// The backend's own events are being relayed: canonical events are not written again.
    relaying: bool,
    out: Vec<u8>,
}

impl FrameWriter for MessagesFrames {
    fn open(&mut self, first: &Next) {
        self.relaying = matches!(first, Some(Ok(Event::Native(_))));
        if !self.relaying {
            self.blocks.start(&mut self.out, &self.head);
        }
    }

    fn write(&mut self, next: Next) -> bool {
        let out = &mut self.out;
        match next {
            Some(Ok(Event::Native(event))) => relay(out, &event, &self.head.model),
            Some(Ok(_)) if self.relaying => {}
            Some(Ok(event)) => self.blocks.event(out, event),
            Some(Err(e)) => {
                write(out, "error", &super::error::body(&ApiError::from_upstream(&self.backend, &e)));
                return true;
            }
            None => {
                if !self.relaying {
                    self.blocks.end(out);
                }
                return true;
            }
        }
        false
    }

    fn pending(&self) -> usize {
        self.out.len()
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    fn quiet_limit(&self) -> Option<Duration> {
        Some(self.ping_every)
    }

    fn keep_alive(&mut self) {
        ping(&mut self.out);
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
