//! The Chat Completions request body, typed: borrowed from the canonical request and the call
//! and serialised once, with no JSON tree built between them.
//!
//! Being the client's own wire format, everything the canonical request holds passes through:
//! tools and `tool_choice`, `response_format` (`json_object`, `json_schema` with its `strict`
//! flag), and images as `image_url` content parts after the message's text. Streams always ask
//! for `stream_options.include_usage`, so that usage arrives in a last chunk.
//!
//! A chat client's own body ([`ChatRequest::written`]) is sent as the bytes it wrote instead
//! ([`written_body`]), with only the members Spillway owns rewritten: the model, the stream
//! flag and options, the output cap (under the name the client used), `prompt_cache_key`, and
//! the conversation when a task's system prompt goes before it.

use serde::Serialize;
use serde_json::Value;

use crate::adapter::wire::written::{Members, WithFirst};
use crate::adapter::Call;
use crate::canonical::{ChatRequest, Message, ResponseFormat, Role, Schema, Tool, ToolChoice, WrittenBody};

#[derive(Debug, Serialize)]
pub(crate) struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<MessageOut<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    sampling: Sampling<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoiceOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<FormatOut<'a>>,
    /// OpenAI's own (the upstream that serves Responses): vLLM logs a warning for every field
    /// it does not know, and other OpenAI-compatible servers may refuse one.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// The sampling settings of a chat or a legacy completion.
#[derive(Debug, Serialize)]
pub(crate) struct Sampling<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
}

impl<'a> Sampling<'a> {
    pub(crate) fn of(req: &'a ChatRequest) -> Sampling<'a> {
        Sampling {
            max_tokens: req.max_tokens,
            temperature: req.temperature,
            top_p: req.top_p,
            stop: &req.stop,
            seed: req.seed,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    pub include_usage: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum MessageOut<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// `null` for a turn that only calls tools.
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<CallOut<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Debug, Serialize)]
struct ImageUrl<'a> {
    url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum CallOut<'a> {
    Function { id: &'a str, function: FunctionCall<'a> },
}

#[derive(Debug, Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ToolOut<'a> {
    Function { function: FunctionOut<'a> },
}

#[derive(Debug, Serialize)]
struct FunctionOut<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Schema::is_null")]
    parameters: &'a Schema,
}

