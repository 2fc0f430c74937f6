//! The one request shape and the one event stream that every part of Spillway speaks inside.
//!
//! The API decodes OpenAI wire JSON into [`ChatRequest`]; adapters translate it into each
//! provider's wire format and translate the provider's answer back into [`Event`]s. Nothing in
//! here knows about HTTP or any provider.

mod affinity;
mod cache;
mod conversation;
mod engine;
mod error;
mod id;
pub mod members;
mod name;
mod native;
mod operation;
mod principal;
mod schema;
pub mod shallow;
mod whole;

use std::ops::Range;

use serde::{Deserialize, Serialize};

pub use affinity::{Affinity, AffinitySource};
pub use cache::{CachePlacement, MAX_BREAKPOINTS};
pub use conversation::{unescaped_len, Conversation, Facts, Written};
pub use engine::Engine;
pub use error::{ErrorClass, UpstreamError};
pub use id::NodeKey;
pub use name::{BackendName, TaskName, TeamName};
pub use native::{anthropics_own, prepended, Dialect, NativeEvent, NativeRequest, Prepended};
pub use operation::{
    vector_from_base64, vector_to_base64, Completion, Embedding, EncodingFormat, Input, Operation,
};
pub use principal::{IssuedKey, KeyId, Principal};
pub use schema::{check_schema, compile_schema, Schema, SchemaKind};
use serde_json::Value;
pub use whole::WholeAnswer;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::System, Role::User, Role::Assistant, Role::Tool];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// Read from a string only. The derived impl would go through `deserialize_enum`, where
/// serde_json reports a number or a list as a *syntax* error ("expected value"), so a wrong
/// type such as `"role": 1` would look like broken JSON instead of naming its field.
impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RoleVisitor;
        impl serde::de::Visitor<'_> for RoleVisitor {
            type Value = Role;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("one of system, user, assistant, tool")
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Role, E> {
                Role::ALL
                    .into_iter()
                    .find(|r| r.as_str() == s)
                    .ok_or_else(|| E::unknown_variant(s, &["system", "user", "assistant", "tool"]))
            }
        }
        deserializer.deserialize_str(RoleVisitor)
    }
}

/// One tool call made by the assistant in an earlier turn (or streamed now).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text of the arguments, as the model wrote it.
    pub arguments: String,
}

/// An image attached to a user message (an OpenAI `image_url` content part).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// An `https://` address, or a `data:{media type};base64,{data}` URL with the bytes inline.
    pub url: String,
    /// OpenAI's `detail` (`low`, `high`, `auto`), passed on where the provider has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Image {
    /// For a base64 `data:` URL: its media type and its base64 data.
    pub fn inline_data(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("data:")?;
        let (media_type, data) = rest.split_once(";base64,")?;
        (!media_type.is_empty()).then_some((media_type, data))
    }

    /// The media type: the `data:` URL's, else guessed from the address's extension
    /// (`image/jpeg` when it says nothing), for providers that want one with a URL.
    pub fn media_type(&self) -> &str {
        if let Some((media_type, _)) = self.inline_data() {
            return media_type;
        }
        let path = self.url.split(['?', '#']).next().unwrap_or("").to_ascii_lowercase();
        match path.rsplit_once('.').map(|(_, ext)| ext) {
            Some("png") => "image/png",
            Some("gif") => "image/gif",
            Some("webp") => "image/webp",
            Some("heic") => "image/heic",
            _ => "image/jpeg",
        }
    }
}

/// A message of the conversation; content is plain text (text parts are joined on decode) and
/// the images of a user message follow its text, in their order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: which call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            images: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// What shape the answer's text must have (OpenAI's `response_format`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    #[default]
    Text,
    /// Any one JSON value (OpenAI's "JSON mode").
    JsonObject,
    /// JSON valid against `schema`.
    JsonSchema {
        name: String,
        schema: Value,
        /// OpenAI's `strict`: constrained decoding where the provider offers it.
        #[serde(default)]
        strict: bool,
    },
}

impl ResponseFormat {
    /// Must the answer be JSON (so dispatch reads it whole and checks it before committing)?
    pub fn wants_json(&self) -> bool {
        !matches!(self, ResponseFormat::Text)
    }

