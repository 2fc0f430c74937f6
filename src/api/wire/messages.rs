//! The chat door's conversation decoded: each message checked for what its types cannot say
//! (content or tool calls present, image parts only from the user, a tool message's call id)
//! and made a canonical message, its text moved, not copied. The door decodes here only what
//! its scan is not sure of; a conversation kept as written is decoded here on first use.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{decode_error, image_of, Content, Object, WireMessage};
use crate::api::error::{ApiError, ErrorCode};
use crate::canonical::{Message, Role, ToolCall};

/// The conversation of a body whose scan was sure of it, decoded.
pub(super) fn decode_written(body: &[u8]) -> Vec<Message> {
    #[derive(Deserialize)]
    struct Conversation<'a> {
        #[serde(borrow)]
        messages: &'a RawValue,
    }
    let decoded = serde_json::from_slice::<Conversation>(body)
        .map_err(|e| ApiError::new(ErrorCode::InvalidJson, e.to_string()))
        .and_then(|body| decode_messages(body.messages.get().as_bytes()));
    decoded.unwrap_or_else(|e| {
        tracing::error!(error = %e.message, "a conversation the chat door scanned does not decode");
        Vec::new()
    })
}

/// The messages of `json`, the client's `messages`, each checked.
pub(super) fn decode_messages(json: &[u8]) -> Result<Vec<Message>, ApiError> {
    let mut wire: Vec<Object<WireMessage>> = serde_json::from_slice(json).map_err(|_| {
        let mut de = serde_json::Deserializer::from_slice(json);
        match serde_path_to_error::deserialize::<_, Vec<Object<WireMessage>>>(&mut de) {
            Err(err) => {
                let path = err.path().to_string();
                let path = if path == "." { "messages".to_string() } else { format!("messages{path}") };
                decode_error(path, err.into_inner())
            }
            Ok(_) => ApiError::new(ErrorCode::InvalidValue, "`messages` is not a list of messages"),
        }
    })?;
    messages_of(&mut wire)
}

/// The canonical messages of decoded ones (their text moved), checking what the types could not.
fn messages_of(wire: &mut [Object<WireMessage>]) -> Result<Vec<Message>, ApiError> {
    let mut messages = Vec::with_capacity(wire.len());
    for (i, Object(m)) in wire.iter_mut().enumerate() {
        let mut images = Vec::new();
        let content = match &mut m.content {
            None if m.role == Role::Assistant && m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) => {
                String::new()
            }
            None => {
                let why = match m.role {
                    Role::Assistant => "an assistant message needs `content` or `tool_calls`".to_string(),
                    role => {
                        format!("a {} message needs `content` (a string or an array of parts)", role.as_str())
                    }
                };
                return Err(ApiError::bad_request(why).param(format!("messages[{i}].content")));
            }
            Some(Content::Text(t)) => std::mem::take(t),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for (j, part) in parts.iter().enumerate() {
                    let at = || format!("messages[{i}].content[{j}]");
                    match (part.kind.as_str(), &part.text, &part.image_url) {
                        ("text", Some(t), _) => text.push_str(t),
                        ("image_url", _, Some(image)) => {
                            if m.role != Role::User {
                                return Err(ApiError::bad_request(
                                    "image parts are only allowed in user messages",
                                )
                                .param(at()));
                            }
                            images.push(image_of(image).map_err(|why| {
                                ApiError::bad_request(why).param(format!("{}.image_url", at()))
                            })?);
                        }
                        ("text" | "image_url", _, _) => {
                            return Err(ApiError::bad_request(format!(
                                "a `{}` part needs its `{}` field",
                                part.kind, part.kind
                            ))
                            .param(at()))
                        }
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "content part type `{}` is not supported; only text and image_url parts are",
                                part.kind
                            ))
                            .param(at()))
                        }
                    }
                }
                text
            }
        };
        let tool_calls = m
            .tool_calls
            .iter_mut()
            .flatten()
            .map(|c| ToolCall {
                id: std::mem::take(&mut c.id),
                name: std::mem::take(&mut c.function.name),
                arguments: std::mem::take(&mut c.function.arguments),
            })
            .collect();
        if m.role == Role::Tool && m.tool_call_id.is_none() {
            return Err(ApiError::bad_request("a tool message needs `tool_call_id`")
                .param(format!("messages[{i}].tool_call_id")));
        }
        messages.push(Message {
            role: m.role,
            content,
            images,
            tool_calls,
            tool_call_id: m.tool_call_id.take(),
        });
    }
    Ok(messages)
}
