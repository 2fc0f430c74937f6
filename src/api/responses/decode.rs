//! A `POST /v1/responses` body → the canonical request, with errors that name the field.
//!
//! `input` is a string (one user message) or a list of items: messages (`type: message` or the
//! `{role, content}` shorthand; `developer` is a system message), `function_call` (an assistant
//! message's tool call; consecutive calls join one message) and `function_call_output` (a tool
//! message, which must answer an earlier call). `reasoning` items (OpenAI's, encrypted) are
//! dropped from the translation: only OpenAI, which gets the client's body as written, can read
//! them. Tools, `tool_choice` and
//! `text.format` are checked by the chat door's checks (`wire::checks`), once, with Responses'
//! field names in `param`. Spillway's Responses are stateless: what leans on state OpenAI
//! keeps (`store: true`, `previous_response_id`, `conversation`, `item_reference` items) is
//! refused here, naming its field, unless the request is pinned to OpenAI (the task's first
//! backend is OpenAI itself), where the client's body goes as it was written.
//! `background: true` is always refused (its answer is fetched later from a route Spillway does
//! not serve). Nothing here panics on input.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::items::Calls;
use super::refuse::{invalid, missing_root, type_name};
use super::toolset::Toolset;
use crate::api::error::{ApiError, ErrorCode};
use crate::api::wire;
use crate::canonical::shallow::{Part, Shallow};
use crate::canonical::{ChatRequest, Dialect, Message, NativeRequest, Role, Tool, ToolChoice};

/// What the client sent, as far as types can say.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: String,
    #[serde(default)]
    pub instructions: Option<String>,
    /// Checked to be a list here; its tools are read where they lie in `body` by
    /// [`ResponsesRequest::toolset`] (with those of `additional_tools` items), as `input` is
    /// ([`ResponsesRequest::input`]): an agent's turn is tens of kilobytes of them.
    #[serde(default, rename = "tools")]
    _tools: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub text: Option<TextConfig>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub metadata: Option<HashMap<String, String>>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub background: Option<bool>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub conversation: Option<Value>,
    /// The body as the client wrote it, for a backend that speaks Responses itself, read to each
    /// input item and tool (which the door reads where they lie).
    #[serde(skip, default = "unread")]
    pub body: Arc<Shallow>,
}

/// `text`: the answer's format (`verbosity` is accepted and not forwarded).
#[derive(Debug, Deserialize)]
pub struct TextConfig {
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default)]
    pub verbosity: Option<String>,
}

/// Decode a Responses request body.
pub fn decode(written: &Bytes) -> Result<ResponsesRequest, ApiError> {
    let mut request: ResponsesRequest = wire::decode_json(written, "a responses request")?;
    request.body = wire::as_written(written, Dialect::OpenAiResponses)?;
    Ok(request)
}

/// The body before [`decode`] reads it.
fn unread() -> Arc<Shallow> {
    static EMPTY: std::sync::LazyLock<Arc<Shallow>> = std::sync::LazyLock::new(|| {
        Arc::new(
            Shallow::read(Bytes::from_static(b"{}"), Dialect::OpenAiResponses.depth())
                .expect("{} is an object"),
        )
    });
    Arc::clone(&EMPTY)
}

