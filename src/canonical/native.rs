//! A client's request and answer in its own dialect, kept beside the canonical ones so a
//! backend that speaks that dialect gets the request as the client wrote it (thinking blocks,
//! `cache_control` marks, beta fields and all) and the client gets that backend's events as
//! it wrote them (signatures, citations), while routing, dispatch and the ledger still read
//! the canonical request and events.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

/// A wire dialect a client may speak that some backends also speak natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Anthropic Messages (`POST /v1/messages`).
    AnthropicMessages,
}

/// The client's request body in its dialect, and the headers a backend of that dialect gets.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeRequest {
    pub dialect: Dialect,
    /// The body as decoded: `model`, `max_tokens` and `stream` are rewritten per call.
    pub body: Arc<Map<String, Value>>,
    /// The dialect's own headers the client sent (`anthropic-version`, `anthropic-beta`).
    pub headers: Vec<(&'static str, String)>,
}

impl NativeRequest {
    /// The value of one of the dialect's headers the client sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// Put `text` before the system prompt (a task's prompt variant for one backend).
    pub fn prepend_system(&mut self, text: &str) {
        let body = Arc::make_mut(&mut self.body);
        let system = match body.remove("system") {
            None | Some(Value::Null) => Value::String(text.to_string()),
            Some(Value::String(s)) if s.is_empty() => Value::String(text.to_string()),
            Some(Value::String(s)) => Value::String(format!("{text}\n\n{s}")),
            Some(Value::Array(mut blocks)) => {
                blocks.insert(0, serde_json::json!({"type": "text", "text": text}));
                Value::Array(blocks)
            }
            Some(other) => other,
        };
        body.insert("system".into(), system);
    }
}

/// One upstream event in the client's dialect: for a stream, one SSE event (its name and its
/// data); for a whole answer, the answer's body under the name `message`.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeEvent {
    pub name: Box<str>,
    pub data: Bytes,
}
