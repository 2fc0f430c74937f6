//! The Converse request body, typed and borrowed from the canonical request and the call (the
//! model and the verb are in the URL).
//!
//! The system prompt goes to `system`, limits to `inferenceConfig`, tools to `toolConfig`
//! (Bedrock requires one whenever the history holds tool use or results, so a request with
//! such a history and no tools declares the tools it used, with an open schema), tool results
//! into user turns, and turns of one role are merged. For the models that cache prompts (Nova,
//! Claude) the task's cache placement becomes `cachePoint` blocks, at most four, after the
//! tools, the system prompt and the last user turns.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::adapter::wire::breakpoints;
use crate::adapter::wire::{written, Object};
use crate::adapter::{system_turn, Call};
use crate::canonical::{CachePlacement, ChatRequest, Image, Message, Role, ToolChoice};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConverseBody<'a> {
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    #[serde(skip_serializing_if = "InferenceConfig::is_empty")]
    inference_config: InferenceConfig<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
}

#[derive(Debug, Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

/// A content block, a system block or a tool: each is an object with one member naming it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum Block<'a> {
    Text(Cow<'a, str>),
    Image(ImageOut<'a>),
    ToolUse(ToolUse<'a>),
    ToolResult(ToolResult<'a>),
    ToolSpec(ToolSpec<'a>),
    CachePoint(CachePoint),
}

#[derive(Debug, Serialize)]
struct ImageOut<'a> {
    format: &'a str,
    source: Bytes<'a>,
}

#[derive(Debug, Serialize)]
struct Bytes<'a> {
    bytes: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolUse<'a> {
    tool_use_id: &'a str,
    name: &'a str,
    input: Object<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolResult<'a> {
    tool_use_id: &'a str,
    content: [ResultContent<'a>; 1],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum ResultContent<'a> {
    Json(&'a RawValue),
    Text(&'a str),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Schema<'a>,
}

#[derive(Debug, Serialize)]
struct Schema<'a> {
    json: Object<'a>,
}

#[derive(Debug, Serialize)]
struct CachePoint {
    #[serde(rename = "type")]
    kind: &'static str,
}

const CACHE_POINT: Block<'static> = Block::CachePoint(CachePoint { kind: "default" });

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

impl InferenceConfig<'_> {
    fn is_empty(&self) -> bool {
        self.max_tokens.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.stop_sequences.is_empty()
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    tools: Vec<Block<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Choice<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum Choice<'a> {
    Any {},
    Tool { name: &'a str },
}

impl<'a> ConverseBody<'a> {
    pub(crate) fn of(req: &'a ChatRequest, call: &'a Call) -> ConverseBody<'a> {
        let mut body = ConverseBody {
            messages: turns(req, call),
            system: call.system_prompt(req).map(|s| Block::Text(Cow::Owned(s))).into_iter().collect(),
            inference_config: InferenceConfig {
                max_tokens: req.max_tokens,
                temperature: req.temperature,
                top_p: req.top_p,
                stop_sequences: &req.stop,
            },
            tool_config: ToolConfig::of(req),
        };
        if let Some(placement) = call.cache_placement.as_ref().filter(|_| caches_prompts(call.model)) {
            body.place_cache_points(placement);
        }
        body
    }

    /// A `cachePoint` after the tools, the system prompt and the last user turns, where
    /// [`breakpoints::plan`] puts them for `placement`.
    fn place_cache_points(&mut self, placement: &CachePlacement) {
        let users =
            self.messages.iter().enumerate().rev().filter(|(_, t)| t.role == "user").map(|(at, _)| at);
        let plan = breakpoints::plan(placement, self.tool_config.is_some(), !self.system.is_empty(), users);
        if let (true, Some(config)) = (plan.tools, &mut self.tool_config) {
            config.tools.push(CACHE_POINT);
        }
        if plan.system {
            self.system.push(CACHE_POINT);
        }
        for &at in &plan.turns {
            self.messages[at].content.push(CACHE_POINT);
        }
        tracing::debug!(placed = plan.count(), "prompt-cache points");
    }
}

/// Whether Bedrock caches prompts for `model` (Amazon Nova, Claude); `cachePoint` blocks are
/// refused for the others.
fn caches_prompts(model: &str) -> bool {
    ["nova", "claude", "anthropic"].iter().any(|family| model.contains(family))
}

impl<'a> ToolConfig<'a> {
    /// The request's tools and choice; else, when the history holds tool calls, the tools it
    /// called (Bedrock refuses such a history without a tool configuration).
    fn of(req: &'a ChatRequest) -> Option<ToolConfig<'a>> {
        let spec = |name: &'a str, description: Option<&'a str>, schema: &'a Value| {
            let json = if schema.is_object() {
                Object::Schema(schema)
            } else {
                Object::OpenSchema { kind: "object" }
            };
            Block::ToolSpec(ToolSpec { name, description, input_schema: Schema { json } })
        };
        if !req.tools.is_empty() && req.tool_choice != Some(ToolChoice::None) {
            let tools = req
                .tools
                .iter()
                .map(|t| spec(&t.name, t.description.as_deref(), t.parameters.tree()))
                .collect();
            let tool_choice = match &req.tool_choice {
                Some(ToolChoice::Required) => Some(Choice::Any {}),
                Some(ToolChoice::Function(name)) => Some(Choice::Tool { name }),
                _ => None,
            };
            return Some(ToolConfig { tools, tool_choice });
        }
        let mut used: Vec<&str> =
            req.messages.iter().flat_map(|m| &m.tool_calls).map(|c| c.name.as_str()).collect();
        used.dedup();
        (!used.is_empty()).then(|| ToolConfig {
            tools: used.into_iter().map(|name| spec(name, None, &Value::Null)).collect(),
            tool_choice: None,
        })
    }
}

/// The conversation after the system prompt, turns of one role merged (tool results are a
/// user's turn; a later system message a user turn at its place).
fn turns<'a>(req: &'a ChatRequest, call: &'a Call) -> Vec<Turn<'a>> {
    let mut out: Vec<Turn<'a>> = Vec::new();
    for m in call.turns(req) {
        let (role, content) = blocks(m);
        if content.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => out.push(Turn { role, content }),
        }
    }
    out
}

/// One message's role and blocks.
fn blocks<'a>(m: &'a Message) -> (&'static str, Vec<Block<'a>>) {
    let text = |t: Cow<'a, str>| (!t.is_empty()).then_some(Block::Text(t));
    match m.role {
        Role::System => ("user", text(Cow::Owned(system_turn(&m.content))).into_iter().collect()),
        Role::User => {
            let images = m.images.iter().filter_map(image_block);
            ("user", text(Cow::Borrowed(&m.content)).into_iter().chain(images).collect())
        }
        Role::Assistant => {
            let calls = m.tool_calls.iter().map(|c| {
                let input = written(&c.arguments).map_or(Object::Empty {}, Object::Written);
                Block::ToolUse(ToolUse { tool_use_id: &c.id, name: &c.name, input })
            });
            ("assistant", text(Cow::Borrowed(&m.content)).into_iter().chain(calls).collect())
        }
        Role::Tool => {
            let content = written(&m.content).map_or(ResultContent::Text(&m.content), ResultContent::Json);
            let tool_use_id = m.tool_call_id.as_deref().unwrap_or_default();
            ("user", vec![Block::ToolResult(ToolResult { tool_use_id, content: [content] })])
        }
    }
}

/// An inline image as Converse takes it (format and base64 bytes); Converse reads no address.
fn image_block(image: &Image) -> Option<Block<'_>> {
    let (media_type, bytes) = image.inline_data()?;
    let format = media_type.strip_prefix("image/")?;
    Some(Block::Image(ImageOut { format, source: Bytes { bytes } }))
}