    /// Check an answer's text against this format: `Err` says what is wrong, for logs and
    /// the attempt record. A schema that does not compile is reported as such (the API
    /// refuses those before dispatch, so it does not happen there).
    pub fn check(&self, text: &str) -> Result<(), String> {
        let schema = match self {
            ResponseFormat::Text => return Ok(()),
            ResponseFormat::JsonObject => None,
            ResponseFormat::JsonSchema { schema, .. } => Some(schema),
        };
        let value: Value = serde_json::from_str(text.trim())
            .map_err(|e| format!("the answer is not JSON ({e}): {}", excerpt(text)))?;
        let Some(schema) = schema else { return Ok(()) };
        let validator = compile_schema(schema)?;
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .take(3)
            .map(|e| format!("{e} at `{}`", e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("the answer does not match the response schema: {}", errors.join("; ")))
        }
    }
}

fn excerpt(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    if cut.len() < text.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// JSON schema of the parameters, as the client wrote it: an object (the API refuses any
    /// other shape), or null for a function that takes none.
    #[serde(default)]
    pub parameters: Schema,
}

/// Whether and which tool the model must call (OpenAI's `tool_choice`), checked against the
/// request's tools when it is decoded, so every adapter maps a known-good value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// Call no tool.
    None,
    /// The model decides.
    Auto,
    /// Call at least one tool.
    Required,
    /// Call this function (one of the request's tools).
    Function(String),
}

/// The canonical chat request: what the client asked for, with the task already resolved.
/// `model` is filled in by dispatch with the concrete model of the target backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Conversation,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Sample from the k likeliest tokens (Anthropic, Gemini; dropped for OpenAI-format
    /// backends, whose public APIs refuse it).
    #[serde(default)]
    pub top_k: Option<u32>,
    /// Who the end user is, for the provider's abuse monitoring (OpenAI `user`, Anthropic
    /// `metadata.user_id`).
    #[serde(default)]
    pub user: Option<String>,
    /// OpenAI's `prompt_cache_key`: which requests share a prompt cache. Sent on to OpenAI
    /// itself only; an affinity source either way.
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub tools: Vec<Tool>,
    /// `None`: the client did not say (each provider's default, which is `auto` with tools).
    pub tool_choice: Option<ToolChoice>,
    pub seed: Option<u64>,
    /// The client asked for a streamed answer (whether an upstream streams is the call's: `adapter::Call`).
    pub stream: bool,
    /// The shape the answer must have; JSON formats are checked by dispatch before it commits.
    #[serde(default)]
    pub response_format: ResponseFormat,
    /// The client reads OpenAI chat completion chunks: an upstream that writes them too may
    /// hand each one on as [`Event::Relay`] ([`ChatRequest::relaying`]), so the client
    /// gets the upstream's own fields (logprobs, reasoning text, fingerprints) unchanged.
    #[serde(skip)]
    pub relay: bool,
    /// A shadow grades this answer against others (`gate::shadow`): something beside the
    /// client reads its text, so a relaying adapter reads each chunk's canonical events too.
    #[serde(skip)]
    pub shadowed: bool,
    /// The client's own request, for a backend that speaks the client's dialect: sent with
    /// only `model`, `max_tokens` and `stream` rewritten, so every field Spillway does not
    /// model reaches it. With `relay`, such a backend also hands each of its events on raw as
    /// [`Event::Native`] ([`ChatRequest::relaying`]).
    #[serde(skip)]
    pub native: Option<NativeRequest>,
    /// The client's chat-completions body as it sent it (the chat door's requests): a backend
    /// of OpenAI's chat wire gets these bytes with only the members Spillway owns rewritten
    /// (`adapter::wire::written`), so an agent's history is never written out again.
    #[serde(skip)]
    pub written: Option<WrittenBody>,
    /// What is asked for: a chat answer to `messages` unless a front door says otherwise.
    #[serde(default)]
    pub operation: Operation,
}

impl ChatRequest {
    /// How an adapter whose upstream writes what the client reads (`clients_own`: OpenAI chat
    /// chunks for [`ChatRequest::relay`], the client's native dialect) hands its chunks on.
    pub fn relaying(&self, clients_own: bool) -> Relaying {
        if !(self.relay && clients_own) {
            Relaying::Off
        } else if self.shadowed || self.response_format.wants_json() {
            Relaying::WithEvents
        } else {
            Relaying::Alone
        }
    }

    /// The messages to change. The client's body as written no longer says what is asked, so
    /// it is dropped: an upstream gets the body the canonical request writes.
    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        self.written = None;
        self.messages.to_mut()
    }

    /// Whether any message carries an image.
    pub fn has_images(&self) -> bool {
        self.messages.images() > 0
    }

    /// A rough prompt size in tokens (4 characters a token), for estimates made before a
    /// backend has counted: cost ordering and capacity planning.
    pub fn estimated_prompt_tokens(&self) -> u32 {
        let mut chars = self.messages.text_bytes() + 4 * self.messages.len();
        if let Some(input) = self.operation.input() {
            chars += input.texts().iter().map(|t| t.len()).sum::<usize>() + 4 * input.token_ids();
        }
        (chars / 4) as u32 + 1
    }
}

