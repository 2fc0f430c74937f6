//! A non-streamed Messages answer: the `message` object Anthropic returns. From a backend that
//! speaks Messages itself it is that backend's own message (whole, or put together from its
//! stream when dispatch streamed the call, as Anthropic's SDKs put one together), with the
//! model the client asked for; from any other backend it is built from the canonical events.

use serde_json::{json, Value};

use crate::canonical::{Event, FinishReason, NativeEvent, Usage};

/// Anthropic's `stop_reason` for a canonical finish.
pub fn stop_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter => "refusal",
    }
}

/// The answer being read, event by event.
#[derive(Default)]
pub struct Answer {
    /// Translated: the content blocks so far (tool inputs as JSON text until the end).
    blocks: Vec<Value>,
    tools: Vec<(u32, usize)>,
    usage: Usage,
    finish: Option<FinishReason>,
    /// Relayed: the backend's own message.
    native: Option<Value>,
}

impl Answer {
    pub fn add(&mut self, event: Event) {
        match event {
            Event::Native(native) => self.add_native(&native),
            _ if self.native.is_some() => {}
            Event::ReasoningDelta(text) => self.append("thinking", "thinking", &text),
            Event::TextDelta(text) => self.append("text", "text", &text),
            Event::ToolCallDelta { index, id, name, arguments } => {
                let at = match self.tools.iter().find(|(i, _)| *i == index) {
                    Some(&(_, at)) if id.is_none() => at,
                    _ => {
                        self.blocks.push(json!({"type": "tool_use", "id": id.unwrap_or_default(),
                                                "name": name.unwrap_or_default(), "input": ""}));
                        self.tools.push((index, self.blocks.len() - 1));
                        self.blocks.len() - 1
                    }
                };
                push_str(&mut self.blocks[at]["input"], &arguments);
            }
            Event::Usage(usage) => self.usage = usage,
            Event::Finish(finish) => self.finish = Some(finish),
            Event::Relay(_) | Event::Embeddings(_) => {}
        }
    }

    /// Append to the last block if it is of `kind`, else start one.
    fn append(&mut self, kind: &str, field: &str, text: &str) {
        match self.blocks.last_mut().filter(|b| b["type"] == kind) {
            Some(block) => push_str(&mut block[field], text),
            None => self.blocks.push(json!({"type": kind, field: text})),
        }
    }

