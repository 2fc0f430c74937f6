//! An Anthropic Messages request into the canonical request, keeping the client's body for
//! backends that speak Messages themselves. Every refusal names its field the way Anthropic
//! does (`messages.1.content.0.tool_use_id`), so a client mistake is a 400 the client can act
//! on, never a 5xx.
//!
//! What the canonical request cannot hold (thinking blocks of earlier turns, `cache_control`
//! marks, the `thinking` config, images inside tool results) stays in the kept body: it reaches
//! Anthropic and native nodes, and is left out when the request is translated for another
//! backend (the README lists it).

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::blocks::{invalid, read_message, system_text, WireMessage};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::wire;
use crate::canonical::shallow::{Part, Shallow};
use crate::canonical::{
    check_schema, ChatRequest, Dialect, Message, NativeRequest, Role, Schema, SchemaKind, Tool, ToolChoice,
};
use crate::serve::Headers;

/// The version Spillway assumes when the client sends no `anthropic-version`.
pub(crate) const DEFAULT_VERSION: &str = "2023-06-01";

/// The top-level fields the canonical request needs; content blocks are read by hand
/// (`blocks.rs`), so each refusal names its exact place.
#[derive(Debug, Deserialize)]
pub(crate) struct MessagesRequest {
    pub model: String,
    /// Required, but for a count ([`Asked::Count`]).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<u32>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub tools: Option<Vec<WireTool>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub thinking: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireTool {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Metadata {
    #[serde(default)]
    pub user_id: Option<String>,
}

/// A decoded request: its typed fields, and the body as the client wrote it, read as deep as a
/// native backend edits it (the system prompt, the conversation and the tools are read from
/// there, where they lie).
pub(crate) struct Decoded {
    pub model: String,
    pub request: MessagesRequest,
    pub body: Arc<Shallow>,
}

/// Why a body is read: to be answered, or counted (which needs no `max_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    Answer,
    Count,
}

/// Read the body: one JSON object with every field Anthropic requires.
pub fn decode(bytes: &Bytes, asked: Asked) -> Result<Decoded, ApiError> {
    let mut request: MessagesRequest = wire::decode_json(bytes, "a Messages request")?;
    match (request.max_tokens, asked) {
        (Some(_), _) => {}
        (None, Asked::Count) => request.max_tokens = Some(1),
        (None, Asked::Answer) => {
            return Err(ApiError::new(ErrorCode::MissingField, "`max_tokens` is required").param("max_tokens"))
        }
    }
    let body = wire::as_written(bytes, Dialect::AnthropicMessages)?;
    Ok(Decoded { model: request.model.clone(), request, body })
}

impl Decoded {
    /// The request's server tools (which only Anthropic runs): where each is, and its type.
    pub(crate) fn server_tools(&self) -> Vec<(String, String)> {
        server_tools(self.request.tools.as_deref().unwrap_or_default())
    }

    /// Whether the conversation holds thinking only Anthropic can read back (signed or
    /// redacted blocks of earlier turns).
    pub(crate) fn carries_anthropics_own(&self) -> bool {
        let messages = self.body.get("messages").and_then(|m| m.items()).into_iter().flatten();
        let blocks = messages.filter_map(|m| m.get("content")?.items()).flatten();
        blocks.into_iter().any(crate::canonical::anthropics_own)
    }

    pub(crate) fn wants_stream(&self) -> bool {
        self.request.stream.unwrap_or(false)
    }

    /// The canonical request, `max_tokens` capped at the task's `output_cap`, with the
    /// client's body and its `anthropic-*` headers kept for native backends.
    pub(crate) fn to_canonical(
        &self,
        headers: &dyn Headers,
        output_cap: Option<u32>,
    ) -> Result<ChatRequest, ApiError> {
        let r = &self.request;
        let bad = |param: &str, why: String| Err(ApiError::new(ErrorCode::InvalidValue, why).param(param));
        let max_tokens = r.max_tokens.unwrap_or(1);
        if max_tokens == 0 {
            return bad("max_tokens", "must be at least 1".into());
        }
        if r.messages.is_empty() {
            return bad("messages", "at least one message is required".into());
        }
        if let Some(t) = r.temperature.filter(|t| !(0.0..=1.0).contains(t)) {
            return bad("temperature", format!("{t} is outside 0 to 1"));
        }
        if let Some(p) = r.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return bad("top_p", format!("{p} is outside 0 to 1"));
        }
        check_thinking(r.thinking.as_ref(), max_tokens)?;
        let mut messages = Vec::new();
        // The system prompt, the conversation and the tool schemas are read where they lie in
        // the kept body: an agent's turn is tens of kilobytes of them.
        let member = |name: &str| self.body.get(name).filter(|v| !v.is_null());
        let items = |name: &str| member(name).and_then(|m| m.items()).into_iter().flatten();
        if let Some(system) = member("system") {
            let text = system_text(system)?;
            if !text.is_empty() {
                messages.push(Message::new(Role::System, text));
            }
        }
        let mut tool_uses = HashSet::new();
        for (i, (m, written)) in r.messages.iter().zip(items("messages")).enumerate() {
            let content = written.get("content").filter(|c| !c.is_null());
            read_message(i, m, content, &mut tool_uses, &mut messages)?;
        }
        let tools = tools(r.tools.as_deref().unwrap_or_default(), items("tools"))?;
        let tool_choice = r.tool_choice.as_ref().map(|c| tool_choice(c, &tools)).transpose()?;
        let mut kept = Vec::new();
        for name in ["anthropic-version", "anthropic-beta"] {
            if let Some(value) = headers.header(name) {
                // Visible ASCII, as HTTP header text is.
                let text = value.iter().all(|&b| b == b'\t' || (32..127).contains(&b));
                let value = std::str::from_utf8(value).ok().filter(|_| text).ok_or_else(|| {
                    ApiError::new(ErrorCode::InvalidValue, format!("header {name} is not text")).param(name)
                })?;
                kept.push((name, value.to_string()));
            }
        }
        if !kept.iter().any(|(name, _)| *name == "anthropic-version") {
            kept.push(("anthropic-version", DEFAULT_VERSION.to_string()));
        }
        Ok(ChatRequest {
            messages: messages.into(),
            max_tokens: Some(output_cap.map_or(max_tokens, |cap| max_tokens.min(cap))),
            temperature: r.temperature,
            top_p: r.top_p,
            top_k: r.top_k,
            user: r.metadata.as_ref().and_then(|m| m.user_id.clone()),
            stop: r.stop_sequences.clone().unwrap_or_default(),
            tools,
            tool_choice,
            stream: self.wants_stream(),
            relay: true,
            native: Some(NativeRequest {
                dialect: Dialect::AnthropicMessages,
                body: Arc::clone(&self.body),
                headers: kept,
            }),
            ..ChatRequest::default()
        })
    }
}

