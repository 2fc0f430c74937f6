//! The fields of a translated Messages body beside its system prompt and conversation: how to
//! answer (`max_tokens`, sampling, `metadata`, `stop_sequences`; none on the count route), the
//! structured output, the tool choice, and the tools it declares, each in Anthropic's words.

use serde::Serialize;
use serde_json::Value;

use super::super::DEFAULT_MAX_TOKENS;
use super::{Ephemeral, Purpose};
use crate::canonical::{ChatRequest, ResponseFormat, Tool, ToolChoice};

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
    Given(crate::canonical::shallow::AsWritten<'a>),
    Open {
        #[serde(rename = "type")]
        kind: &'static str,
        properties: NoProperties,
    },
}

#[derive(Debug, Serialize)]
struct NoProperties {}

impl<'a> Fields<'a> {
    /// The fields of `req` for a body built for `purpose`.
    pub(crate) fn of(req: &'a ChatRequest, purpose: Purpose) -> Fields<'a> {
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
        Fields { answer, output_config, tool_choice: req.tool_choice.as_ref().map(tool_choice) }
    }
}

impl<'a> ToolSpec<'a> {
    /// A tool as the translation declares it.
    pub(crate) fn of(tool: &'a Tool) -> ToolSpec<'a> {
        // The API let through only an object schema or none.
        let input_schema = match &tool.parameters {
            schema if schema.is_null() => Schema::Open { kind: "object", properties: NoProperties {} },
            schema => Schema::Given(schema.text()),
        };
        ToolSpec {
            name: &tool.name,
            description: tool.description.as_deref(),
            input_schema,
            cache_control: None,
        }
    }
}
