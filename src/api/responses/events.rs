//! Canonical events → the Responses answer: the SSE events of a streamed answer and the
//! Response object, built by one state machine so that the stream and the whole answer say
//! the same thing.
//!
//! The sequence is OpenAI's: `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added`, its content (`response.content_part.added`,
//! `response.output_text.delta`…, `response.output_text.done`, `response.content_part.done`
//! for a message; `response.function_call_arguments.delta`…, `…done` for a function call),
//! `response.output_item.done`; then `response.completed`, or `response.incomplete` when the
//! answer was cut at `max_output_tokens`. Every event carries `type` and a `sequence_number`
//! counting from 0. An upstream failure ends the stream with `response.failed` and an
//! `error` event. Tool calls are taken to stream one after another, as every adapter yields
//! them. The encoder only writes bytes; it never waits or decides anything.

use serde::Serialize;
use serde_json::{json, Value};

use super::object::{self, output_text, Head, Open};
use crate::api::error::ApiError;
use crate::canonical::{Event, FinishReason, Usage};

/// One answer being encoded.
pub(crate) struct Encoder {
    head: Head,
    /// Write SSE events (a streamed answer); otherwise only the Response object is built.
    streaming: bool,
    frames: Vec<u8>,
    sequence: u64,
    /// Finished output items.
    output: Vec<Value>,
    open: Option<Open>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

/// `response.output_text.delta`, written without a JSON tree: the most frequent event.
#[derive(Serialize)]
struct TextDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sequence_number: u64,
    item_id: &'a str,
    output_index: usize,
    content_index: u32,
    delta: &'a str,
    logprobs: [u8; 0],
}

/// `response.function_call_arguments.delta`.
#[derive(Serialize)]
struct ArgumentsDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sequence_number: u64,
    item_id: &'a str,
    output_index: usize,
    delta: &'a str,
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>())
}

impl Encoder {
    pub fn new(head: Head, streaming: bool) -> Encoder {
        Encoder {
            head,
            streaming,
            frames: Vec::new(),
            sequence: 0,
            output: Vec::new(),
            open: None,
            usage: None,
            finish: None,
        }
    }

    /// The task's name, the answer's model.
    pub fn model(&self) -> &str {
        &self.head.model
    }

    /// How many SSE bytes are waiting to be taken.
    pub fn pending(&self) -> usize {
        self.frames.len()
    }