/// Custom tools only: a name used once and an object schema.
/// Anthropic's server tools (dated types such as `web_search_20250305`): they run inside
/// Anthropic, so they reach it as written and no other backend; any other unknown type is
/// refused.
const SERVER_TOOLS: [&str; 8] = [
    "web_search_",
    "web_fetch_",
    "bash_",
    "text_editor_",
    "code_execution_",
    "computer_",
    "memory_",
    "tool_search_tool_",
];

/// The request's server tools: where each is (`tools.{i}`) and its type.
pub(crate) fn server_tools(wire: &[WireTool]) -> Vec<(String, String)> {
    let server = |kind: &str| SERVER_TOOLS.iter().any(|p| kind.starts_with(p));
    let kinds = wire.iter().enumerate().filter_map(|(i, t)| Some((i, t.kind.as_deref()?)));
    kinds.filter(|(_, kind)| server(kind)).map(|(i, kind)| (format!("tools.{i}"), kind.to_string())).collect()
}

/// `wire`'s tools, each beside the tool as `written` in the kept body.
fn tools<'a>(wire: &[WireTool], written: impl Iterator<Item = Part<'a>>) -> Result<Vec<Tool>, ApiError> {
    let mut names = HashSet::new();
    let mut tools = Vec::new();
    let server = server_tools(wire);
    for (i, (t, written)) in wire.iter().zip(written).enumerate() {
        if server.iter().any(|(at, _)| *at == format!("tools.{i}")) {
            continue;
        }
        if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
            return Err(invalid(
                format!("tools.{i}.type"),
                format!("tool type `{kind}` is not supported; Spillway routes custom tools (a name and an input_schema) and Anthropic's server tools"),
            ));
        }
        if t.name.is_empty() || !names.insert(t.name.as_str()) {
            return Err(invalid(
                format!("tools.{i}.name"),
                format!("tool name `{}` is empty or used twice", t.name),
            ));
        }
        let schema = match written.get("input_schema") {
            Some(schema) if schema.is_object() => Schema::in_body(schema),
            _ => {
                return Err(invalid(format!("tools.{i}.input_schema"), "must be a JSON schema object".into()))
            }
        };
        check_schema(&schema, SchemaKind::Any)
            .map_err(|why| invalid(format!("tools.{i}.input_schema"), why))?;
        tools.push(Tool { name: t.name.clone(), description: t.description.clone(), parameters: schema });
    }
    Ok(tools)
}

/// `tool_choice`: `{type: auto | any | none}` or `{type: tool, name}` naming one of the tools.
fn tool_choice(value: &Value, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let kind = value.get("type").and_then(Value::as_str);
    match kind {
        Some("auto") => Ok(ToolChoice::Auto),
        Some("any") => Ok(ToolChoice::Required),
        Some("none") => Ok(ToolChoice::None),
        Some("tool") => {
            let name = value.get("name").and_then(Value::as_str).unwrap_or("");
            if tools.iter().any(|t| t.name == name) {
                Ok(ToolChoice::Function(name.to_string()))
            } else {
                Err(invalid(
                    "tool_choice.name".into(),
                    format!("tool_choice names `{name}`, which is not one of the tools"),
                ))
            }
        }
        _ => Err(invalid("tool_choice.type".into(), "must be one of auto, any, tool, none".into())),
    }
}

/// `thinking`: `{type: enabled, budget_tokens}` (at least 1024, below `max_tokens`),
/// `{type: disabled}` or `{type: adaptive}`.
fn check_thinking(thinking: Option<&Value>, max_tokens: u32) -> Result<(), ApiError> {
    let Some(thinking) = thinking else { return Ok(()) };
    match thinking.get("type").and_then(Value::as_str) {
        Some("disabled" | "adaptive") => Ok(()),
        Some("enabled") => match thinking.get("budget_tokens").and_then(Value::as_u64) {
            Some(b) if b >= 1024 && b < u64::from(max_tokens) => Ok(()),
            Some(b) => Err(invalid(
                "thinking.budget_tokens".into(),
                format!("{b} must be at least 1024 and less than max_tokens ({max_tokens})"),
            )),
            None => Err(invalid("thinking.budget_tokens".into(), "Field required".into())),
        },
        _ => Err(invalid("thinking.type".into(), "must be one of enabled, disabled, adaptive".into())),
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
