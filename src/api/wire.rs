//! OpenAI chat-completions wire types on the client side, and their decoding into the
//! canonical request with errors that name the offending field.

use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::canonical::{
    compile_schema, ChatRequest, FinishReason, Image, Message, ResponseFormat, Role, Tool, ToolCall, Usage,
};

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
    /// Read as JSON and checked by [`response_format`], so that a wrong shape names its field.
    #[serde(default)]
    pub response_format: Option<Value>,
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
    #[serde(default)]
    pub image_url: Option<WireImageUrl>,
}

/// `{"url": …, "detail": …}` of an `image_url` part (also accepted as a bare string).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum WireImageUrl {
    Object {
        url: String,
        #[serde(default)]
        detail: Option<String>,
    },
    Url(String),
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
            let mut images = Vec::new();
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
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
                images,
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
            response_format: self
                .response_format
                .as_ref()
                .map(response_format)
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

fn image_of(image: &WireImageUrl) -> Result<Image, String> {
    let (url, detail) = match image {
        WireImageUrl::Object { url, detail } => (url, detail.clone()),
        WireImageUrl::Url(url) => (url, None),
    };
    let image = Image { url: url.clone(), detail };
    if url.starts_with("data:") {
        if image.inline_data().is_none() {
            return Err("a data URL must look like data:image/png;base64,…".into());
        }
    } else if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err("`url` must be an http(s) address or a base64 data URL".into());
    }
    Ok(image)
}

/// OpenAI's `response_format`: `{"type": "text" | "json_object"}` or `{"type": "json_schema",
/// "json_schema": {"name", "schema", "strict"}}`. The schema must compile: a request whose
/// answer could never be checked is refused here, not after a backend has answered.
fn response_format(value: &Value) -> Result<ResponseFormat, ApiError> {
    let bad = |param: &str, why: String| Err(ApiError::bad_request(why).param(param));
    let Some(kind) = value.get("type").and_then(Value::as_str) else {
        return bad(
            "response_format.type",
            "`response_format` must be an object with `type`: text, json_object or json_schema".into(),
        );
    };
    match kind {
        "text" => Ok(ResponseFormat::Text),
        "json_object" => Ok(ResponseFormat::JsonObject),
        "json_schema" => {
            let Some(spec) = value.get("json_schema").filter(|s| s.is_object()) else {
                return bad(
                    "response_format.json_schema",
                    "`json_schema` (an object with `name` and `schema`) is required for type json_schema"
                        .into(),
                );
            };
            let name = match spec.get("name") {
                Some(Value::String(n)) if !n.is_empty() => n.clone(),
                _ => {
                    return bad(
                        "response_format.json_schema.name",
                        "`name` must be a non-empty string".into(),
                    )
                }
            };
            let schema = match spec.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
                None => return bad("response_format.json_schema.schema", "`schema` is required".into()),
                Some(_) => {
                    return bad(
                        "response_format.json_schema.schema",
                        "`schema` must be a JSON schema object".into(),
                    )
                }
            };
            if let Err(why) = compile_schema(&schema) {
                return bad("response_format.json_schema.schema", why);
            }
            let strict = match spec.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return bad("response_format.json_schema.strict", "`strict` must be true or false".into())
                }
            };
            Ok(ResponseFormat::JsonSchema { name, schema, strict })
        }
        other => bad(
            "response_format.type",
            format!("response_format type `{other}` is not one of text, json_object, json_schema"),
        ),
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

    fn canonical(body: &str) -> Result<ChatRequest, ApiError> {
        decode(body.as_bytes())?.to_canonical(None)
    }

    #[test]
    fn response_formats_decode_and_bad_shapes_name_their_field() {
        let with = |rf: &str| {
            format!(r#"{{"model":"t","messages":[{{"role":"user","content":"x"}}],"response_format":{rf}}}"#)
        };
        assert_eq!(canonical(&with(r#"{"type":"text"}"#)).unwrap().response_format, ResponseFormat::Text);
        assert_eq!(
            canonical(&with(r#"{"type":"json_object"}"#)).unwrap().response_format,
            ResponseFormat::JsonObject
        );
        let schema = json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]});
        let rf = json!({"type":"json_schema","json_schema":{"name":"count","schema":schema,"strict":true}});
        assert_eq!(
            canonical(&with(&rf.to_string())).unwrap().response_format,
            ResponseFormat::JsonSchema { name: "count".into(), schema, strict: true }
        );
        assert_eq!(canonical(&with("null")).unwrap().response_format, ResponseFormat::Text);
        for (rf, param) in [
            (r#""json""#, "response_format.type"),
            (r#"{"type":"yaml"}"#, "response_format.type"),
            (r#"{"type":"json_schema"}"#, "response_format.json_schema"),
            (r#"{"type":"json_schema","json_schema":{"schema":{}}}"#, "response_format.json_schema.name"),
            (r#"{"type":"json_schema","json_schema":{"name":"a"}}"#, "response_format.json_schema.schema"),
            (
                r#"{"type":"json_schema","json_schema":{"name":"a","schema":[1]}}"#,
                "response_format.json_schema.schema",
            ),
            (
                r#"{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"wizard"}}}"#,
                "response_format.json_schema.schema",
            ),
            (
                r#"{"type":"json_schema","json_schema":{"name":"a","schema":{},"strict":"yes"}}"#,
                "response_format.json_schema.strict",
            ),
        ] {
            let err = canonical(&with(rf)).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{rf}: {err:?}");
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn image_parts_are_carried_in_order_after_the_text() {
        let c = canonical(
            r#"{"model":"t","messages":[{"role":"user","content":[
                {"type":"text","text":"what is "},
                {"type":"image_url","image_url":{"url":"https://example.com/cat.png","detail":"low"}},
                {"type":"text","text":"this?"},
                {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}"#,
        )
        .unwrap();
        let m = &c.messages[0];
        assert_eq!(m.content, "what is this?");
        assert_eq!(
            m.images,
            [
                Image { url: "https://example.com/cat.png".into(), detail: Some("low".into()) },
                Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None },
            ]
        );
        assert_eq!(m.images[1].inline_data(), Some(("image/png", "iVBORw0KGgo=")));
        assert!(c.has_images());

        let bad = |content: &str, role: &str| {
            canonical(&format!(r#"{{"model":"t","messages":[{{"role":"{role}","content":{content}}}]}}"#))
                .unwrap_err()
        };
        let err = bad(r#"[{"type":"image_url","image_url":{"url":"ftp://x/a.png"}}]"#, "user");
        assert_eq!(err.param.as_deref(), Some("messages[0].content[0].image_url"));
        let err = bad(r#"[{"type":"image_url","image_url":{"url":"data:;base64,"}}]"#, "user");
        assert_eq!(err.param.as_deref(), Some("messages[0].content[0].image_url"));
        let err = bad(r#"[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]"#, "system");
        assert_eq!(err.param.as_deref(), Some("messages[0].content[0]"));
        let err = bad(r#"[{"type":"image_url"}]"#, "user");
        assert_eq!(err.param.as_deref(), Some("messages[0].content[0]"));
        let err = bad(r#"[{"type":"input_audio"}]"#, "user");
        assert!(err.message.contains("input_audio"), "{err:?}");
    }
}