/// A canonical tool choice in OpenAI's own words: a mode, or the function to call.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ToolChoiceOut<'a> {
    Mode(&'static str),
    Forced(Forced<'a>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Forced<'a> {
    Function { function: Named<'a> },
}

#[derive(Debug, Serialize)]
pub(crate) struct Named<'a> {
    name: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum FormatOut<'a> {
    JsonObject,
    JsonSchema { json_schema: SchemaOut<'a> },
}

#[derive(Debug, Serialize)]
struct SchemaOut<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

impl<'a> ChatBody<'a> {
    /// The body of `call` of `req`; `cache_key`: send the request's `prompt_cache_key` (to
    /// OpenAI itself only).
    pub(crate) fn of(req: &'a ChatRequest, call: &'a Call, cache_key: bool) -> ChatBody<'a> {
        ChatBody {
            model: call.model,
            messages: call.messages(req).map(MessageOut::of).collect(),
            stream: call.stream,
            stream_options: call.stream.then_some(StreamOptions { include_usage: true }),
            sampling: Sampling::of(req),
            user: req.user.as_deref(),
            tools: req.tools.iter().map(ToolOut::of).collect(),
            tool_choice: req.tool_choice.as_ref().map(ToolChoiceOut::of),
            response_format: FormatOut::of(&req.response_format),
            prompt_cache_key: req.prompt_cache_key.as_deref().filter(|_| cache_key),
        }
    }
}

/// The members of a client's chat body sent on as written: those the typed body writes from
/// the same fields. Others are left out, as the typed body leaves them: some engines refuse a
/// member they do not know (TensorRT-LLM's server forbids extra fields).
const PASSED: [&str; 9] =
    ["messages", "temperature", "top_p", "stop", "seed", "user", "tools", "tool_choice", "response_format"];

/// What [`written_body`] writes after the client's other members.
#[derive(Serialize)]
struct OwnedMembers<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<WithFirst<'a, MessageOut<'a>>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// The body of `call` of `req` from `written`, the client's own chat body: its [`PASSED`]
/// members as written, then those Spillway owns, which say what [`ChatBody::of`] says of them
/// (the conversation is owned only when a task's system prompt goes before it). The output
/// cap keeps the name the client gave it (`max_completion_tokens`, which OpenAI's reasoning
/// models require, or `max_tokens`). `None` if `written` is not a JSON object.
pub(crate) fn written_body(
    written: &WrittenBody,
    req: &ChatRequest,
    call: &Call,
    cache_key: bool,
) -> Option<Vec<u8>> {
    let members = Members::of_written(written).ok()?;
    let completion_name =
        members.get("max_completion_tokens").is_some() && members.get("max_tokens").is_none();
    let messages = match (&call.variant, members.get("messages")) {
        (Some(variant), Some(rest)) => Some(WithFirst { first: MessageOut::of(variant), rest }),
        _ => None,
    };
    let owns_messages = messages.is_some();
    let own = OwnedMembers {
        model: call.model,
        messages,
        stream: call.stream,
        stream_options: call.stream.then_some(StreamOptions { include_usage: true }),
        max_tokens: req.max_tokens.filter(|_| !completion_name),
        max_completion_tokens: req.max_tokens.filter(|_| completion_name),
        prompt_cache_key: req.prompt_cache_key.as_deref().filter(|_| cache_key),
    };
    members.write(|key| PASSED.contains(&key) && !(owns_messages && key == "messages"), &own).ok()
}

impl<'a> MessageOut<'a> {
    fn of(m: &'a Message) -> MessageOut<'a> {
        match m.role {
            Role::System => MessageOut::System { content: &m.content },
            Role::User if m.images.is_empty() => MessageOut::User { content: UserContent::Text(&m.content) },
            Role::User => {
                let text = (!m.content.is_empty()).then_some(Part::Text { text: &m.content });
                let images = m.images.iter().map(|image| Part::ImageUrl {
                    image_url: ImageUrl { url: &image.url, detail: image.detail.as_deref() },
                });
                MessageOut::User { content: UserContent::Parts(text.into_iter().chain(images).collect()) }
            }
            Role::Tool => MessageOut::Tool {
                tool_call_id: m.tool_call_id.as_deref().unwrap_or_default(),
                content: &m.content,
            },
            Role::Assistant => MessageOut::Assistant {
                content: (m.tool_calls.is_empty() || !m.content.is_empty()).then_some(m.content.as_str()),
                tool_calls: m
                    .tool_calls
                    .iter()
                    .map(|c| CallOut::Function {
                        id: &c.id,
                        function: FunctionCall { name: &c.name, arguments: &c.arguments },
                    })
                    .collect(),
            },
        }
    }
}

impl<'a> ToolOut<'a> {
    fn of(t: &'a Tool) -> ToolOut<'a> {
        ToolOut::Function {
            function: FunctionOut {
                name: &t.name,
                description: t.description.as_deref(),
                parameters: &t.parameters,
            },
        }
    }
}

impl<'a> ToolChoiceOut<'a> {
    pub(crate) fn of(choice: &'a ToolChoice) -> ToolChoiceOut<'a> {
        match choice {
            ToolChoice::None => ToolChoiceOut::Mode("none"),
            ToolChoice::Auto => ToolChoiceOut::Mode("auto"),
            ToolChoice::Required => ToolChoiceOut::Mode("required"),
            ToolChoice::Function(name) => {
                ToolChoiceOut::Forced(Forced::Function { function: Named { name } })
            }
        }
    }
}

impl<'a> FormatOut<'a> {
    fn of(format: &'a ResponseFormat) -> Option<FormatOut<'a>> {
        match format {
            ResponseFormat::Text => None,
            ResponseFormat::JsonObject => Some(FormatOut::JsonObject),
            ResponseFormat::JsonSchema { name, schema, strict } => {
                Some(FormatOut::JsonSchema { json_schema: SchemaOut { name, schema, strict: *strict } })
            }
        }
    }
}

#[cfg(test)]
#[path = "written_tests.rs"]
mod written_tests;
