//! OpenAI chat-completions wire types on the client side, and their decoding into the
//! canonical request with errors that name the offending field.
//!
//! Decoding is strict: the body must be one JSON object and nothing after it; a wrong type
//! names its field in `param` (`messages[0].role`) with code `invalid_type` or `invalid_value`,
//! and `invalid_json` is kept for bytes that are not JSON. What types cannot say (a message
//! without content, a tool schema that is not an object, a `tool_choice` naming no tool) is
//! checked by [`ChatCompletionRequest::to_canonical`], once, so adapters only ever see shapes
//! they can map faithfully. Nothing here panics on input.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::canonical::{
    compile_schema, ChatRequest, FinishReason, Image, Message, ResponseFormat, Role, Tool, ToolCall,
    ToolChoice, Usage,
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
    /// Read as JSON and checked by [`tool_choice`] against `tools`.
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

/// `stop`: one string or a list of them.
#[derive(Debug)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for StopField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match text_or(d, Shape::List, "a string or an array of strings")? {
            TextOr::Text(s) => StopField::One(s),
            TextOr::Other(v) => StopField::Many(v),
        })
    }
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: Role,
    /// `None` for `null` or absent: only an assistant message with tool calls may have none.
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// A message's `content`: a string or a list of parts.
#[derive(Debug)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match text_or(d, Shape::List, "a string or an array of content parts")? {
            TextOr::Text(s) => Content::Text(s),
            TextOr::Other(parts) => Content::Parts(parts),
        })
    }
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
#[derive(Debug)]
pub enum WireImageUrl {
    Object { url: String, detail: Option<String> },
    Url(String),
}

impl<'de> Deserialize<'de> for WireImageUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Object {
            url: String,
            #[serde(default)]
            detail: Option<String>,
        }
        Ok(match text_or::<D, Object>(d, Shape::Object, "a URL string or an object with `url`")? {
            TextOr::Text(url) => WireImageUrl::Url(url),
            TextOr::Other(Object { url, detail }) => WireImageUrl::Object { url, detail },
        })
    }
}

/// What a string-or-something field holds besides a string.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    List,
    Object,
}

enum TextOr<T> {
    Text(String),
    Other(T),
}

/// Read a field that is a string or a list (or an object) of `T`. One visitor instead of an
/// untagged enum: a wrong type is reported as one, at the field, and an error inside the list
/// or object keeps its own path (`messages[0].content[1].type`), where an untagged enum would
/// only say that nothing matched.
fn text_or<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    shape: Shape,
    expecting: &'static str,
) -> Result<TextOr<T>, D::Error> {
    struct TextOrVisitor<T> {
        shape: Shape,
        expecting: &'static str,
        of: PhantomData<T>,
    }
    impl<'de, T: Deserialize<'de>> Visitor<'de> for TextOrVisitor<T> {
        type Value = TextOr<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(self.expecting)
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            Ok(TextOr::Text(s.to_owned()))
        }

        fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
            Ok(TextOr::Text(s))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            if self.shape != Shape::List {
                return Err(de::Error::invalid_type(Unexpected::Seq, &self));
            }
            T::deserialize(SeqAccessDeserializer::new(seq)).map(TextOr::Other)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            if self.shape != Shape::Object {
                return Err(de::Error::invalid_type(Unexpected::Map, &self));
            }
            T::deserialize(MapAccessDeserializer::new(map)).map(TextOr::Other)
        }
    }
    d.deserialize_any(TextOrVisitor { shape, expecting, of: PhantomData })
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
    /// `function`, the only kind of tool there is to translate (absent: taken as `function`).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub function: WireFunction,
}

#[derive(Debug, Deserialize)]
pub struct WireFunction {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Checked by [`tools`]: a JSON schema object, or absent for a function without parameters.
    #[serde(default)]
    pub parameters: Value,
}

