//! What a client gets back in OpenAI's words: the `usage` object (shared by whole answers and
//! the last chunk of a stream) and a whole `chat.completion`.

use serde::Serialize;
use serde_json::{json, Value};

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

/// A whole `chat.completion` object.
pub fn completion_json(
    id: &str,
    model: &str,
    created: u64,
    text: &str,
    tool_calls: &[ToolCall],
    finish: Option<FinishReason>,
    usage: &Usage,
) -> Value {
    let mut message = json!({"role": "assistant", "content": text});
    if !tool_calls.is_empty() {
        message["tool_calls"] = tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
        if text.is_empty() {
            message["content"] = Value::Null;
        }
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish.unwrap_or(FinishReason::Stop).as_str(),
            "logprobs": null,
        }],
        "usage": WireUsage::from(usage),
    })
}
