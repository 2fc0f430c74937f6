//! The `GenerateContentRequest` body, typed and borrowed from the canonical request and the
//! call (the model and the stream flag are in the URL).
//!
//! Structured output: `json_object` sets `generationConfig.responseMimeType:
//! application/json`; `json_schema` adds the schema as `responseJsonSchema`, the field that
//! takes standard JSON Schema (the older `responseSchema` takes only an OpenAPI subset).
//! Images become `inlineData` parts for base64 `data:` URLs and `fileData` parts (with a
//! media type guessed from the address) for any other address. Gemini matches a function's
//! response to its call by name, and takes both as JSON objects.

use std::borrow::Cow;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::adapter::{system_turn, Call};
use crate::canonical::{ChatRequest, Image, Message, ResponseFormat, Role, Tool, ToolChoice};

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GenerateContent<'a> {
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<Content<'a>>,
    #[serde(skip_serializing_if = "GenerationConfig::is_empty")]
    generation_config: GenerationConfig<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<[Declarations<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct Content<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    parts: Vec<Part<'a>>,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
enum Part<'a> {
    Text(Cow<'a, str>),
    InlineData(Blob<'a>),
    FileData(FileRef<'a>),
    FunctionCall(FunctionCall<'a>),
    FunctionResponse(FunctionResponse<'a>),
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct FileRef<'a> {
    mime_type: &'a str,
    file_uri: &'a str,
}

#[derive(Debug, serde::Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    args: JsonObject<'a>,
}

#[derive(Debug, serde::Serialize)]
struct FunctionResponse<'a> {
    name: &'a str,
    response: JsonObject<'a>,
}

/// A JSON object as the client wrote it, or the object that stands in for text that is not one.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
enum JsonObject<'a> {
    Written(&'a RawValue),
    Empty {},
    Result { result: &'a str },
}

impl<'a> JsonObject<'a> {
    fn written(text: &'a str) -> Option<JsonObject<'a>> {
        let raw: &RawValue = serde_json::from_str(text).ok()?;
        raw.get().starts_with('{').then_some(JsonObject::Written(raw))
    }
}

#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    /// Gemini's seed is an int32.
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a Value>,
}

impl GenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.max_output_tokens.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.top_k.is_none()
            && self.stop_sequences.is_empty()
            && self.seed.is_none()
            && self.response_mime_type.is_none()
    }
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Declarations<'a> {
    function_declarations: Vec<Declaration<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct Declaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Schema<'a>>,
}

/// A JSON schema without the keywords Gemini's OpenAPI-subset schema rejects, left out as it
/// is written rather than copied.
#[derive(Debug)]
struct Schema<'a>(&'a Value);

impl Serialize for Schema<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(members) => {
                let kept = members
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "$schema" | "additionalProperties" | "strict"));
                let mut map = serializer.serialize_map(None)?;
                for (key, value) in kept {
                    map.serialize_entry(key, &Schema(value))?;
                }
                map.end()
            }
            Value::Array(items) => serializer.collect_seq(items.iter().map(Schema)),
            other => other.serialize(serializer),
        }
    }
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolConfig<'a> {
    function_calling_config: CallingConfig<'a>,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct CallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

impl<'a> GenerateContent<'a> {
    pub(crate) fn of(req: &'a ChatRequest, call: &'a Call) -> GenerateContent<'a> {
        let (response_mime_type, response_json_schema) = match &req.response_format {
            ResponseFormat::Text => (None, None),
            ResponseFormat::JsonObject => (Some("application/json"), None),
            ResponseFormat::JsonSchema { schema, .. } => (Some("application/json"), Some(schema)),
        };
        GenerateContent {
            contents: contents(req, call),
            system_instruction: call
                .system_prompt(req)
                .map(|system| Content { role: None, parts: vec![Part::Text(Cow::Owned(system))] }),
            generation_config: GenerationConfig {
                max_output_tokens: req.max_tokens,
                temperature: req.temperature,
                top_p: req.top_p,
                top_k: req.top_k,
                stop_sequences: &req.stop,
                seed: req.seed.map(|seed| seed as i64 as i32),
                response_mime_type,
                response_json_schema,
            },
            tools: (!req.tools.is_empty()).then(|| {
                [Declarations { function_declarations: req.tools.iter().map(Declaration::of).collect() }]
            }),
            tool_config: req.tool_choice.as_ref().map(ToolConfig::of),
        }
    }
}

impl<'a> Declaration<'a> {
    fn of(t: &'a Tool) -> Declaration<'a> {
        Declaration {
            name: &t.name,
            description: t.description.as_deref(),
            parameters: t.parameters.is_object().then(|| Schema(t.parameters.tree())),
        }
    }
}

impl<'a> ToolConfig<'a> {
    /// OpenAI's `tool_choice` as a Gemini `toolConfig`.
    pub(crate) fn of(choice: &'a ToolChoice) -> ToolConfig<'a> {
        let (mode, allowed_function_names) = match choice {
            ToolChoice::None => ("NONE", None),
            ToolChoice::Auto => ("AUTO", None),
            ToolChoice::Required => ("ANY", None),
            ToolChoice::Function(name) => ("ANY", Some([name.as_str()])),
        };
        ToolConfig { function_calling_config: CallingConfig { mode, allowed_function_names } }
    }
}

/// The conversation after the system prompt as `contents` with roles `user` and `model` (a
/// later system message a user turn at its place); consecutive turns of one role are merged
/// (parallel function responses must share one turn).
fn contents<'a>(req: &'a ChatRequest, call: &'a Call) -> Vec<Content<'a>> {
    let mut out: Vec<Content<'a>> = Vec::new();
    for m in call.turns(req) {
        let (role, parts) = turn(req, m);
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == Some(role) => last.parts.extend(parts),
            _ => out.push(Content { role: Some(role), parts }),
        }
    }
    out
}

/// One message's role and parts.
fn turn<'a>(req: &'a ChatRequest, m: &'a Message) -> (&'static str, Vec<Part<'a>>) {
    let text = |text: Cow<'a, str>| (!text.is_empty()).then_some(Part::Text(text));
    match m.role {
        Role::System => ("user", text(Cow::Owned(system_turn(&m.content))).into_iter().collect()),
        Role::User => {
            let images = m.images.iter().map(image_part);
            ("user", text(Cow::Borrowed(&m.content)).into_iter().chain(images).collect())
        }
        Role::Assistant => {
            let calls = m.tool_calls.iter().map(|c| {
                let args = JsonObject::written(&c.arguments).unwrap_or(JsonObject::Empty {});
                Part::FunctionCall(FunctionCall { name: &c.name, args })
            });
            ("model", text(Cow::Borrowed(&m.content)).into_iter().chain(calls).collect())
        }
        Role::Tool => {
            // Gemini matches responses by function name: find the call this answers.
            let name = m.tool_call_id.as_deref().and_then(|id| {
                req.messages.iter().flat_map(|m| &m.tool_calls).find(|c| c.id == id).map(|c| c.name.as_str())
            });
            let response =
                JsonObject::written(&m.content).unwrap_or(JsonObject::Result { result: &m.content });
            (
                "user",
                vec![Part::FunctionResponse(FunctionResponse { name: name.unwrap_or_default(), response })],
            )
        }
    }
}

/// Inline bytes as `inlineData`; an address as `fileData` with its media type.
fn image_part(image: &Image) -> Part<'_> {
    match image.inline_data() {
        Some((mime_type, data)) => Part::InlineData(Blob { mime_type, data }),
        None => Part::FileData(FileRef { mime_type: image.media_type(), file_uri: &image.url }),
    }
}