/// Decode a request body: one JSON object and nothing after it. A wrong type or value names
/// the field (`param: messages[0].role`); bytes that are not JSON are `invalid_json`.
pub fn decode(body: &[u8]) -> Result<ChatCompletionRequest, ApiError> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        // serde would read a JSON array as a struct's fields in order; a request is an object.
        return Err(match serde_json::from_slice::<IgnoredAny>(body) {
            Ok(_) => ApiError::bad_request("the body must be a JSON object (a chat completion request)")
                .code("invalid_type"),
            Err(e) => invalid_json(&e),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let request = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        decode_error(path, err.into_inner())
    })?;
    de.end().map_err(|e| invalid_json(&e))?;
    Ok(request)
}

fn invalid_json(e: &serde_json::Error) -> ApiError {
    ApiError::bad_request(format!("the body is not valid JSON: {e}")).code("invalid_json")
}

/// A decode error as the client should see it. serde reports every data error as text, in
/// serde's own fixed wording (`invalid type: …`, `missing field …`); that wording is the only
/// place the kind can be read from, so it is read here and nowhere else.
fn decode_error(path: String, e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    let at = (path != ".").then_some(path);
    let text = e.to_string();
    match e.classify() {
        // serde_json counts a number too big for any Rust number (`1e400`) as syntax; it is
        // valid JSON with a value out of range.
        Category::Syntax if text.starts_with("number out of range") => {
            let field = at.as_deref().unwrap_or("the body");
            let error = ApiError::bad_request(format!("`{field}`: {text}")).code("invalid_value");
            match at {
                Some(at) => error.param(at),
                None => error,
            }
        }
        Category::Syntax | Category::Eof | Category::Io => invalid_json(&e),
        Category::Data => {
            if let Some(field) = text.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
                let param = match &at {
                    Some(at) => format!("{at}.{field}"),
                    None => field.to_string(),
                };
                return ApiError::bad_request(format!("`{param}` is required"))
                    .code("missing_field")
                    .param(param);
            }
            let code = if text.starts_with("invalid type:") { "invalid_type" } else { "invalid_value" };
            match at {
                Some(at) => {
                    ApiError::bad_request(format!("invalid field `{at}`: {text}")).code(code).param(at)
                }
                None => ApiError::bad_request(format!("invalid request: {text}")).code(code),
            }
        }
    }
}

