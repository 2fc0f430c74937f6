//! The one request shape and the one event stream that every part of Spillway speaks inside.
//!
//! The API decodes OpenAI wire JSON into [`ChatRequest`]; adapters translate it into each
//! provider's wire format and translate the provider's answer back into [`Event`]s. Nothing in
//! here knows about HTTP or any provider.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One tool call made by the assistant in an earlier turn (or streamed now).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text of the arguments, as the model wrote it.
    pub arguments: String,
}

/// A message of the conversation; content is plain text (text parts are joined on decode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: which call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message { role, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// JSON schema of the parameters.
    #[serde(default)]
    pub parameters: Value,
}

/// The canonical chat request: what the client asked for, with the task already resolved.
/// `model` is filled in by dispatch with the concrete model of the target backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub tools: Vec<Tool>,
    /// OpenAI-style tool_choice value, passed through where the provider understands it.
    pub tool_choice: Option<Value>,
    pub seed: Option<u64>,
    /// Ask the upstream for a streamed answer.
    pub stream: bool,
}

impl ChatRequest {
    /// The system prompt: every system message joined by blank lines, if any.
    pub fn system_prompt(&self) -> Option<String> {
        let parts: Vec<&str> =
            self.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// A rough prompt size in tokens (4 characters a token), for estimates made before a
    /// backend has counted: cost ordering and capacity planning.
    pub fn estimated_prompt_tokens(&self) -> u32 {
        let chars: usize = self.messages.iter().map(|m| m.content.len() + 4).sum();
        (chars / 4) as u32 + 1
    }
}

/// Tokens as the serving backend counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u32,
    /// Input tokens served from the provider's prompt cache (a subset of `input_tokens`).
    pub cached_input_tokens: u32,
    pub output_tokens: u32,
}

/// Why the model stopped, in OpenAI's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
        }
    }
}

/// One step of a model's answer. A well-formed stream has deltas, then at most one `Usage`
/// and one `Finish` (in either order), then ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    TextDelta(String),
    /// A piece of a tool call; `id` and `name` come with the first piece of each index.
    ToolCallDelta {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage(Usage),
    Finish(FinishReason),
}

impl Event {
    /// Whether this event is model output, the moment dispatch commits to a backend.
    pub fn is_output(&self) -> bool {
        matches!(self, Event::TextDelta(_) | Event::ToolCallDelta { .. })
    }
}