    /// The SSE bytes written since the last call.
    pub(crate) fn take_frames(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.frames)
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) {
        for kind in ["response.created", "response.in_progress"] {
            let response = self.response("in_progress", None);
            self.event(kind, json!({"response": response}));
        }
    }

    /// One canonical event.
    pub fn add(&mut self, event: &Event) {
        match event {
            Event::TextDelta(delta) => self.text(delta),
            Event::ToolCallDelta { index, id, name, arguments } => {
                self.call(*index, id.as_deref(), name.as_deref(), arguments)
            }
            Event::Usage(usage) => self.usage = Some(*usage),
            Event::Finish(reason) => self.finish = Some(*reason),
            // Reasoning is not written (no reasoning items); relayed and native events are
            // for chat and Messages clients.
            Event::ReasoningDelta(_) | Event::Relay(_) | Event::Native(_) | Event::Embeddings(_) => {}
        }
    }

    fn text(&mut self, delta: &str) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close();
            let open = Open::Message { id: new_id("msg"), text: String::new() };
            let mut item = open.item("in_progress", &self.head.tools);
            item["content"] = json!([]);
            let at = json!({"item_id": item["id"], "output_index": self.output.len(), "content_index": 0});
            self.item_added(item);
            self.event("response.content_part.added", with(&at, json!({"part": output_text("")})));
            self.open = Some(open);
        }
        let output_index = self.output.len();
        if let Some(Open::Message { id, text }) = &mut self.open {
            text.push_str(delta);
            if self.streaming {
                let event = TextDelta {
                    kind: "response.output_text.delta",
                    sequence_number: self.sequence,
                    item_id: id,
                    output_index,
                    content_index: 0,
                    delta,
                    logprobs: [],
                };
                write_frame(&mut self.frames, event.kind, &event);
            }
            self.sequence += 1;
        }
    }

    fn call(&mut self, index: u32, call_id: Option<&str>, name: Option<&str>, delta: &str) {
        if !matches!(&self.open, Some(Open::Call { index: open, .. }) if *open == index) {
            self.close();
            let open = Open::Call {
                index,
                id: new_id("fc"),
                call_id: call_id.map_or_else(|| new_id("call"), str::to_string),
                name: name.unwrap_or_default().to_string(),
                arguments: String::new(),
            };
            self.item_added(open.item("in_progress", &self.head.tools));
            self.open = Some(open);
        } else if let (Some(Open::Call { name: so_far, .. }), Some(more)) = (&mut self.open, name) {
            so_far.push_str(more);
        }
        let output_index = self.output.len();
        // A custom tool's input is written whole when the call ends.
        let whole = self.open.as_ref().is_some_and(|o| o.is_custom(&self.head.tools));
        if let Some(Open::Call { id, arguments, .. }) = &mut self.open {
            if delta.is_empty() {
                return;
            }
            arguments.push_str(delta);
            if self.streaming && !whole {
                let event = ArgumentsDelta {
                    kind: "response.function_call_arguments.delta",
                    sequence_number: self.sequence,
                    item_id: id,
                    output_index,
                    delta,
                };
                write_frame(&mut self.frames, event.kind, &event);
            }
            self.sequence += 1;
        }
    }

    fn item_added(&mut self, item: Value) {
        let output_index = self.output.len();
        self.event("response.output_item.added", json!({"output_index": output_index, "item": item}));
    }

    /// Finish the open item: its `…done` events, then `response.output_item.done`.
    fn close(&mut self) {
        let Some(open) = self.open.take() else { return };
        let output_index = self.output.len();
        let item = open.item(self.item_status(), &self.head.tools);
        match &open {
            Open::Call { id, .. } if open.is_custom(&self.head.tools) => self.event(
                "response.custom_tool_call_input.done",
                json!({"item_id": id, "output_index": output_index, "input": item["input"]}),
            ),
            Open::Message { id, text } => {
                let at = json!({"item_id": id, "output_index": output_index, "content_index": 0});
                self.event("response.output_text.done", with(&at, json!({"text": text, "logprobs": []})));
                self.event("response.content_part.done", with(&at, json!({"part": output_text(text)})));
            }
            Open::Call { id, name, arguments, .. } => self.event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": output_index, "name": name, "arguments": arguments}),
            ),
        }
        self.event("response.output_item.done", json!({"output_index": output_index, "item": item}));
        self.output.push(item);
    }

    /// Items end `incomplete` when the answer was cut short, else `completed`.
    fn item_status(&self) -> &'static str {
        match self.finish {
            Some(FinishReason::Length | FinishReason::ContentFilter) => "incomplete",
            _ => "completed",
        }
    }

    /// The answer ended: close the open item and write `response.completed` (or
    /// `response.incomplete`). Returns the final Response object.
    pub fn finish(&mut self) -> Value {
        self.close();
        let (status, kind, reason) = match self.finish {
            Some(FinishReason::Length) => ("incomplete", "response.incomplete", Some("max_output_tokens")),
            Some(FinishReason::ContentFilter) => {
                ("incomplete", "response.incomplete", Some("content_filter"))
            }
            _ => ("completed", "response.completed", None),
        };
        let mut response = self.response(status, None);
        if let Some(reason) = reason {
            response["incomplete_details"] = json!({"reason": reason});
        }
        self.event(kind, json!({"response": response}));
        response
    }

    /// The upstream broke after the answer started: `response.failed` (with what was written so
    /// far, the open item `incomplete`), then an `error` event.
    pub fn fail(&mut self, error: &ApiError) {
        if let Some(open) = self.open.take() {
            self.output.push(open.item("incomplete", &self.head.tools));
        }
        let body = error.body();
        let code = body["error"]["code"].clone();
        let message = body["error"]["message"].clone();
        // OpenAI's own codes for a failed response, so typed clients can read it.
        let failed_code = if error.status == 429 { "rate_limit_exceeded" } else { "server_error" };
        let response = self.response("failed", Some(json!({"code": failed_code, "message": message})));
        self.event("response.failed", json!({"response": response}));
        self.event("error", json!({"code": code, "message": message, "param": body["error"]["param"]}));
    }

    /// The Response object in its present state (usage once the answer has ended).
    fn response(&self, status: &str, error: Option<Value>) -> Value {
        let usage = self.usage.filter(|_| status != "in_progress");
        object::response(&self.head, status, &self.output, usage.as_ref(), error)
    }

    /// Write one event (`type` and `sequence_number` added) when streaming; count it always.
    fn event(&mut self, kind: &str, mut body: Value) {
        if self.streaming {
            body["type"] = json!(kind);
            body["sequence_number"] = json!(self.sequence);
            write_frame(&mut self.frames, kind, &body);
        }
        self.sequence += 1;
    }
}

/// `base`'s members with `more`'s added.
fn with(base: &Value, more: Value) -> Value {
    let mut merged = base.clone();
    if let (Value::Object(merged), Value::Object(more)) = (&mut merged, more) {
        merged.extend(more);
    }
    merged
}

fn write_frame(out: &mut Vec<u8>, kind: &str, body: &impl Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // A value of strings and numbers always serialises.
    let _ = serde_json::to_writer(&mut *out, body);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