impl ChatCompletionRequest {
    pub fn wants_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options.as_ref().is_some_and(|o| o.include_usage)
    }

    /// The canonical request (without `model`, which dispatch fills per backend), checking
    /// what the types could not; each refusal names its field, with code `invalid_value`.
    pub fn to_canonical(&self, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
        self.checked(output_cap).map_err(|e| if e.code.is_none() { e.code("invalid_value") } else { e })
    }

    fn checked(&self, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
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
        let tools = tools(self.tools.as_deref().unwrap_or_default())?;
        let tool_choice = self.tool_choice.as_ref().map(|choice| tool_choice(choice, &tools)).transpose()?;
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let mut images = Vec::new();
            let content = match &m.content {
                None if m.role == Role::Assistant && m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) => {
                    String::new()
                }
                None => {
                    let why = match m.role {
                        Role::Assistant => "an assistant message needs `content` or `tool_calls`".to_string(),
                        role => format!(
                            "a {} message needs `content` (a string or an array of parts)",
                            role.as_str()
                        ),
                    };
                    return Err(ApiError::bad_request(why).param(format!("messages[{i}].content")));
                }
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
            tools,
            tool_choice,
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

/// The tools, each a `function` with a name used once and a parameter schema that is a JSON
/// schema object (or absent), so every adapter can map it as it is.
fn tools(wire: &[WireTool]) -> Result<Vec<Tool>, ApiError> {
    let mut names = HashSet::new();
    let mut tools = Vec::new();
    for (i, t) in wire.iter().enumerate() {
        let bad = |key: &str, why: String| Err(ApiError::bad_request(why).param(format!("tools[{i}].{key}")));
        if let Some(kind) = t.kind.as_deref().filter(|k| *k != "function") {
            return bad("type", format!("tool type `{kind}` is not supported; only `function` tools are"));
        }
        let f = &t.function;
        if f.name.is_empty() {
            return bad("function.name", "must not be empty".into());
        }
        if !names.insert(f.name.as_str()) {
            return bad("function.name", format!("`{}` is the name of another tool", f.name));
        }
        match &f.parameters {
            Value::Null => {}
            Value::Object(schema) => {
                if schema.get("type").is_some_and(|t| t != "object") {
                    return bad(
                        "function.parameters",
                        "a function's parameters must be a schema of `\"type\": \"object\"`".into(),
                    );
                }
                if let Err(why) = compile_schema(&f.parameters) {
                    return bad("function.parameters", why);
                }
            }
            _ => {
                return bad(
                    "function.parameters",
                    "`parameters` must be a JSON schema object (or left out for none)".into(),
                )
            }
        }
        tools.push(Tool {
            name: f.name.clone(),
            description: f.description.clone(),
            parameters: f.parameters.clone(),
        });
    }
    Ok(tools)
}

/// OpenAI's `tool_choice`: `"none"`, `"auto"`, `"required"`, or `{"type": "function",
/// "function": {"name"}}` naming one of `tools`. Like OpenAI, it needs `tools`.
fn tool_choice(value: &Value, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let bad = |param: &str, why: String| Err(ApiError::bad_request(why).param(param));
    const SHAPES: &str = r#""none", "auto", "required" or {"type": "function", "function": {"name": …}}"#;
    if tools.is_empty() {
        return bad("tool_choice", "`tool_choice` is only allowed with `tools`".into());
    }
    match value {
        Value::String(s) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => bad("tool_choice", format!("`tool_choice` `{other}` is not one of {SHAPES}")),
        },
        Value::Object(choice) => {
            match choice.get("type") {
                Some(Value::String(t)) if t == "function" => {}
                Some(Value::String(t)) => {
                    return bad(
                        "tool_choice.type",
                        format!("tool_choice type `{t}` is not supported; only `function` is"),
                    )
                }
                _ => {
                    return bad(
                        "tool_choice.type",
                        format!("`type` must be \"function\": `tool_choice` is one of {SHAPES}"),
                    )
                }
            }
            let Some(Value::String(name)) = choice.get("function").and_then(|f| f.get("name")) else {
                return bad(
                    "tool_choice.function.name",
                    "`tool_choice.function.name` must name one of `tools`".into(),
                );
            };
            if !tools.iter().any(|t| &t.name == name) {
                return bad("tool_choice.function.name", format!("no tool in `tools` is named `{name}`"));
            }
            Ok(ToolChoice::Function(name.clone()))
        }
        _ => bad("tool_choice", format!("`tool_choice` must be one of {SHAPES}")),
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

    /// A request with `extra` spliced in after `messages`.
    fn with(extra: &str) -> String {
        format!(r#"{{"model":"t","messages":[{{"role":"user","content":"x"}}]{extra}}}"#)
    }

    #[track_caller]
    fn refused(body: &[u8]) -> ApiError {
        let err = match decode(body) {
            Ok(req) => req.to_canonical(None).expect_err("accepted"),
            Err(err) => err,
        };
        assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST, "{err:?}");
        err
    }

    #[test]
    fn bytes_after_the_object_are_not_json() {
        let body = with("");
        assert!(decode(format!(" {body}\n\t ").as_bytes()).is_ok());
        for tail in ["x", "{}", "]", "\"more\"", ",", "\0"] {
            let err = refused(format!("{body}{tail}").as_bytes());
            assert_eq!(err.code.as_deref(), Some("invalid_json"), "{tail:?}: {err:?}");
            assert!(err.message.contains("trailing"), "{err:?}");
        }
        for not_object in ["[]", "\"t\"", "3", "null", r#"["t", [{"role": "user", "content": "x"}]]"#] {
            let err = refused(not_object.as_bytes());
            assert_eq!(err.code.as_deref(), Some("invalid_type"), "{not_object}: {err:?}");
        }
        assert_eq!(refused(b"").code.as_deref(), Some("invalid_json"));
        assert_eq!(refused(b"nonsense").code.as_deref(), Some("invalid_json"));
    }

    #[test]
    fn user_system_and_tool_messages_need_content() {
        let messages =
            |m: &str| format!(r#"{{"model":"t","messages":[{{"role":"user","content":"x"}},{m}]}}"#);
        for m in [
            r#"{"role":"user","content":null}"#,
            r#"{"role":"user"}"#,
            r#"{"role":"system","content":null}"#,
            r#"{"role":"tool","tool_call_id":"c","content":null}"#,
            r#"{"role":"assistant","content":null}"#,
            r#"{"role":"assistant","content":null,"tool_calls":[]}"#,
        ] {
            let err = refused(messages(m).as_bytes());
            assert_eq!(err.param.as_deref(), Some("messages[1].content"), "{m}: {err:?}");
        }
        let call = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}"#;
        let c = canonical(&messages(call)).unwrap();
        assert_eq!(c.messages[1].content, "");
        assert_eq!(c.messages[1].tool_calls[0].name, "f");
        assert_eq!(canonical(&messages(r#"{"role":"user","content":""}"#)).unwrap().messages[1].content, "");
    }

    #[test]
    fn every_wrong_type_or_value_names_its_field() {
        let msg = |m: &str| format!(r#"{{"model":"t","messages":[{m}]}}"#);
        for (body, param, code) in [
            (msg(r#"{"role":1,"content":"x"}"#), "messages[0].role", "invalid_type"),
            (msg(r#"{"role":["user"],"content":"x"}"#), "messages[0].role", "invalid_type"),
            (msg(r#"{"role":"wizard","content":"x"}"#), "messages[0].role", "invalid_value"),
            (msg(r#"{"content":"x"}"#), "messages[0].role", "missing_field"),
            (msg(r#"{"role":"user","content":5}"#), "messages[0].content", "invalid_type"),
            (msg(r#"{"role":"user","content":{"text":"x"}}"#), "messages[0].content", "invalid_type"),
            (msg(r#"{"role":"user","content":[{"type":1}]}"#), "messages[0].content[0].type", "invalid_type"),
            (msg(r#"{"role":"user","content":["x"]}"#), "messages[0].content[0]", "invalid_type"),
            (
                msg(r#"{"role":"user","content":[{"type":"image_url","image_url":7}]}"#),
                "messages[0].content[0].image_url",
                "invalid_type",
            ),
            (
                msg(r#"{"role":"user","content":[{"type":"image_url","image_url":{"detail":"low"}}]}"#),
                "messages[0].content[0].image_url.url",
                "missing_field",
            ),
            (
                msg(r#"{"role":"tool","content":"x","tool_call_id":3}"#),
                "messages[0].tool_call_id",
                "invalid_type",
            ),
            (msg(r#"{"role":"assistant","tool_calls":{}}"#), "messages[0].tool_calls", "invalid_type"),
            (msg(r#""hello""#), "messages[0]", "invalid_type"),
            (r#"{"model":"t","messages":{}}"#.into(), "messages", "invalid_type"),
            (r#"{"model":5,"messages":[]}"#.into(), "model", "invalid_type"),
            (r#"{"messages":[]}"#.into(), "model", "missing_field"),
            (with(r#","stream":"yes""#), "stream", "invalid_type"),
            (
                with(r#","stream_options":{"include_usage":1}"#),
                "stream_options.include_usage",
                "invalid_type",
            ),
            (with(r#","max_tokens":"many""#), "max_tokens", "invalid_type"),
            (with(r#","max_tokens":1.5"#), "max_tokens", "invalid_type"),
            (with(r#","max_tokens":-1"#), "max_tokens", "invalid_value"),
            (with(r#","max_tokens":4294967296"#), "max_tokens", "invalid_value"),
            (with(r#","max_completion_tokens":true"#), "max_completion_tokens", "invalid_type"),
            (with(r#","temperature":"hot""#), "temperature", "invalid_type"),
            (with(r#","stop":5"#), "stop", "invalid_type"),
            (with(r#","stop":["a",5]"#), "stop[1]", "invalid_type"),
            (with(r#","tools":"x""#), "tools", "invalid_type"),
            (with(r#","tools":[{"function":{"name":7}}]"#), "tools[0].function.name", "invalid_type"),
            (with(r#","tools":[{"type":"function"}]"#), "tools[0].function", "missing_field"),
            (with(r#","seed":"s""#), "seed", "invalid_type"),
            (with(r#","n":[1]"#), "n", "invalid_type"),
        ] {
            let err = refused(body.as_bytes());
            assert_eq!(
                (err.param.as_deref(), err.code.as_deref()),
                (Some(param), Some(code)),
                "{body}: {err:?}"
            );
            assert!(err.message.contains(param), "the message names `{param}`: {err:?}");
        }
    }

    #[test]
    fn tool_schemas_and_tool_choice_are_checked_before_any_backend_sees_them() {
        let tools = r#","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},{"type":"function","function":{"name":"g"}}]"#;
        for (extra, param) in [
            (
                r#","tools":[{"function":{"name":"f","parameters":"garbage"}}]"#.to_string(),
                "tools[0].function.parameters",
            ),
            (
                r#","tools":[{"function":{"name":"f","parameters":[1]}}]"#.into(),
                "tools[0].function.parameters",
            ),
            (
                r#","tools":[{"function":{"name":"f","parameters":{"type":"string"}}}]"#.into(),
                "tools[0].function.parameters",
            ),
            (
                r#","tools":[{"function":{"name":"f","parameters":{"type":"wizard"}}}]"#.into(),
                "tools[0].function.parameters",
            ),
            (r#","tools":[{"type":"custom","function":{"name":"f"}}]"#.into(), "tools[0].type"),
            (r#","tools":[{"function":{"name":""}}]"#.into(), "tools[0].function.name"),
            (
                r#","tools":[{"function":{"name":"f"}},{"function":{"name":"f"}}]"#.into(),
                "tools[1].function.name",
            ),
            (format!(r#"{tools},"tool_choice":42"#), "tool_choice"),
            (format!(r#"{tools},"tool_choice":["auto"]"#), "tool_choice"),
            (format!(r#"{tools},"tool_choice":"sometimes""#), "tool_choice"),
            (format!(r#"{tools},"tool_choice":{{}}"#), "tool_choice.type"),
            (format!(r#"{tools},"tool_choice":{{"function":{{"name":"f"}}}}"#), "tool_choice.type"),
            (
                format!(r#"{tools},"tool_choice":{{"type":"allowed_tools","function":{{"name":"f"}}}}"#),
                "tool_choice.type",
            ),
            (
                format!(r#"{tools},"tool_choice":{{"type":"function","name":"f"}}"#),
                "tool_choice.function.name",
            ),
            (
                format!(r#"{tools},"tool_choice":{{"type":"function","function":{{"name":1}}}}"#),
                "tool_choice.function.name",
            ),
            (
                format!(r#"{tools},"tool_choice":{{"type":"function","function":{{"name":"ghost"}}}}"#),
                "tool_choice.function.name",
            ),
            (r#","tool_choice":"auto""#.into(), "tool_choice"),
            (r#","tools":[],"tool_choice":"required""#.into(), "tool_choice"),
        ] {
            let err = refused(with(&extra).as_bytes());
            assert_eq!(err.param.as_deref(), Some(param), "{extra}: {err:?}");
        }
        let choice =
            |c: &str| canonical(&with(&format!(r#"{tools},"tool_choice":{c}"#))).unwrap().tool_choice;
        assert_eq!(choice("null"), None);
        assert_eq!(choice(r#""none""#), Some(ToolChoice::None));
        assert_eq!(choice(r#""auto""#), Some(ToolChoice::Auto));
        assert_eq!(choice(r#""required""#), Some(ToolChoice::Required));
        assert_eq!(
            choice(r#"{"type":"function","function":{"name":"g"}}"#),
            Some(ToolChoice::Function("g".into()))
        );
        let c = canonical(&with(tools)).unwrap();
        assert_eq!(c.tools[0].parameters, json!({"type": "object"}));
        assert_eq!(c.tools[1].parameters, Value::Null);
        assert_eq!(c.tool_choice, None);
    }

    #[test]
    fn hostile_bodies_get_a_400_not_a_panic() {
        let deep = |open: &str, n: usize| open.repeat(n);
        let nested = |key: &str, value: String| with(&format!(r#","{key}":{value}"#)).into_bytes();
        let parameters = |schema: String| {
            with(&format!(r#","tools":[{{"function":{{"name":"f","parameters":{schema}}}}}]"#)).into_bytes()
        };
        for (body, code, param) in [
            (deep("[", 100_000).into_bytes(), "invalid_json", None),
            (deep("{\"a\":", 100_000).into_bytes(), "invalid_json", None),
            (format!(r#"{{"model":{}"#, deep("[", 100_000)).into_bytes(), "invalid_type", Some("model")),
            // Untyped fields are read as JSON values: serde_json stops at 128 levels.
            (nested("tool_choice", deep("[", 100_000)), "invalid_json", None),
            (nested("response_format", deep("{\"a\":", 100_000)), "invalid_json", None),
            (parameters(deep("[", 100_000)), "invalid_json", None),
            (
                nested("tool_choice", format!("{}1{}", deep("[", 100), deep("]", 100))),
                "invalid_value",
                Some("tool_choice"),
            ),
            (
                parameters(format!("{}1{}", deep("[", 100), deep("]", 100))),
                "invalid_value",
                Some("tools[0].function.parameters"),
            ),
        ] {
            let err = refused(&body);
            assert_eq!((err.code.as_deref(), err.param.as_deref()), (Some(code), param), "{err:?}");
        }
        for (number, code) in [
            ("1e400", "invalid_value"),
            ("-1e400", "invalid_value"),
            ("99999999999999999999", "invalid_type"),
            ("1e10", "invalid_type"),
        ] {
            let err = refused(with(&format!(r#","max_tokens":{number}"#)).as_bytes());
            assert_eq!(
                (err.param.as_deref(), err.code.as_deref()),
                (Some("max_tokens"), Some(code)),
                "{number}: {err:?}"
            );
        }
        let err = refused(with(r#","temperature":1e400"#).as_bytes());
        assert_eq!(err.param.as_deref(), Some("temperature"), "{err:?}");
        // Invalid UTF-8 inside a string, in a key, and as the whole body.
        for body in [
            b"{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}".to_vec(),
            b"{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"con\xc3tent\":\"x\"}]}".to_vec(),
            b"{\"model\":\"\xed\xa0\x80\",\"messages\":[]}".to_vec(),
            vec![0xff; 64],
            b"{\"model\":\"\\ud800\",\"messages\":[]}".to_vec(),
        ] {
            let err = refused(&body);
            assert_eq!(
                err.code.as_deref(),
                Some("invalid_json"),
                "{:?}: {err:?}",
                String::from_utf8_lossy(&body)
            );
        }
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
        let with_rf = |rf: &str| {
            format!(r#"{{"model":"t","messages":[{{"role":"user","content":"x"}}],"response_format":{rf}}}"#)
        };
        assert_eq!(canonical(&with_rf(r#"{"type":"text"}"#)).unwrap().response_format, ResponseFormat::Text);
        assert_eq!(
            canonical(&with_rf(r#"{"type":"json_object"}"#)).unwrap().response_format,
            ResponseFormat::JsonObject
        );
        let schema = json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]});
        let rf = json!({"type":"json_schema","json_schema":{"name":"count","schema":schema,"strict":true}});
        assert_eq!(
            canonical(&with_rf(&rf.to_string())).unwrap().response_format,
            ResponseFormat::JsonSchema { name: "count".into(), schema, strict: true }
        );
        assert_eq!(canonical(&with_rf("null")).unwrap().response_format, ResponseFormat::Text);
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
            let err = canonical(&with_rf(rf)).unwrap_err();
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