impl ResponsesRequest {
    pub fn wants_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// The canonical request (`model` is filled by dispatch); `output_cap` is the task's cap
    /// on `max_output_tokens`. Each refusal names its field. The client's body goes with it,
    /// as written, to a backend that speaks Responses itself (OpenAI), namespaces, `custom`
    /// and hosted tools, `additional_tools` and encrypted reasoning included. `pinned`: the
    /// request leans on state OpenAI keeps and goes only there (its earlier turns are stored
    /// at OpenAI, so a tool output may answer a call not in `input`).
    pub fn to_canonical(
        &self,
        output_cap: Option<u32>,
        toolset: &Toolset,
        pinned: bool,
    ) -> Result<ChatRequest, ApiError> {
        if let (Some(refusal), false) = (self.needs_openai_state(), pinned) {
            return Err(refusal);
        }
        if self.background == Some(true) {
            return Err(invalid(
                "background",
                format!("{STATELESS}. `background: true` is not supported; stream the answer instead"),
            ));
        }
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(invalid("temperature", format!("`temperature` {t} is outside 0 to 2")));
        }
        if let Some(p) = self.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(invalid("top_p", format!("`top_p` {p} is outside 0 to 1")));
        }
        if self.max_output_tokens == Some(0) {
            return Err(invalid("max_output_tokens", "`max_output_tokens` must be at least 1".into()));
        }
        let tools = toolset.tools.clone();
        let tool_choice = self.tool_choice(&tools)?;
        let response_format = match self.text.as_ref().and_then(|t| t.format.as_ref()) {
            None | Some(Value::Null) => Default::default(),
            Some(format) => wire::response_format(&chat_response_format(format)).map_err(|e| {
                renamed(
                    e,
                    &[("response_format.json_schema", "text.format"), ("response_format", "text.format")],
                )
            })?,
        };
        let max_tokens = match (self.max_output_tokens, output_cap) {
            (Some(asked), Some(cap)) => Some(asked.min(cap)),
            (asked, cap) => asked.or(cap),
        };
        let calls = if pinned { Calls::Stored } else { Calls::Seen(Default::default()) };
        let native = NativeRequest {
            dialect: Dialect::OpenAiResponses,
            body: Arc::clone(&self.body),
            headers: Vec::new(),
        };
        Ok(ChatRequest {
            model: String::new(),
            messages: self.messages(calls, toolset)?.into(),
            max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: None,
            user: self.user.clone(),
            prompt_cache_key: self.prompt_cache_key.clone(),
            stop: Vec::new(),
            tools,
            tool_choice,
            seed: None,
            stream: self.wants_stream(),
            response_format,
            relay: true,
            shadowed: false,
            native: Some(native),
            written: None,
            operation: crate::canonical::Operation::Chat,
        })
    }

    /// `tools` as the client wrote them.
    pub fn tools(&self) -> impl Iterator<Item = Part<'_>> {
        self.body.get("tools").and_then(|t| t.items()).into_iter().flatten()
    }

    /// `input` as the client wrote it: a string or a list of items.
    fn input(&self) -> Option<Part<'_>> {
        self.body.get("input").filter(|i| !i.is_null())
    }

    /// `input`'s items (none when it is a string).
    fn items(&self) -> impl Iterator<Item = Part<'_>> {
        self.input().and_then(|i| i.items()).into_iter().flatten()
    }

    /// Whether `input` holds reasoning that only OpenAI can read (a `reasoning` item).
    pub fn carries_openais_own(&self) -> bool {
        self.items().any(|item| item.get("type").is_some_and(|t| t.is_str("reasoning")))
    }

    /// The request's tools: those of `tools` and of every `additional_tools` input item.
    pub fn toolset(&self) -> Result<Toolset, ApiError> {
        let listed = self.tools().enumerate().map(|(i, t)| (format!("tools[{i}]"), t));
        let added = self
            .items()
            .enumerate()
            .filter(|(_, item)| item.get("type").is_some_and(|t| t.is_str("additional_tools")));
        let added = added.flat_map(|(i, item)| {
            let tools = item.get("tools").and_then(|t| t.items()).into_iter().flatten();
            tools.enumerate().map(move |(j, t)| (format!("input[{i}].tools[{j}]"), t))
        });
        Toolset::read(listed.chain(added))
    }

    /// The refusal, naming its field, of the first thing that leans on state OpenAI keeps:
    /// `store: true`, `previous_response_id`, `conversation`, an `item_reference` item. `None`
    /// when there is none; when there is, the request may still be pinned to OpenAI.
    pub fn needs_openai_state(&self) -> Option<ApiError> {
        let reference = self.items().position(|i| i.get("type").is_some_and(|t| t.is_str("item_reference")));
        let (param, why) = if self.store == Some(true) {
            ("store".to_string(), "`store: true` is not supported; leave `store` out or set it to false")
        } else if self.previous_response_id.is_some() {
            (
                "previous_response_id".into(),
                "`previous_response_id` is not supported; send the whole conversation in `input`",
            )
        } else if self.conversation.as_ref().is_some_and(|c| !c.is_null()) {
            ("conversation".into(), "`conversation` is not supported; send the whole conversation in `input`")
        } else if let Some(i) = reference {
            (format!("input[{i}].type"), "`item_reference` items refer to stored items; send the item itself")
        } else {
            return None;
        };
        Some(invalid(
            &param,
            format!("{STATELESS}. {why} (it passes through only to a task whose first backend is OpenAI)"),
        ))
    }

    /// `auto`, `none`, `required` or `{"type": "function", "name"}`. Without tools, `auto` and
    /// `none` say nothing and are dropped; anything else needs tools.
    fn tool_choice(&self, tools: &[Tool]) -> Result<Option<ToolChoice>, ApiError> {
        let Some(choice) = self.tool_choice.as_ref().filter(|c| !c.is_null()) else { return Ok(None) };
        if tools.is_empty() && matches!(choice.as_str(), Some("auto" | "none")) {
            return Ok(None);
        }
        let as_chat = match (choice.get("type").and_then(Value::as_str), choice.get("name")) {
            (Some("function"), Some(name)) => json!({"type": "function", "function": {"name": name}}),
            _ => choice.clone(),
        };
        wire::tool_choice(&as_chat, tools)
            .map(Some)
            .map_err(|e| renamed(e, &[("tool_choice.function.name", "tool_choice.name")]))
    }

    /// `instructions` first, then `input` in order; `calls` says which calls an output answers.
    fn messages(&self, mut calls: Calls, toolset: &Toolset) -> Result<Vec<Message>, ApiError> {
        let mut messages = Vec::new();
        if let Some(instructions) = self.instructions.as_ref().filter(|i| !i.is_empty()) {
            messages.push(Message::new(Role::System, instructions.as_str()));
        }
        let input = self.input().ok_or_else(|| missing_root("input"))?;
        match (input.str(), input.items()) {
            (Some(text), _) => messages.push(Message::new(Role::User, text.into_owned())),
            (None, Some(items)) => {
                for (i, item) in items.enumerate() {
                    super::items::add(&mut messages, &mut calls, toolset, item, &format!("input[{i}]"))?;
                }
            }
            (None, None) => {
                return Err(ApiError::new(
                    ErrorCode::InvalidType,
                    format!("`input` must be a string or an array of items, not {}", type_name(input)),
                )
                .param("input"))
            }
        }
        // A pinned request's turns may all be stored (`item_reference` items).
        if matches!(calls, Calls::Seen(_)) && messages.iter().all(|m| m.role == Role::System) {
            return Err(invalid("input", "`input` must hold at least one message".into()));
        }
        Ok(messages)
    }
}

