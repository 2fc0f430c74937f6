//! OpenAI chat-completions wire types on the client side, and their decoding into the
//! canonical request with errors that name the offending field.
//!
//! Decoding is strict: the body must be one JSON object and nothing after it; a wrong type
//! names its field in `param` (`messages[0].role`) with code `invalid_type` or `invalid_value`,
//! and `invalid_json` is kept for bytes that are not JSON. What types cannot say (a message
//! without content, a tool schema that is not an object, a `tool_choice` naming no tool) is
//! checked once, at decode for messages and by [`ChatCompletionRequest::to_canonical`] for the
//! rest, so adapters only ever see shapes they can map faithfully. Nothing here panics on input.
//!
//! A body is read in one pass ([`decode_bytes`]): where the scan (`scan`) is sure of every
//! message, the conversation stays as the client wrote it; else it is decoded (`messages`), and
//! a refusal names its field.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::{ApiError, ErrorCode};
use crate::canonical::shallow::Shallow;
use crate::canonical::{ChatRequest, Conversation, Dialect, Operation, Role, Schema, Written, WrittenBody};

#[derive(Debug, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    /// The conversation, as the door read it ([`decode_bytes`]).
    #[serde(skip)]
    pub messages: Conversation,
    /// `messages` as written, for the door to decode where its one pass was not sure of it.
    #[serde(rename = "messages")]
    messages_written: Box<RawValue>,
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
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    /// Read as JSON and checked by [`response_format`], so that a wrong shape names its field.
    #[serde(default)]
    pub response_format: Option<Value>,
    /// The body as the client sent it, carried into the canonical request for an upstream of
    /// the same wire.
    #[serde(skip)]
    pub written: Option<WrittenBody>,
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
    pub tool_calls: Option<Vec<Object<WireToolCall>>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// A `T` read only from a JSON object. serde's derive also takes an array of the fields in
/// order (`["user", "hi"]` as a message), which no client means and no upstream takes.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_map(ObjectVisitor(PhantomData))
    }
}

impl<T> std::ops::Deref for Object<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Object<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
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
    /// Checked by [`tools`]: a JSON schema object, or absent for a function without parameters;
    /// kept as written.
    #[serde(default)]
    pub parameters: Schema,
}

/// Decode a chat completion request body, without keeping its bytes (an upstream gets the
/// body the canonical request writes).
pub fn decode(body: &[u8]) -> Result<ChatCompletionRequest, ApiError> {
    let request = decode_bytes(&bytes::Bytes::copy_from_slice(body))?;
    Ok(ChatCompletionRequest { written: None, ..request })
}

/// Decode a chat completion request body, in one pass where the scan is sure of its
/// conversation: kept as written ([`Conversation::written`]), read again only if an upstream
/// of another wire needs its messages. Else it is decoded, and a refusal names its field.
pub fn decode_bytes(body: &bytes::Bytes) -> Result<ChatCompletionRequest, ApiError> {
    if let Some(request) = scanned(body) {
        return Ok(request);
    }
    let request: ChatCompletionRequest = decode_json(body, "a chat completion request")?;
    let messages = decode_messages(request.messages_written.get().as_bytes()).map_err(invalid_value)?;
    let written = Some(WrittenBody::of(body.clone()));
    Ok(ChatCompletionRequest { messages: Conversation::from(messages), written, ..request })
}

/// The request in `body`, read in one pass ([`scan::walk`]), with its conversation as written
/// and where its members are, if the scan is sure of it.
fn scanned(body: &bytes::Bytes) -> Option<ChatCompletionRequest> {
    use serde::de::value::MapDeserializer;
    let walked = scan::walk(body)?;
    let facts = walked.conversation.facts(body)?;
    // The other members, typed from their slices; the conversation is read already.
    let members = walked.members.iter().copied();
    let map = MapDeserializer::<_, serde_json::Error>::new(members.chain([("messages", RawValue::NULL)]));
    let request = ChatCompletionRequest::deserialize(map).ok()?;
    let conversation = Written::new(body.clone(), facts, decode_written);
    let written = WrittenBody { bytes: body.clone(), members: Some(walked.spans.into()) };
    Some(ChatCompletionRequest {
        messages: Conversation::written(conversation),
        written: Some(written),
        ..request
    })
}

