//! The content of a Messages request, block by block, into canonical messages: `system` (and
//! system messages inside the conversation, kept at their place), text, image, `tool_use` and
//! `tool_result` blocks (a result must answer an earlier
//! `tool_use`); thinking blocks are accepted and kept only in the client's body. Each refusal
//! names its place the way Anthropic does (`messages.1.content.0.tool_use_id`).

use std::borrow::Cow;
use std::collections::HashSet;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::api::error::{ApiError, ErrorCode};
use crate::canonical::shallow::Part;
use crate::canonical::{Image, Message, Role, ToolCall};

/// A message's shape: its role, and a `content` (read where it lies in the kept body, not
/// copied out of it).
#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    pub role: WireRole,
    #[serde(rename = "content")]
    _content: IgnoredAny,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireRole {
    User,
    Assistant,
    /// A system message inside the conversation (Claude Code sends one with the
    /// `mid-conversation-tool-changes` beta): text blocks, kept at their place.
    System,
}

/// `system`: a string, or a list of text blocks.
pub(super) fn system_text(system: Part<'_>) -> Result<String, ApiError> {
    if let Some(text) = system.str() {
        return Ok(text.into_owned());
    }
    let Some(blocks) = system.items() else {
        return Err(invalid("system".into(), "must be a string or a list of text blocks".into()));
    };
    let mut parts = Vec::new();
    for (j, block) in blocks.enumerate() {
        match (block_type(block).as_deref(), text(block, "text")) {
            (Some("text"), Some(text)) => parts.push(text),
            _ => return Err(invalid(format!("system.{j}"), "system blocks must be text blocks".into())),
        }
    }
    Ok(parts.join("\n\n"))
}

pub(super) fn invalid(param: String, why: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidValue, why).param(param)
}

fn block_type(block: Part<'_>) -> Option<Cow<'_, str>> {
    text(block, "type")
}

/// The text of the member `name` of `value`, if it is a string.
fn text<'a>(value: Part<'a>, name: &str) -> Option<Cow<'a, str>> {
    value.get(name)?.str()
}

/// One message into canonical messages: a user message's tool results become tool messages
/// (ahead of its text, as chat formats want them right after the calls), an assistant
/// message's `tool_use` blocks its tool calls; thinking blocks are kept only in the body.
pub(super) fn read_message(
    i: usize,
    m: &WireMessage,
    content: Option<Part<'_>>,
    tool_uses: &mut HashSet<String>,
    out: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let role = match m.role {
        WireRole::User => Role::User,
        WireRole::Assistant => Role::Assistant,
        WireRole::System => Role::System,
    };
    if let Some(text) = content.and_then(|c| c.str()) {
        out.push(Message::new(role, text.into_owned()));
        return Ok(());
    }
    let Some(blocks) = content.and_then(|c| c.items()) else {
        return Err(invalid(
            format!("messages.{i}.content"),
            "must be a string or a list of content blocks".into(),
        ));
    };
    let mut message = Message::new(role, String::new());
    let mut texts = Vec::new();
    for (j, block) in blocks.enumerate() {
        let at = |field: &str| format!("messages.{i}.content.{j}{field}");
        let field = |name: &str| text(block, name);
        let kind =
            block_type(block).ok_or_else(|| invalid(at(".type"), "a content block needs a `type`".into()))?;
        match (kind.as_ref(), role) {
            ("text", _) => texts.push(field("text").ok_or_else(|| invalid(at(".text"), "Field required".into()))?),
            (other, Role::System) => {
                return Err(invalid(at(".type"), format!("`{other}` blocks are not allowed in system messages")))
            }
            ("image", Role::User) => message.images.push(image(block).map_err(|why| invalid(at(".source"), why))?),
            ("tool_use", Role::Assistant) => {
                let id = field("id").ok_or_else(|| invalid(at(".id"), "Field required".into()))?;
                let name = field("name").ok_or_else(|| invalid(at(".name"), "Field required".into()))?;
                let input = block.get("input").filter(|v| v.is_object()).ok_or_else(|| {
                    invalid(at(".input"), "must be an object".into())
                })?;
                tool_uses.insert(id.to_string());
                let arguments = input.json().to_string();
                message.tool_calls.push(ToolCall { id: id.into(), name: name.into(), arguments });
            }
            ("tool_result", Role::User) => {
                let id = field("tool_use_id")
                    .ok_or_else(|| invalid(at(".tool_use_id"), "Field required".into()))?;
                if !tool_uses.contains(id.as_ref()) {
                    return Err(invalid(
                        at(".tool_use_id"),
                        format!("unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in an earlier message."),
                    ));
                }
                let mut result = Message::new(Role::Tool, result_text(block.get("content")));
                if block.get("is_error").is_some_and(|e| e.bytes() == b"true") {
                    result.content = format!("Error: {}", result.content);
                }
                result.tool_call_id = Some(id.into_owned());
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
fn result_text(content: Option<Part<'_>>) -> String {
    let Some(content) = content else { return String::new() };
    if let Some(text) = content.str() {
        return text.into_owned();
    }
    // The result's content is left whole in the body: its blocks are read here, for their text.
    let blocks: Vec<Value> = serde_json::from_str(content.json()).unwrap_or_default();
    let text = |b: &Value| b.get("text").and_then(Value::as_str).map(str::to_string);
    let texts: Vec<String> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(text)
        .collect();
    texts.join("\n\n")
}

/// An image block's source: `base64` (as a `data:` URL) or `url`.
fn image(block: Part<'_>) -> Result<Image, String> {
    let source = block.get("source").ok_or("source: Field required")?;
    let source: Value = serde_json::from_str(source.json()).unwrap_or_default();
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
