//! What a client gets back in OpenAI's words: the `usage` object (shared by whole answers and
//! the last chunk of a stream) and a whole `chat.completion`.

use serde::Serialize;

use crate::canonical::{FinishReason, ToolCall, Usage};

/// The member of an OpenAI `usage` object that carries the answer's cost in US dollars, as an
/// exact decimal string (Spillway's extension; the same figure as `x-spillway-cost-usd`).
pub const COST_FIELD: &str = "spillway_cost_usd";

/// OpenAI's `usage` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WireUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    pub prompt_tokens_details: CachedTokens,
    /// [`COST_FIELD`], once the cost is known.
    #[serde(rename = "spillway_cost_usd", skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<String>,
}

impl WireUsage {
    pub(crate) fn with_cost(self, cost: Option<rust_decimal::Decimal>) -> WireUsage {
        WireUsage { cost_usd: cost.map(|c| c.to_string()), ..self }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CachedTokens {
    pub cached_tokens: u32,
}

impl From<&Usage> for WireUsage {
    fn from(u: &Usage) -> Self {
        WireUsage {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            total_tokens: u.input_tokens + u.output_tokens,
            prompt_tokens_details: CachedTokens { cached_tokens: u.cached_input_tokens },
            cost_usd: None,
        }
    }
}

/// A whole `chat.completion` object, written straight from the answer (no tree built).
#[derive(Debug, Serialize)]
pub struct Completion<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [Choice<'a>; 1],
    pub usage: WireUsage,
}

/// The one choice of a [`Completion`].
#[derive(Debug, Serialize)]
pub struct Choice<'a> {
    pub index: u32,
    pub message: AnswerMessage<'a>,
    pub finish_reason: &'static str,
    /// Always `null`: log probabilities are not asked of an upstream.
    pub logprobs: Option<()>,
}

/// The assistant's message: its text (`null` when it only calls tools) and its tool calls.
#[derive(Debug, Serialize)]
pub struct AnswerMessage<'a> {
    pub role: &'static str,
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<CallOut<'a>>,
}

#[derive(Debug, Serialize)]
pub struct CallOut<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut<'a>,
}

#[derive(Debug, Serialize)]
pub struct FunctionOut<'a> {
    pub name: &'a str,
    pub arguments: &'a str,
}

impl<'a> Completion<'a> {
    /// The completion of an answer of `text` and `tool_calls` that ended for `finish` (`stop`
    /// when the upstream did not say), its usage with its cost once known.
    pub fn of(
        id: &'a str,
        model: &'a str,
        created: u64,
        (text, tool_calls): (&'a str, &'a [ToolCall]),
        finish: Option<FinishReason>,
        usage: WireUsage,
    ) -> Completion<'a> {
        let tool_calls: Vec<CallOut<'a>> = tool_calls
            .iter()
            .map(|c| CallOut {
                id: &c.id,
                kind: "function",
                function: FunctionOut { name: &c.name, arguments: &c.arguments },
            })
            .collect();
        let content = (tool_calls.is_empty() || !text.is_empty()).then_some(text);
        Completion {
            id,
            object: "chat.completion",
            created,
            model,
            choices: [Choice {
                index: 0,
                message: AnswerMessage { role: "assistant", content, tool_calls },
                finish_reason: finish.unwrap_or(FinishReason::Stop).as_str(),
                logprobs: None,
            }],
            usage,
        }
    }
}
