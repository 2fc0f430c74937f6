//! A client's request and answer in its own dialect, kept beside the canonical ones so a
//! backend that speaks that dialect gets the request as the client wrote it (thinking blocks,
//! `cache_control` marks, beta fields and all) and the client gets that backend's events as
//! it wrote them (signatures, citations), while routing, dispatch and the ledger still read
//! the canonical request and events.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::shallow::{Part, Shallow};

/// A wire dialect a client may speak that some backends also speak natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Anthropic Messages (`POST /v1/messages`).
    AnthropicMessages,
    /// OpenAI Responses (`POST /v1/responses`), kept only for a request that leans on state
    /// OpenAI stores (`previous_response_id`, `store: true`, …) and is pinned to OpenAI.
    OpenAiResponses,
}

/// The client's request body in its dialect, and the headers a backend of that dialect gets.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeRequest {
    pub dialect: Dialect,
    /// The body as the client sent it, read as deep as a backend of the dialect edits it
    /// ([`Dialect::depth`]): `model`, the output cap and `stream` are rewritten per call.
    pub body: Arc<Shallow>,
    /// The dialect's own headers the client sent (`anthropic-version`, `anthropic-beta`); none
    /// for Responses.
    pub headers: Vec<(&'static str, String)>,
}

impl NativeRequest {
    /// A body in `dialect` written from a tree (a test's, a fixture's), with no headers.
    pub fn of_tree(dialect: Dialect, body: &Value) -> NativeRequest {
        let bytes = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
        let body = Shallow::read(bytes, dialect.depth()).expect("a tree is written as one object");
        NativeRequest { dialect, body: Arc::new(body), headers: Vec::new() }
    }

    /// The value of one of the dialect's headers the client sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

impl Dialect {
    /// How deep a body of the dialect is read: a Messages body to each block of its system
    /// prompt and conversation and to each tool, which a native backend may edit one by one and
    /// the door reads; a Responses body to each part of each input item and each tool (in a
    /// namespace, or an `additional_tools` item), which the door reads.
    pub fn depth(self) -> super::shallow::Depth {
        match self {
            Dialect::AnthropicMessages => |at, key| match at {
                0 | 2 | 4 => true,
                1 => matches!(key, Some("system" | "messages" | "tools")),
                3 => key == Some("content"),
                _ => false,
            },
            Dialect::OpenAiResponses => |at, key| match key {
                _ if at == 0 => true,
                None => at <= 6,
                Some(key) => at < 6 && matches!(key, "input" | "tools" | "content" | "output"),
            },
        }
    }

    /// The system prompt `current` (as the client wrote it, if it did) with `text` before it.
    pub fn system_with(self, current: Option<Part<'_>>, text: &str) -> Value {
        let written = |part: Part<'_>| serde_json::to_value(part).unwrap_or_default();
        match prepended(current, text) {
            Prepended::Text(text) => Value::String(text.into_owned()),
            Prepended::Blocks(text, blocks) => {
                let first = serde_json::json!({"type": "text", "text": text});
                let blocks = blocks.items().into_iter().flatten().map(written);
                Value::Array(std::iter::once(first).chain(blocks).collect())
            }
            Prepended::AsWritten(other) => written(other),
        }
    }
}

/// A client's system prompt with a task's text before it, by the prompt's shape: a typed body
/// writes it from this as a `Value` does ([`Dialect::system_with`]).
#[derive(Debug, Clone)]
pub enum Prepended<'a> {
    /// The text alone (no prompt, or an empty one), or before the client's text.
    Text(std::borrow::Cow<'a, str>),
    /// A text block of the text before the client's blocks (a list as written).
    Blocks(&'a str, Part<'a>),
    /// A prompt of another shape, left as written.
    AsWritten(Part<'a>),
}

/// The system prompt `current` with `text` before it ([`Prepended`]).
pub fn prepended<'a>(current: Option<Part<'a>>, text: &'a str) -> Prepended<'a> {
    use std::borrow::Cow;
    let Some(current) = current.filter(|c| !c.is_null()) else { return Prepended::Text(Cow::Borrowed(text)) };
    if current.items().is_some() {
        return Prepended::Blocks(text, current);
    }
    match current.str() {
        Some(s) if s.is_empty() => Prepended::Text(Cow::Borrowed(text)),
        Some(s) => Prepended::Text(Cow::Owned(format!("{text}\n\n{s}"))),
        None => Prepended::AsWritten(current),
    }
}

/// One upstream event in the client's dialect: for a stream, one SSE event (its name and its
/// data); for a whole answer, the answer's body under the dialect's name for it (`message`
/// for Messages, `response` for Responses).
#[derive(Debug, Clone, PartialEq)]
pub struct NativeEvent {
    /// The event's name (its `type`), not allocated for the names a parser knows.
    pub name: std::borrow::Cow<'static, str>,
    pub data: Bytes,
    /// It held model output and stands for it ([`super::Relaying::Alone`]): no canonical
    /// event read from it follows.
    pub output: bool,
}

/// A block of a Messages conversation that only Anthropic can read back: thinking it signed,
/// or thinking it redacted.
pub fn anthropics_own(block: Part<'_>) -> bool {
    let signed = || block.get("signature").and_then(|s| s.str()).is_some_and(|s| !s.is_empty());
    match block.get("type").and_then(|t| t.str()).as_deref() {
        Some("redacted_thinking") => true,
        Some("thinking") => signed(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_variant_goes_before_the_clients_system_prompt_of_any_shape() {
        let with = |current: Option<Value>| {
            let body = NativeRequest::of_tree(Dialect::AnthropicMessages, &json!({ "system": current }));
            Dialect::AnthropicMessages.system_with(body.body.get("system"), "Use JSON.")
        };
        assert_eq!(with(Some(json!("be brief"))), "Use JSON.\n\nbe brief");
        assert_eq!(with(None), "Use JSON.");
        assert_eq!(with(Some(json!(""))), "Use JSON.");
        assert_eq!(
            with(Some(json!([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]))),
            json!([{"type": "text", "text": "Use JSON."},
                   {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(with(Some(json!(7))), json!(7), "another shape is left as written");
    }
}
