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

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::api::error::{ApiError, ErrorCode};
use crate::api::wire;
use crate::canonical::{
    compile_schema, ChatRequest, Dialect, Image, Message, NativeRequest, Role, Tool, ToolCall, ToolChoice,
};

/// The version Spillway assumes when the client sends no `anthropic-version`.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// The top-level fields the canonical request needs; blocks are read by hand below.
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: u32,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub system: Option<Value>,
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
pub struct WireMessage {
    pub role: WireRole,
    pub content: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireRole {
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
pub struct WireTool {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub input_schema: Value,
}

#[derive(Debug, Deserialize)]
pub struct Metadata {
    #[serde(default)]
    pub user_id: Option<String>,
}

/// A decoded request: the canonical form, the kept body, and whether the client streams.
pub struct Decoded {
    pub model: String,
    pub request: MessagesRequest,
    pub body: Arc<Map<String, Value>>,
}

/// Parse the body: one JSON object with every field Anthropic requires.
pub fn decode(bytes: &[u8]) -> Result<Decoded, ApiError> {
    let body: Map<String, Value> = wire::decode_json(bytes, "a Messages request")?;
    let request: MessagesRequest = wire::decode_value(&Value::Object(body.clone()))?;
    Ok(Decoded { model: request.model.clone(), request, body: Arc::new(body) })
}

impl Decoded {
    pub fn wants_stream(&self) -> bool {
        self.request.stream.unwrap_or(false)
    }

    /// The canonical request, `max_tokens` capped at the task's `output_cap`, with the
    /// client's body and its `anthropic-*` headers kept for native backends.
    pub fn to_canonical(
        &self,
        headers: &HeaderMap,
        output_cap: Option<u32>,
    ) -> Result<ChatRequest, ApiError> {
        let r = &self.request;
        let bad = |param: &str, why: String| Err(ApiError::new(ErrorCode::InvalidValue, why).param(param));
        if r.max_tokens == 0 {
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
        check_thinking(r.thinking.as_ref(), r.max_tokens)?;
        let mut messages = Vec::new();
        if let Some(system) = &r.system {
            let text = system_text(system)?;
            if !text.is_empty() {
                messages.push(Message::new(Role::System, text));
            }
        }
        let mut tool_uses = HashSet::new();
        for (i, m) in r.messages.iter().enumerate() {
            read_message(i, m, &mut tool_uses, &mut messages)?;
        }
        let tools = tools(r.tools.as_deref().unwrap_or_default())?;
        let tool_choice = r.tool_choice.as_ref().map(|c| tool_choice(c, &tools)).transpose()?;
        let mut kept = Vec::new();
        for name in ["anthropic-version", "anthropic-beta"] {
            if let Some(value) = headers.get(name) {
                let value = value.to_str().map_err(|_| {
                    ApiError::new(ErrorCode::InvalidValue, format!("header {name} is not text")).param(name)
                })?;
                kept.push((name, value.to_string()));
            }
        }
        if !kept.iter().any(|(name, _)| *name == "anthropic-version") {
            kept.push(("anthropic-version", DEFAULT_VERSION.to_string()));
        }
        Ok(ChatRequest {
            messages,
            max_tokens: Some(output_cap.map_or(r.max_tokens, |cap| r.max_tokens.min(cap))),
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

/// `system`: a string, or a list of text blocks.
fn system_text(system: &Value) -> Result<String, ApiError> {
    match system {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for (j, block) in blocks.iter().enumerate() {
                match (block_type(block), block.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(text)) => parts.push(text),
                    _ => {
                        return Err(invalid(
                            format!("system.{j}"),
                            "system blocks must be text blocks".into(),
                        ))
                    }
                }
            }
            Ok(parts.join("\n\n"))
        }
        _ => Err(invalid("system".into(), "must be a string or a list of text blocks".into())),
    }
}

fn invalid(param: String, why: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidValue, why).param(param)
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

/// One message into canonical messages: a user message's tool results become tool messages
/// (ahead of its text, as chat formats want them right after the calls), an assistant
/// message's `tool_use` blocks its tool calls; thinking blocks are kept only in the body.
fn read_message(
    i: usize,
    m: &WireMessage,
    tool_uses: &mut HashSet<String>,
    out: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let role = match m.role {
        WireRole::User => Role::User,
        WireRole::Assistant => Role::Assistant,
    };
    let blocks = match &m.content {
        Value::String(text) => {
            out.push(Message::new(role, text.clone()));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => {
            return Err(invalid(
                format!("messages.{i}.content"),
                "must be a string or a list of content blocks".into(),
            ))
        }
    };
    let mut message = Message::new(role, String::new());
    let mut texts = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = |field: &str| format!("messages.{i}.content.{j}{field}");
        let field = |name: &str| block.get(name).and_then(Value::as_str);
        let kind =
            block_type(block).ok_or_else(|| invalid(at(".type"), "a content block needs a `type`".into()))?;
        match (kind, role) {
            ("text", _) => texts.push(field("text").ok_or_else(|| invalid(at(".text"), "Field required".into()))?),
            ("image", Role::User) => message.images.push(image(block).map_err(|why| invalid(at(".source"), why))?),
            ("tool_use", Role::Assistant) => {
                let id = field("id").ok_or_else(|| invalid(at(".id"), "Field required".into()))?;
                let name = field("name").ok_or_else(|| invalid(at(".name"), "Field required".into()))?;
                let input = block.get("input").filter(|v| v.is_object()).ok_or_else(|| {
                    invalid(at(".input"), "must be an object".into())
                })?;
                tool_uses.insert(id.to_string());
                message.tool_calls.push(ToolCall { id: id.into(), name: name.into(), arguments: input.to_string() });
            }
            ("tool_result", Role::User) => {
                let id = field("tool_use_id")
                    .ok_or_else(|| invalid(at(".tool_use_id"), "Field required".into()))?;
                if !tool_uses.contains(id) {
                    return Err(invalid(
                        at(".tool_use_id"),
                        format!("unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in an earlier message."),
                    ));
                }
                let mut result = Message::new(Role::Tool, result_text(block.get("content")));
                if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                    result.content = format!("Error: {}", result.content);
                }
                result.tool_call_id = Some(id.to_string());
                out.push(result);
            }
            ("thinking" | "redacted_thinking", Role::Assistant) => {}
            ("image" | "tool_result", Role::Assistant) | ("tool_use" | "thinking" | "redacted_thinking", Role::User) => {
                let whose = if role == Role::User { "user" } else { "assistant" };
                return Err(invalid(at(".type"), format!("`{kind}` blocks are not allowed in {whose} messages")));
            }
            (other, _) => {
                return Err(invalid(
                    at(".type"),
                    format!("content block type `{other}` is not supported; Spillway takes text, image, tool_use, tool_result, thinking and redacted_thinking blocks"),
                ))
            }
        }
    }
    message.content = texts.join("\n\n");
    if !message.content.is_empty() || !message.images.is_empty() || !message.tool_calls.is_empty() {
        out.push(message);
    }
    Ok(())
}

/// A tool result's text: a string, or its text blocks joined (images in results are kept only
/// in the body).
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| block_type(b) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

/// An image block's source: `base64` (as a `data:` URL) or `url`.
fn image(block: &Value) -> Result<Image, String> {
    let source = block.get("source").ok_or("source: Field required")?;
    let get = |name: &str| source.get(name).and_then(Value::as_str);
    match get("type") {
        Some("base64") => {
            let media_type = get("media_type").ok_or("source.media_type: Field required")?;
            let data = get("data").ok_or("source.data: Field required")?;
            Ok(Image { url: format!("data:{media_type};base64,{data}"), detail: None })
        }
        Some("url") => {
            Ok(Image { url: get("url").ok_or("source.url: Field required")?.to_string(), detail: None })
        }
        _ => Err("source.type: must be `base64` or `url`".into()),
    }
}

/// Custom tools only: a name used once and an object schema.
fn tools(wire: &[WireTool]) -> Result<Vec<Tool>, ApiError> {
    let mut names = HashSet::new();
    let mut tools = Vec::new();
    for (i, t) in wire.iter().enumerate() {
        if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
            return Err(invalid(
                format!("tools.{i}.type"),
                format!("tool type `{kind}` is not supported; Spillway routes custom tools (a name and an input_schema) only"),
            ));
        }
        if t.name.is_empty() || !names.insert(t.name.as_str()) {
            return Err(invalid(
                format!("tools.{i}.name"),
                format!("tool name `{}` is empty or used twice", t.name),
            ));
        }
        if !t.input_schema.is_object() {
            return Err(invalid(format!("tools.{i}.input_schema"), "must be a JSON schema object".into()));
        }
        compile_schema(&t.input_schema).map_err(|why| invalid(format!("tools.{i}.input_schema"), why))?;
        tools.push(Tool {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.input_schema.clone(),
        });
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