/// A client's body as it sent it, and where its top-level members are when the door's one
/// pass found them.
#[derive(Debug, Clone, PartialEq)]
pub struct WrittenBody {
    pub bytes: bytes::Bytes,
    pub members: Option<std::sync::Arc<[MemberSpan]>>,
}

/// Where one member of a JSON object is in its text: the key as written (quotes included) and
/// the value.
pub type MemberSpan = (Range<usize>, Range<usize>);

impl WrittenBody {
    /// A body whose members have not been found yet.
    pub fn of(bytes: bytes::Bytes) -> WrittenBody {
        WrittenBody { bytes, members: None }
    }
}

/// Tokens as the serving backend counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Every prompt token: uncached, read from the cache and written to it.
    pub input_tokens: u32,
    /// Input tokens served from the provider's prompt cache (a subset of `input_tokens`).
    pub cached_input_tokens: u32,
    pub output_tokens: u32,
    /// Input tokens written to the provider's prompt cache (a subset of `input_tokens`, apart
    /// from `cached_input_tokens`; Anthropic's `cache_creation_input_tokens`).
    #[serde(default)]
    pub cache_write_tokens: u32,
}

impl Usage {
    /// Input tokens neither read from the cache nor written to it.
    pub fn uncached_input_tokens(&self) -> u32 {
        self.input_tokens.saturating_sub(self.cached_input_tokens).saturating_sub(self.cache_write_tokens)
    }

    /// What counts toward a per-minute token limit: every token, less those read from the
    /// cache where the provider does not count them (`counts_cached` false). Nothing when
    /// the backend reported no usage (zero input and output).
    pub fn quota_tokens(&self, counting: QuotaCounting) -> u64 {
        let input = if counting.counts_cached {
            self.input_tokens
        } else {
            self.input_tokens.saturating_sub(self.cached_input_tokens)
        };
        if self.input_tokens == 0 && self.output_tokens == 0 {
            return 0;
        }
        u64::from(input) + u64::from(self.output_tokens) * u64::from(counting.output_weight)
    }
}

/// How a provider's per-minute token quota counts a request: whether prompt tokens read from
/// its cache count, and how many quota tokens one output token uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaCounting {
    pub counts_cached: bool,
    pub output_weight: u32,
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

/// The canonical events of one upstream answer. Ends after the last event; an `Err` item means
/// the stream broke (it is the last item).
pub type EventStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Event, UpstreamError>> + Send>>;

/// One step of a model's answer. A well-formed stream has deltas, then at most one `Usage`
/// and one `Finish` (in either order), then ends. With [`ChatRequest::relay`], an OpenAI
/// adapter also yields each upstream chunk as a `Relay`, and a backend serving the client's
/// dialect each of its events as a `Native`: alone, standing for its output, or ahead of the
/// events read from it ([`Relaying`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    TextDelta(String),
    /// The model's reasoning before its answer (Anthropic `thinking`, vLLM
    /// `reasoning_content`). Output: the first piece commits dispatch like text does.
    ReasoningDelta(String),
    /// A piece of a tool call; `id` and `name` come with the first piece of each index.
    ToolCallDelta {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage(Usage),
    Finish(FinishReason),
    /// One upstream chat completion chunk (or legacy completion, whole or chunk), to be passed
    /// on with only its head rewritten.
    Relay(RelayChunk),
    /// One upstream event in the client's own dialect, to be passed on as it came.
    Native(NativeEvent),
    /// An embeddings answer: one vector per input, in the inputs' order.
    Embeddings(Vec<Vec<f32>>),
}

/// How an adapter hands on the chunks (or native events) of an upstream that writes what the
/// client reads ([`ChatRequest::relaying`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Relaying {
    /// Not at all: the answer is its canonical events.
    #[default]
    Off,
    /// Each as it came, then the canonical events read from it: something beside the client
    /// reads the text (a JSON format check before commit, a shadow's grade).
    WithEvents,
    /// Each as it came, alone: the client's writer, which passes it on, is the only reader of
    /// its text, so it only says whether it held output. Usage and the finish still come as
    /// canonical events.
    Alone,
}

impl Relaying {
    pub fn is_on(self) -> bool {
        self != Relaying::Off
    }
}

