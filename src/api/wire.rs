//! OpenAI chat-completions wire types on the client side, and their decoding into the
//! canonical request with errors that name the offending field.

use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::canonical::{ChatRequest, FinishReason, Message, Role, Tool, ToolCall, Usage};

#[derive(Debug, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub stop: Option<StopField>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub tools: Option<Vec<WireTool>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub n: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: Role,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct WireToolCall {
    pub id: String,
    pub function: WireFunctionCall,
}

#[derive(Debug, Deserialize)]
pub struct WireFunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

#[derive(Debug, Deserialize)]
pub struct WireTool {
    pub function: WireFunction,
}

#[derive(Debug, Deserialize)]
pub struct WireFunction {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Value,
}

/// Decode a request body; a type error names the field (`messages[0].role`).
pub fn decode(body: &[u8]) -> Result<ChatCompletionRequest, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("the body is not valid JSON: {inner}")).code("invalid_json")
        } else if path == "." {
            ApiError::bad_request(format!("invalid request: {inner}"))
        } else {
            ApiError::bad_request(format!("invalid field `{path}`: {inner}")).param(path)
        }
    })
}

impl ChatCompletionRequest {
    pub fn wants_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options.as_ref().is_some_and(|o| o.include_usage)
    }

    /// The canonical request (without `model`, which dispatch fills per backend), checking
    /// what the types could not.
    pub fn to_canonical(&self, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::bad_request("`messages` must not be empty").param("messages"));
        }
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad_request("only n = 1 is supported").param("n"));
        }
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(
                ApiError::bad_request(format!("`temperature` {t} is outside 0 to 2")).param("temperature")
            );
        }
        if let Some(p) = self.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(ApiError::bad_request(format!("`top_p` {p} is outside 0 to 1")).param("top_p"));
        }
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for (j, part) in parts.iter().enumerate() {
                        match (part.kind.as_str(), &part.text) {
                            ("text", Some(t)) => text.push_str(t),
                            _ => {
                                return Err(ApiError::bad_request(format!(
                                    "content part type `{}` is not supported; only text parts are",
                                    part.kind
                                ))
                                .param(format!("messages[{i}].content[{j}]")))
                            }
                        }
                    }
                    text
                }
            };
            let tool_calls = m
                .tool_calls
                .iter()
                .flatten()
                .map(|c| ToolCall {
                    id: c.id.clone(),
                    name: c.function.name.clone(),
                    arguments: c.function.arguments.clone(),
                })
                .collect();
            if m.role == Role::Tool && m.tool_call_id.is_none() {
                return Err(ApiError::bad_request("a tool message needs `tool_call_id`")
                    .param(format!("messages[{i}].tool_call_id")));
            }
            messages.push(Message {
                role: m.role,
                content,
                tool_calls,
                tool_call_id: m.tool_call_id.clone(),
            });
        }
        let asked = self.max_completion_tokens.or(self.max_tokens);
        if asked == Some(0) {
            return Err(ApiError::bad_request("`max_tokens` must be at least 1").param("max_tokens"));
        }
        let max_tokens = match (asked, output_cap) {
            (Some(a), Some(cap)) => Some(a.min(cap)),
            (a, cap) => a.or(cap),
        };
        Ok(ChatRequest {
            model: String::new(),
            messages,
            max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            stop: match &self.stop {
                None => Vec::new(),
                Some(StopField::One(s)) => vec![s.clone()],
                Some(StopField::Many(v)) => v.clone(),
            },
            tools: self
                .tools
                .iter()
                .flatten()
                .map(|t| Tool {
                    name: t.function.name.clone(),
                    description: t.function.description.clone(),
                    parameters: t.function.parameters.clone(),
                })
                .collect(),
            tool_choice: self.tool_choice.clone(),
            seed: self.seed,
            stream: self.wants_stream(),
        })
    }
}

/// OpenAI's `usage` object.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens},
    })
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
        "usage": usage_json(usage),
    })
}

/// One `chat.completion.chunk` with the given choices.
pub fn chunk_json(id: &str, model: &str, created: u64, choices: Value, usage: Option<&Usage>) -> Value {
    let mut chunk = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
    });
    if let Some(u) = usage {
        chunk["usage"] = usage_json(u);
    }
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_errors_name_the_field() {
        let err = decode(br#"{"model":"t","messages":[{"role":"wizard","content":"x"}]}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("messages[0].role"), "{err:?}");
        let err = decode(br#"{"model":"t","messages":[],"max_tokens":"many"}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
        let err = decode(br#"{"messages":[]}"#).unwrap_err();
        assert!(err.message.contains("model"), "{err:?}");
        let err = decode(b"{not json").unwrap_err();
        assert_eq!(err.code.as_deref(), Some("invalid_json"));
    }

    #[test]
    fn output_is_capped_by_the_task_and_parts_are_joined() {
        let req = decode(
            br#"{"model":"t","max_tokens":900,"stop":"END","messages":[
                {"role":"system","content":"be brief"},
                {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}]}"#,
        )
        .unwrap();
        let c = req.to_canonical(Some(400)).unwrap();
        assert_eq!(c.max_tokens, Some(400));
        assert_eq!(c.messages[1].content, "hello");
        assert_eq!(c.stop, ["END"]);
        assert_eq!(req.to_canonical(None).unwrap().max_tokens, Some(900));
        let bad =
            decode(br#"{"model":"t","temperature":3,"messages":[{"role":"user","content":"x"}]}"#).unwrap();
        assert_eq!(bad.to_canonical(None).unwrap_err().param.as_deref(), Some("temperature"));
    }
}
