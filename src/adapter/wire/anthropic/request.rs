//! The canonical request translated into a Messages body, typed and borrowed from the request
//! and the call.
//!
//! The leading system prompt (with the task's variant) goes to `system`; the rest of the
//! conversation becomes alternating user and assistant turns of content blocks: tool calls
//! `tool_use` blocks (their arguments passed on as written when they are a JSON object),
//! tool results `tool_result` blocks in the user's turn, a later system message a user turn
//! at its place, images `image` blocks after the text. Turns of one role are merged, as the
//! API wants roles to alternate, and empty text is left out, as the API refuses it.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use super::body::{
    Block, BlockOut, ClaudeBody, Content, Ephemeral, MessageOut, Purpose, Rest, Source, ToolOut, Turn,
};
use super::host::HostFields;
use super::{DEFAULT_MAX_TOKENS, JSON_OBJECT_INSTRUCTION};
use crate::adapter::wire::{written, Object};
use crate::adapter::{system_turn, Call};
use crate::canonical::{ChatRequest, Image, ResponseFormat, Role, ToolChoice};

/// The translation's fields beside the system prompt, the conversation and the tools.
#[derive(Debug, Serialize)]
pub(crate) struct Fields<'a> {
    /// How to answer: none on the count route.
    #[serde(flatten)]
    answer: Option<Answer<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Choice<'a>>,
}

#[derive(Debug, Serialize)]
struct Answer<'a> {
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Metadata<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

#[derive(Debug, Serialize)]
struct Metadata<'a> {
    user_id: &'a str,
}

/// `{"format": {"type": "json_schema", "schema": …}}`.
#[derive(Debug, Serialize)]
struct OutputConfig<'a> {
    format: Format<'a>,
}

#[derive(Debug, Serialize)]
struct Format<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: &'a Value,
}

/// OpenAI's `tool_choice` in Anthropic's words.
#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Choice<'a> {
    None,
    Auto,
    Any,
    Tool { name: &'a str },
}

pub(crate) fn tool_choice(choice: &ToolChoice) -> Choice<'_> {
    match choice {
        ToolChoice::None => Choice::None,
        ToolChoice::Auto => Choice::Auto,
        ToolChoice::Required => Choice::Any,
        ToolChoice::Function(name) => Choice::Tool { name },
    }
}

/// A tool the translation declares.
#[derive(Debug, Serialize)]
pub(crate) struct ToolSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Schema<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<Ephemeral>,
}

/// The tool's schema; Anthropic requires one, so a tool without stands for an open object.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Schema<'a> {
    Given(&'a Value),
    Open {
        #[serde(rename = "type")]
        kind: &'static str,
        properties: NoProperties,
    },
}

#[derive(Debug, Serialize)]
struct NoProperties {}

/// The Messages body of `call` of `req`, with the host's `fields` beside it.
pub(crate) fn body<'a>(
    req: &'a ChatRequest,
    call: &'a Call,
    host: HostFields<'a>,
    purpose: Purpose,
) -> ClaudeBody<'a> {
    let system = match (call.system_prompt(req), &req.response_format) {
        (Some(system), ResponseFormat::JsonObject) => {
            Some(format!("{system}\n\n{JSON_OBJECT_INSTRUCTION}").into())
        }
        (None, ResponseFormat::JsonObject) => Some(Cow::Borrowed(JSON_OBJECT_INSTRUCTION)),
        (system, _) => system.map(Cow::Owned),
    };
    let answer = (purpose == Purpose::Answer).then(|| Answer {
        max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        // Anthropic accepts 0..=1 (OpenAI 0..=2).
        temperature: req.temperature.map(|t| t.clamp(0.0, 1.0)),
        top_p: req.top_p,
        top_k: req.top_k,
        metadata: req.user.as_deref().map(|user_id| Metadata { user_id }),
        stop_sequences: &req.stop,
    });
    let output_config = match &req.response_format {
        ResponseFormat::JsonSchema { schema, .. } => {
            Some(OutputConfig { format: Format { kind: "json_schema", schema } })
        }
        _ => None,
    };
    let tools = req.tools.iter().map(|t| {
        // The API let through only an object schema or none.
        let input_schema = match &t.parameters {
            Value::Null => Schema::Open { kind: "object", properties: NoProperties {} },
            schema => Schema::Given(schema),
        };
        let spec = ToolSpec {
            name: &t.name,
            description: t.description.as_deref(),
            input_schema,
            cache_control: None,
        };
        ToolOut::Typed(spec)
    });
    ClaudeBody {
        host,
        system: system.map(Content::Text),
        messages: Some(messages(req, call)),
        tools: (!req.tools.is_empty()).then(|| tools.collect()),
        rest: Rest::Translated(Fields {
            answer,
            output_config,
            tool_choice: req.tool_choice.as_ref().map(tool_choice),
        }),
    }
}

/// The conversation after the system prompt, as alternating user/assistant content blocks (a
/// later system message a user turn at its place: [`system_turn`]).
fn messages<'a>(req: &'a ChatRequest, call: &'a Call) -> Vec<MessageOut<'a>> {
    let mut out: Vec<(&'static str, Vec<BlockOut<'a>>)> = Vec::new();
    for m in call.turns(req) {
        let (role, blocks) = match m.role {
            Role::System => ("user", text_block(Cow::Owned(system_turn(&m.content))).into_iter().collect()),
            Role::User => {
                let mut blocks: Vec<BlockOut> = text_block(Cow::Borrowed(&m.content)).into_iter().collect();
                blocks.extend(m.images.iter().map(image_block));
                ("user", blocks)
            }
            Role::Tool => {
                let tool_use_id = m.tool_call_id.as_deref().unwrap_or_default();
                let result = Block::ToolResult { tool_use_id, content: &m.content, cache_control: None };
                ("user", vec![BlockOut::Typed(result)])
            }
            Role::Assistant => {
                let mut blocks: Vec<BlockOut> = text_block(Cow::Borrowed(&m.content)).into_iter().collect();
                blocks.extend(m.tool_calls.iter().map(|call| {
                    let input = written(&call.arguments).map_or(Object::Empty {}, Object::Written);
                    BlockOut::Typed(Block::ToolUse {
                        id: &call.id,
                        name: &call.name,
                        input,
                        cache_control: None,
                    })
                }));
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    let turn = |(role, blocks)| {
        MessageOut::Turn(Turn { role: Some(role), content: Content::Blocks(blocks), rest: None })
    };
    out.into_iter().map(turn).collect()
}

/// An `image` content block: inline bytes as a `base64` source, an address as a `url` source.
fn image_block(image: &Image) -> BlockOut<'_> {
    let source = match image.inline_data() {
        Some((media_type, data)) => Source::Base64 { media_type, data },
        None => Source::Url { url: &image.url },
    };
    BlockOut::Typed(Block::Image { source, cache_control: None })
}

/// Anthropic rejects empty text blocks.
fn text_block(text: Cow<'_, str>) -> Option<BlockOut<'_>> {
    (!text.is_empty()).then(|| BlockOut::text(text))
}