/// An upstream chat completion chunk less its head (`id`, `object`, `created`, `model`), which
/// the router writes itself. Everything else is kept as the upstream wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayChunk {
    /// The other top-level members, each as `,"name":value`, in the upstream's order.
    pub fields: bytes::Bytes,
    /// The raw `usage` member (`null` included) when the chunk had one: passed on only to a
    /// client that asked for usage.
    pub usage: Option<bytes::Bytes>,
    /// Whether `choices` was missing or empty (a usage-only chunk).
    pub no_choices: bool,
    /// It held model output and stands for it ([`Relaying::Alone`]): no canonical event read
    /// from it follows.
    pub output: bool,
}

impl Event {
    /// Whether this event is model output, the moment dispatch commits to a backend.
    pub fn is_output(&self) -> bool {
        matches!(
            self,
            Event::TextDelta(_)
                | Event::ReasoningDelta(_)
                | Event::ToolCallDelta { .. }
                | Event::Embeddings(_)
                | Event::Relay(RelayChunk { output: true, .. })
                | Event::Native(NativeEvent { output: true, .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changing_the_messages_drops_the_body_as_written() {
        let mut req = ChatRequest {
            messages: vec![Message::new(Role::User, "hi")].into(),
            written: Some(WrittenBody::of(bytes::Bytes::from_static(b"{}"))),
            ..Default::default()
        };
        req.messages_mut().push(Message::new(Role::User, "more"));
        assert_eq!((req.messages.len(), req.written), (2, None));
    }

    #[test]
    fn json_answers_are_checked_against_the_format() {
        assert!(ResponseFormat::Text.check("anything at all").is_ok());
        assert!(!ResponseFormat::Text.wants_json());
        let object = ResponseFormat::JsonObject;
        assert!(object.wants_json());
        assert!(object.check(" {\"a\": 1}\n").is_ok());
        let err = object.check("Sure! {\"a\": 1}").unwrap_err();
        assert!(err.starts_with("the answer is not JSON"), "{err}");
        let schema = ResponseFormat::JsonSchema {
            name: "city".into(),
            schema: json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                           "required": ["city", "days"], "additionalProperties": false}),
            strict: true,
        };
        assert!(schema.check(r#"{"city": "Paris", "days": 3}"#).is_ok());
        let err = schema.check(r#"{"city": "Paris", "days": "three"}"#).unwrap_err();
        assert!(err.contains("does not match the response schema"), "{err}");
        assert!(err.contains("/days"), "{err}");
        assert!(schema.check(r#"{"city": "Paris"}"#).is_err());
        assert!(schema.check(r#"{"city": "Paris", "days": 3, "extra": true}"#).is_err());
        assert!(schema.check("").is_err());
    }

    #[test]
    fn quota_tokens_leave_cache_reads_out_only_where_the_provider_does() {
        let u = Usage {
            input_tokens: 10_000,
            cached_input_tokens: 8_000,
            output_tokens: 300,
            cache_write_tokens: 1_500,
        };
        assert_eq!(u.uncached_input_tokens(), 500);
        let counting = |counts_cached| QuotaCounting { counts_cached, output_weight: 1 };
        assert_eq!(u.quota_tokens(counting(true)), 10_300);
        assert_eq!(u.quota_tokens(counting(false)), 2_300, "writes and fresh input still count");
        let bedrock_claude_4 = QuotaCounting { counts_cached: false, output_weight: 5 };
        assert_eq!(u.quota_tokens(bedrock_claude_4), 3_500, "each output token burns five");
        assert_eq!(Usage::default().quota_tokens(counting(false)), 0);
        let odd = Usage { input_tokens: 5, cached_input_tokens: 9, output_tokens: 0, cache_write_tokens: 0 };
        assert_eq!((odd.uncached_input_tokens(), odd.quota_tokens(counting(false))), (0, 0));
    }

    #[test]
    fn images_know_their_media_type() {
        let image = |url: &str| Image { url: url.into(), detail: None };
        assert_eq!(image("data:image/webp;base64,AAAA").inline_data(), Some(("image/webp", "AAAA")));
        assert_eq!(image("data:image/webp;base64,AAAA").media_type(), "image/webp");
        assert_eq!(image("https://x.test/a/cat.PNG?size=2").media_type(), "image/png");
        assert_eq!(image("https://x.test/photo").media_type(), "image/jpeg");
        assert_eq!(image("https://x.test/a.png").inline_data(), None);
        assert_eq!(image("data:text/plain,hello").inline_data(), None);
    }
}
