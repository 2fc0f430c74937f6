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

use std::borrow::Cow;
use std::collections::HashSet;

use super::refuse::{invalid, missing, type_name};
use super::toolset::{custom_arguments, Toolset};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::wire::{self, WireImageUrl};
use crate::canonical::shallow::Part;
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
    item: Part<'_>,
    at: &str,
) -> Result<(), ApiError> {
    if !item.is_object() {
        return Err(wrong_type(at, "an object", item));
    }
    let kind = match item.get("type") {
        None if item.get("role").is_some() => Cow::Borrowed("message"),
        None => return Err(missing(at, "type")),
        Some(kind) => kind.str().ok_or_else(|| wrong_type(&format!("{at}.type"), "a string", kind))?,
    };
    match kind.as_ref() {
        "message" => messages.push(message(item, at)?),
        "function_call" | "custom_tool_call" => {
            let call_id = text(item, at, "call_id")?;
            let namespace = item.get("namespace").and_then(|n| n.str());
            let arguments = match kind.as_ref() {
                "function_call" => text(item, at, "arguments")?.into_owned(),
                _ => custom_arguments(&text(item, at, "input")?),
            };
            let call = ToolCall {
                id: call_id.into_owned(),
                name: toolset.backend_name(namespace.as_deref(), &text(item, at, "name")?),
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
            if matches!(calls, Calls::Seen(seen) if !seen.contains(call_id.as_ref())) {
                return Err(invalid(
                    &format!("{at}.call_id"),
                    format!("no earlier `function_call` item in `input` has call_id `{call_id}`"),
                ));
            }
            let output = written(item, at, "output")?;
            let output = match (output.str(), output.items()) {
                (Some(text), _) => text.into_owned(),
                (None, Some(parts)) => content(parts, Role::Tool, &format!("{at}.output"))?.0,
                (None, None) => {
                    return Err(wrong_type(&format!("{at}.output"), "a string or an array", output))
                }
            };
            messages.push(Message {
                tool_call_id: Some(call_id.into_owned()),
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
fn message(item: Part<'_>, at: &str) -> Result<Message, ApiError> {
    let role = match text(item, at, "role")?.as_ref() {
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
    let content_at = written(item, at, "content")?;
    let (content, images) = match (content_at.str(), content_at.items()) {
        (Some(text), _) => (text.into_owned(), Vec::new()),
        (None, Some(parts)) => content(parts, role, &format!("{at}.content"))?,
        (None, None) => {
            return Err(wrong_type(&format!("{at}.content"), "a string or an array of parts", content_at))
        }
    };
    Ok(Message { images, ..Message::new(role, content) })
}

/// Content parts: their text joined, and the images of a user message.
fn content<'a>(
    parts: impl Iterator<Item = Part<'a>>,
    role: Role,
    at: &str,
) -> Result<(String, Vec<crate::canonical::Image>), ApiError> {
    let mut text_so_far = String::new();
    let mut images = Vec::new();
    for (j, part) in parts.enumerate() {
        let at = format!("{at}[{j}]");
        if !part.is_object() {
            return Err(wrong_type(&at, "an object", part));
        }
        match text(part, &at, "type")?.as_ref() {
            "input_text" | "output_text" => text_so_far.push_str(&text(part, &at, "text")?),
            "input_image" if role != Role::User => {
                return Err(invalid(&at, "image parts are only allowed in user messages".into()))
            }
            "input_image" => {
                let url = match part.get("image_url").filter(|u| !u.is_null()) {
                    Some(url) => url.str().ok_or_else(|| wrong_type(&format!("{at}.image_url"), "a string", url))?,
                    None if part.get("file_id").is_some() => {
                        return Err(invalid(
                            &format!("{at}.file_id"),
                            "images by `file_id` need OpenAI's file store; send `image_url` (an https address or a data URL)"
                                .into(),
                        ))
                    }
                    None => return Err(missing(&at, "image_url")),
                };
                let detail = part.get("detail").and_then(|d| d.str()).map(Cow::into_owned);
                let image = wire::image_of(&WireImageUrl::Object { url: url.into_owned(), detail })
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

/// The member `key` of the object at `at`, required (not absent, not `null`).
fn written<'a>(object: Part<'a>, at: &str, key: &str) -> Result<Part<'a>, ApiError> {
    object.get(key).filter(|v| !v.is_null()).ok_or_else(|| missing(at, key))
}

/// The string member `key` of the object at `at`.
fn text<'a>(object: Part<'a>, at: &str, key: &str) -> Result<Cow<'a, str>, ApiError> {
    let value = written(object, at, key)?;
    value.str().ok_or_else(|| wrong_type(&format!("{at}.{key}"), "a string", value))
}

fn wrong_type(param: &str, expected: &str, got: Part<'_>) -> ApiError {
    ApiError::new(ErrorCode::InvalidType, format!("`{param}` must be {expected}, not {}", type_name(got)))
        .param(param)
}