/// Decode a request body of any dialect: one JSON object (`what` names it in the error when
/// it is not one) and nothing after it. A wrong type or value names the field
/// (`param: messages[0].role`); bytes that are not JSON are `invalid_json`.
pub fn decode_json<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        // serde would read a JSON array as a struct's fields in order; a request is an object.
        return Err(match serde_json::from_slice::<IgnoredAny>(body) {
            Ok(_) => {
                ApiError::new(ErrorCode::InvalidType, format!("the body must be a JSON object ({what})"))
            }
            Err(e) => invalid_json(&e),
        });
    }
    // Read without tracking the path (an agent's 100 KB turn is thousands of values); a body
    // that fails is read again with it, for the error to name its field.
    let mut de = serde_json::Deserializer::from_slice(body);
    match T::deserialize(&mut de) {
        Ok(request) => {
            de.end().map_err(|e| invalid_json(&e))?;
            Ok(request)
        }
        Err(unnamed) => {
            let mut de = serde_json::Deserializer::from_slice(body);
            Err(match serde_path_to_error::deserialize::<_, T>(&mut de) {
                Err(err) => {
                    let path = err.path().to_string();
                    decode_error(path, err.into_inner())
                }
                Ok(_) => decode_error(".".to_string(), unnamed),
            })
        }
    }
}

/// Read an already parsed JSON value as `T`, a wrong type or value naming its field.
/// A body the typed reading took (one object of valid JSON) as its client wrote it, read as
/// deep as its `dialect`'s door and native backends read it.
pub fn as_written(bytes: &bytes::Bytes, dialect: Dialect) -> Result<std::sync::Arc<Shallow>, ApiError> {
    let body = Shallow::read(bytes.clone(), dialect.depth())
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidJson, "the body is not valid JSON"))?;
    Ok(std::sync::Arc::new(body))
}

pub fn decode_value<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        decode_error(path, err.into_inner())
    })
}

/// A check's refusal (`invalid_request`) as this door words it: `invalid_value`.
fn invalid_value(e: ApiError) -> ApiError {
    if e.code == ErrorCode::InvalidRequest {
        e.code(ErrorCode::InvalidValue)
    } else {
        e
    }
}

fn invalid_json(e: &serde_json::Error) -> ApiError {
    ApiError::new(ErrorCode::InvalidJson, format!("the body is not valid JSON: {e}"))
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
            let error = ApiError::new(ErrorCode::InvalidValue, format!("`{field}`: {text}"));
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
                return ApiError::new(ErrorCode::MissingField, format!("`{param}` is required")).param(param);
            }
            let code = if text.starts_with("invalid type:") {
                ErrorCode::InvalidType
            } else {
                ErrorCode::InvalidValue
            };
            match at {
                Some(at) => ApiError::new(code, format!("invalid field `{at}`: {text}")).param(at),
                None => ApiError::new(code, format!("invalid request: {text}")),
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
    /// what the types could not; each refusal names its field, with code `invalid_value`. The
    /// conversation and the tools move into it (an agent's turn is 100 KB of them): what is
    /// left of `self` is the request's head.
    pub fn to_canonical(&mut self, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
        self.checked(output_cap).map_err(invalid_value)
    }

    fn checked(&mut self, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
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
        let messages = std::mem::take(&mut self.messages);
        if messages.is_empty() {
            return Err(ApiError::bad_request("`messages` must not be empty").param("messages"));
        }
        let tools = tools(self.tools.as_deref_mut().unwrap_or_default())?;
        let tool_choice = self.tool_choice.as_ref().map(|choice| tool_choice(choice, &tools)).transpose()?;
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
            top_k: None,
            user: self.user.clone(),
            prompt_cache_key: self.prompt_cache_key.clone(),
            native: None,
            written: self.written.take(),
            stop: match &self.stop {
                None => Vec::new(),
                Some(StopField::One(s)) => vec![s.clone()],
                Some(StopField::Many(v)) => v.clone(),
            },
            tools,
            tool_choice,
            seed: self.seed,
            stream: self.wants_stream(),
            relay: self.wants_stream(),
            shadowed: false,
            response_format: self
                .response_format
                .as_ref()
                .map(response_format)
                .transpose()?
                .unwrap_or_default(),
            operation: Operation::Chat,
        })
    }
}

mod answer;
mod checks;
mod messages;
mod scan;
#[cfg(test)]
mod tests;

pub use answer::{Completion, WireUsage, COST_FIELD};
pub(crate) use checks::{image_of, response_format, tool_choice, tools};
use messages::{decode_messages, decode_written};
