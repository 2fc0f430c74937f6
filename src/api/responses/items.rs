//! The items of a Responses `input` list → canonical messages, one item at a time.
//!
//! Items are read from JSON by hand, not by serde, so that each refusal names its own path
//! (`input[2].content[0].image_url`) and an unknown item `type` is answered as such rather
//! than as "no variant matched". What is read: `message` items (also without `type`), whose
//! content is a string or `input_text` / `output_text` / `input_image` parts; `function_call`
//! and `custom_tool_call` items, which become tool calls of an assistant message under the
//! backends' name of the tool ([`Toolset`]); `function_call_output` and
//! `custom_tool_call_output` items, which become tool messages and must answer a call made
//! earlier in the same `input` (or, for a request pinned to OpenAI, in its stored turns).
//! `additional_tools` items are the toolset's. `reasoning` items are dropped, and so are
//! `item_reference` items, which reach here only in a request pinned to OpenAI (elsewhere the
//! decoder has refused them): they stay in the body that goes there.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::refuse::{invalid, missing, type_name};
use super::toolset::{custom_arguments, Toolset};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::wire::{self, WireImageUrl};
use crate::canonical::{Message, Role, ToolCall};

/// The item types Spillway reads, for the refusal of any other.
const ITEM_TYPES: &str = "message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, additional_tools (reasoning items are dropped)";

/// Which calls a `function_call_output` may answer.
pub(super) enum Calls {
    /// Those made earlier in `input`: their ids so far.
    Seen(HashSet<String>),
    /// Any: the earlier turns are stored at OpenAI, where the request is pinned.
    Stored,
}

/// Add the item at `at` to `messages`.
pub(super) fn add(
    messages: &mut Vec<Message>,
    calls: &mut Calls,
    toolset: &Toolset,
    item: &Value,
    at: &str,
) -> Result<(), ApiError> {
    let Value::Object(item) = item else {
        return Err(wrong_type(at, "an object", item));
    };
    let kind = match item.get("type") {
        None if item.contains_key("role") => "message",
        None => return Err(missing(at, "type")),
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => return Err(wrong_type(&format!("{at}.type"), "a string", other)),
    };
    match kind {
        "message" => messages.push(message(item, at)?),
        "function_call" | "custom_tool_call" => {
            let call_id = text(item, at, "call_id")?;
            let namespace = item.get("namespace").and_then(Value::as_str);
            let arguments = match kind {
                "function_call" => text(item, at, "arguments")?.to_string(),
                _ => custom_arguments(text(item, at, "input")?),
            };
            let call = ToolCall {
                id: call_id.to_string(),
                name: toolset.backend_name(namespace, text(item, at, "name")?),
                arguments,
            };
            if let Calls::Seen(seen) = calls {
                seen.insert(call.id.clone());
            }
            // Calls that follow an assistant turn (text or other calls) belong to it.
            match messages.last_mut().filter(|m| m.role == Role::Assistant) {
                Some(turn) => turn.tool_calls.push(call),
                None => {
                    messages.push(Message { tool_calls: vec![call], ..Message::new(Role::Assistant, "") })
                }
            }
        }
        "function_call_output" | "custom_tool_call_output" => {
            let call_id = text(item, at, "call_id")?;
            if matches!(calls, Calls::Seen(seen) if !seen.contains(call_id)) {
                return Err(invalid(
                    &format!("{at}.call_id"),
                    format!("no earlier `function_call` item in `input` has call_id `{call_id}`"),
                ));
            }
            let output = match item.get("output") {
                None | Some(Value::Null) => return Err(missing(at, "output")),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => content(parts, Role::Tool, &format!("{at}.output"))?.0,
                Some(other) => {
                    return Err(wrong_type(&format!("{at}.output"), "a string or an array", other))
                }
            };
            messages.push(Message {
                tool_call_id: Some(call_id.to_string()),
                ..Message::new(Role::Tool, output)
            });
        }
        "reasoning" | "item_reference" | "additional_tools" => {}
        other => {
            return Err(invalid(
                &format!("{at}.type"),
                format!("input item type `{other}` is not supported; Spillway reads {ITEM_TYPES}"),
            ))
        }
    }
    Ok(())
}

/// A `message` item: `role` and `content` (a string or a list of parts).
fn message(item: &Map<String, Value>, at: &str) -> Result<Message, ApiError> {
    let role = match text(item, at, "role")? {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" | "developer" => Role::System,
        other => {
            return Err(invalid(
                &format!("{at}.role"),
                format!("role `{other}` is not one of user, assistant, system, developer"),
            ))
        }
    };
    let (content, images) = match item.get("content") {
        None | Some(Value::Null) => return Err(missing(at, "content")),
        Some(Value::String(s)) => (s.clone(), Vec::new()),
        Some(Value::Array(parts)) => content(parts, role, &format!("{at}.content"))?,
        Some(other) => {
            return Err(wrong_type(&format!("{at}.content"), "a string or an array of parts", other))
        }
    };
    Ok(Message { images, ..Message::new(role, content) })
}

/// Content parts: their text joined, and the images of a user message.
fn content(
    parts: &[Value],
    role: Role,
    at: &str,
) -> Result<(String, Vec<crate::canonical::Image>), ApiError> {
    let mut text_so_far = String::new();
    let mut images = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let Value::Object(part) = part else {
            return Err(wrong_type(&at, "an object", part));
        };
        match text(part, &at, "type")? {
            "input_text" | "output_text" => text_so_far.push_str(text(part, &at, "text")?),
            "input_image" if role != Role::User => {
                return Err(invalid(&at, "image parts are only allowed in user messages".into()))
            }
            "input_image" => {
                let url = match part.get("image_url") {
                    Some(Value::String(url)) => url,
                    None | Some(Value::Null) if part.contains_key("file_id") => {
                        return Err(invalid(
                            &format!("{at}.file_id"),
                            "images by `file_id` need OpenAI's file store; send `image_url` (an https address or a data URL)"
                                .into(),
                        ))
                    }
                    None | Some(Value::Null) => return Err(missing(&at, "image_url")),
                    Some(other) => return Err(wrong_type(&format!("{at}.image_url"), "a string", other)),
                };
                let detail = part.get("detail").and_then(Value::as_str).map(str::to_string);
                let image = wire::image_of(&WireImageUrl::Object { url: url.clone(), detail })
                    .map_err(|why| invalid(&format!("{at}.image_url"), why))?;
                images.push(image);
            }
            other => {
                return Err(invalid(
                    &format!("{at}.type"),
                    format!("content part type `{other}` is not supported; only input_text, output_text and input_image are"),
                ))
            }
        }
    }
    Ok((text_so_far, images))
}

/// The string member `key` of the object at `at`.
fn text<'v>(object: &'v Map<String, Value>, at: &str, key: &str) -> Result<&'v str, ApiError> {
    match object.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(missing(at, key)),
        Some(other) => Err(wrong_type(&format!("{at}.{key}"), "a string", other)),
    }
}

fn wrong_type(param: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::new(ErrorCode::InvalidType, format!("`{param}` must be {expected}, not {}", type_name(got)))
        .param(param)
}