/// The first words of every refusal of state.
const STATELESS: &str = "Spillway's Responses API is stateless: it stores no responses";

/// Responses' `text.format` in the chat shape the shared check reads (`json_schema` nests its
/// name, schema and strictness there).
fn chat_response_format(format: &Value) -> Value {
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return format.clone();
    }
    let mut spec = Map::new();
    for key in ["name", "schema", "strict"] {
        if let Some(v) = format.get(key) {
            spec.insert(key.into(), v.clone());
        }
    }
    json!({"type": "json_schema", "json_schema": spec})
}

/// The shared check's error under Responses' field names (`(chat prefix, responses prefix)`).
fn renamed(mut e: ApiError, renames: &[(&str, &str)]) -> ApiError {
    for (chat, responses) in renames {
        if let Some(param) = e.param.as_mut().filter(|p| p.contains(chat)) {
            *param = param.replacen(chat, responses, 1);
            e.message = e.message.replace(chat, responses);
            break;
        }
    }
    if e.code == ErrorCode::InvalidRequest {
        e.code(ErrorCode::InvalidValue)
    } else {
        e
    }
}

/// An error of the shared core (which names chat's fields: a context or image refusal names
/// `messages`, a JSON schema one `response_format`) under Responses' field names.
pub fn in_responses_terms(mut e: ApiError) -> ApiError {
    let renamed = match e.param.as_deref() {
        Some("messages") => "input",
        Some("response_format") => "text.format",
        _ => return e,
    };
    e.param = Some(renamed.into());
    e
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