    /// A relayed whole message, or one event of a relayed stream folded into the message.
    fn add_native(&mut self, event: &NativeEvent) {
        let Ok(data) = serde_json::from_slice::<Value>(&event.data) else { return };
        match &*event.name {
            "message" => self.native = Some(data),
            "message_start" => self.native = data.get("message").cloned(),
            "content_block_start" => {
                if let (Some(content), Some(block)) = (self.content(), data.get("content_block")) {
                    content.push(block.clone());
                }
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap_or(0) as usize;
                if let Some(block) = self.content().and_then(|c| c.get_mut(index)) {
                    apply_delta(block, &data["delta"]);
                }
            }
            "content_block_stop" => {
                let index = data["index"].as_u64().unwrap_or(0) as usize;
                if let Some(block) = self.content().and_then(|c| c.get_mut(index)) {
                    if let Some(Value::String(partial)) = block.get("partial_json").cloned() {
                        block["input"] = serde_json::from_str(&partial).unwrap_or_else(|_| json!({}));
                        block.as_object_mut().map(|b| b.remove("partial_json"));
                    }
                }
            }
            "message_delta" => {
                if let Some(message) = self.native.as_mut().and_then(Value::as_object_mut) {
                    if let Some(delta) = data.get("delta").and_then(Value::as_object) {
                        message.extend(delta.clone());
                    }
                    if let Some(Value::Object(usage)) = data.get("usage") {
                        let into = message.entry("usage").or_insert_with(|| json!({}));
                        if let Some(into) = into.as_object_mut() {
                            into.extend(usage.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn content(&mut self) -> Option<&mut Vec<Value>> {
        self.native.as_mut()?.get_mut("content")?.as_array_mut()
    }

    /// The `message` object, under `id` and `model`.
    pub(crate) fn into_json(mut self, id: &str, model: &str) -> Value {
        if let Some(mut native) = self.native.take() {
            native["model"] = json!(model);
            return native;
        }
        for &(_, at) in &self.tools {
            let text = self.blocks[at]["input"].as_str().unwrap_or("").to_string();
            self.blocks[at]["input"] = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
        }
        json!({
            "id": id, "type": "message", "role": "assistant", "model": model, "content": self.blocks,
            "stop_reason": stop_reason(self.finish.unwrap_or(FinishReason::Stop)), "stop_sequence": null,
            "usage": usage_json(&self.usage),
        })
    }
}

/// Canonical usage in Messages' words, where `input_tokens` leaves out the prompt tokens
/// read from the cache and written to it.
pub(super) fn usage_json(usage: &Usage) -> Value {
    json!({"input_tokens": usage.uncached_input_tokens(), "cache_read_input_tokens": usage.cached_input_tokens,
           "cache_creation_input_tokens": usage.cache_write_tokens, "output_tokens": usage.output_tokens})
}

fn push_str(value: &mut Value, text: &str) {
    if let Value::String(s) = value {
        s.push_str(text);
    }
}

/// One streamed delta applied to its block, as Anthropic's SDKs apply it.
fn apply_delta(block: &mut Value, delta: &Value) {
    let Some(block) = block.as_object_mut() else { return };
    let (field, piece) = match delta.get("type").and_then(Value::as_str) {
        Some("text_delta") => ("text", "text"),
        Some("thinking_delta") => ("thinking", "thinking"),
        Some("signature_delta") => ("signature", "signature"),
        Some("input_json_delta") => ("partial_json", "partial_json"),
        Some("citations_delta") => {
            let citations = block.entry("citations").or_insert_with(|| json!([]));
            if let (Some(list), Some(citation)) = (citations.as_array_mut(), delta.get("citation")) {
                list.push(citation.clone());
            }
            return;
        }
        _ => return,
    };
    let piece = delta.get(piece).and_then(Value::as_str).unwrap_or("");
    push_str(block.entry(field).or_insert_with(|| json!("")), piece);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(name: &str, data: Value) -> Event {
        Event::Native(NativeEvent {
            name: name.to_string().into(),
            data: serde_json::to_vec(&data).unwrap().into(),
            output: false,
        })
    }

    #[test]
    fn translated_events_become_a_message() {
        let mut answer = Answer::default();
        for event in [
            Event::ReasoningDelta("think ".into()),
            Event::ReasoningDelta("more".into()),
            Event::TextDelta("Hel".into()),
            Event::TextDelta("lo".into()),
            Event::ToolCallDelta {
                index: 0,
                id: Some("toolu_1".into()),
                name: Some("get".into()),
                arguments: "{\"a\"".into(),
            },
            Event::ToolCallDelta { index: 0, id: None, name: None, arguments: ":1}".into() },
            Event::Usage(Usage {
                input_tokens: 10,
                cached_input_tokens: 4,
                output_tokens: 3,
                cache_write_tokens: 2,
            }),
            Event::Finish(FinishReason::ToolCalls),
        ] {
            answer.add(event);
        }
        let message = answer.into_json("msg_1", "claude-sonnet-4-6");
        assert_eq!(message["model"], "claude-sonnet-4-6");
        assert_eq!(message["content"][0], json!({"type": "thinking", "thinking": "think more"}));
        assert_eq!(message["content"][1], json!({"type": "text", "text": "Hello"}));
        assert_eq!(
            message["content"][2],
            json!({"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"a": 1}})
        );
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(message["usage"]["input_tokens"], 4);
        assert_eq!(message["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(message["usage"]["cache_creation_input_tokens"], 2);
    }

    #[test]
    fn a_relayed_stream_is_folded_into_the_backends_own_message() {
        let mut answer = Answer::default();
        for event in [
            native(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_up", "type": "message",
                "role": "assistant", "model": "claude-x", "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            ),
            native(
                "content_block_start",
                json!({"index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            ),
            native(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
            ),
            native(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}}),
            ),
            native(
                "content_block_start",
                json!({"index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
            ),
            native(
                "content_block_delta",
                json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"x\": 2}"}}),
            ),
            native("content_block_stop", json!({"index": 1})),
            Event::TextDelta("ignored: the relay is the answer".into()),
            native(
                "message_delta",
                json!({"delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
            ),
        ] {
            answer.add(event);
        }
        let message = answer.into_json("msg_ours", "coder");
        assert_eq!(message["id"], "msg_up");
        assert_eq!(message["model"], "coder");
        assert_eq!(
            message["content"][0],
            json!({"type": "thinking", "thinking": "hmm", "signature": "sig=="})
        );
        assert_eq!(message["content"][1]["input"], json!({"x": 2}));
        assert_eq!(message["content"].as_array().unwrap().len(), 2);
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(message["usage"], json!({"input_tokens": 5, "output_tokens": 9}));
    }
}
