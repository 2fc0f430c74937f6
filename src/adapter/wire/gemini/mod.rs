//! Gemini API (Google AI): `generateContent` and `streamGenerateContent?alt=sse`.
//!
//! `POST {base_url}/models/{model}:generateContent` (the base URL ends in `/v1beta`), key in
//! `x-goog-api-key`. Every streamed event is a whole `GenerateContentResponse`; the stream is
//! complete once a candidate has carried a `finishReason` (there is no `[DONE]`). Usage is taken
//! from the last `usageMetadata`. Gemini has no tool call ids, so they are synthesised.
//!
//! Structured output: `json_object` sets `generationConfig.responseMimeType:
//! application/json`; `json_schema` adds the schema as `responseJsonSchema`, the field that
//! takes standard JSON Schema (the older `responseSchema` takes only an OpenAPI subset).
//! Images become `inlineData` parts for base64 `data:` URLs and `fileData` parts (with a
//! media type guessed from the address) for any other address.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, ACCEPT, CONTENT_TYPE};
use serde_json::{json, Map, Value};

use crate::adapter::error::parse_retry_after;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::{system_turn, Call, EventStream, Transport};
use crate::canonical::{
    ChatRequest, ErrorClass, Event, FinishReason, Image, ResponseFormat, Role, ToolChoice, UpstreamError,
    Usage,
};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let url = url(&call.upstream.base_url, call.model, call.stream);
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    if let Some(key) = &call.upstream.api_key {
        headers.push((HeaderName::from_static("x-goog-api-key"), key.clone()));
    }
    if call.stream {
        headers.push((ACCEPT, "text/event-stream".to_string()));
    }
    let body = serde_json::to_vec(&request_body(req, call)).expect("a JSON value serialises");
    // Vertex AI's Gemini: a Google token instead of the key.
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, classify).await?;
    Ok(http::answer_events(answer, call.stream, GeminiStream::new(), parse_response))
}

fn url(base_url: &str, model: &str, stream: bool) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
    format!("{}/models/{model}:{method}", base_url.trim_end_matches('/'))
}

/// The `GenerateContentRequest` body for `call` of `req` (the model and stream flag are in
/// the URL).
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> Value {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents(req, call)));
    if let Some(system) = call.system_prompt(req) {
        body.insert("systemInstruction".into(), json!({"parts": [{"text": system}]}));
    }
    let mut config = Map::new();
    if let Some(max_tokens) = req.max_tokens {
        config.insert("maxOutputTokens".into(), json!(max_tokens));
    }
    if let Some(temperature) = req.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = req.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if let Some(top_k) = req.top_k {
        config.insert("topK".into(), json!(top_k));
    }
    if !req.stop.is_empty() {
        config.insert("stopSequences".into(), json!(req.stop));
    }
    if let Some(seed) = req.seed {
        // Gemini's seed is an int32.
        config.insert("seed".into(), json!(seed as i64 as i32));
    }
    match &req.response_format {
        ResponseFormat::Text => {}
        ResponseFormat::JsonObject => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        ResponseFormat::JsonSchema { schema, .. } => {
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseJsonSchema".into(), schema.clone());
        }
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    if !req.tools.is_empty() {
        let declarations: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut declaration = Map::new();
                declaration.insert("name".into(), json!(t.name));
                if let Some(description) = &t.description {
                    declaration.insert("description".into(), json!(description));
                }
                if t.parameters.is_object() {
                    declaration.insert("parameters".into(), schema(&t.parameters));
                }
                Value::Object(declaration)
            })
            .collect();
        body.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("toolConfig".into(), tool_config(choice));
    }
    Value::Object(body)
}

/// A JSON schema without the keywords Gemini's OpenAPI-subset schema rejects.
fn schema(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "$schema" | "additionalProperties" | "strict"))
                .map(|(k, v)| (k.clone(), schema(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(schema).collect()),
        other => other.clone(),
    }
}

/// OpenAI's `tool_choice` as a Gemini `toolConfig`.
pub(crate) fn tool_config(choice: &ToolChoice) -> Value {
    let config = match choice {
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Function(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    };
    json!({"functionCallingConfig": config})
}

/// The conversation after the system prompt as `contents` with roles `user` and `model` (a
/// later system message a user turn at its place); consecutive turns of one role are merged
/// (parallel function responses must share one turn).
fn contents(req: &ChatRequest, call: &Call) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in call.turns(req) {
        let (role, parts) = match m.role {
            Role::System => ("user", text_part(&system_turn(&m.content)).into_iter().collect()),
            Role::User => {
                let mut parts: Vec<Value> = text_part(&m.content).into_iter().collect();
                parts.extend(m.images.iter().map(image_part));
                ("user", parts)
            }
            Role::Assistant => {
                let mut parts: Vec<Value> = text_part(&m.content).into_iter().collect();
                for call in &m.tool_calls {
                    let args = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    parts.push(json!({"functionCall": {"name": call.name, "args": args}}));
                }
                ("model", parts)
            }
            Role::Tool => {
                // Gemini matches responses by function name: find the call this answers.
                let name = m
                    .tool_call_id
                    .as_deref()
                    .and_then(|id| {
                        req.messages
                            .iter()
                            .flat_map(|m| &m.tool_calls)
                            .find(|c| c.id == id)
                            .map(|c| c.name.clone())
                    })
                    .unwrap_or_default();
                let response = serde_json::from_str::<Value>(&m.content)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({"result": m.content}));
                ("user", vec![json!({"functionResponse": {"name": name, "response": response}})])
            }
        };
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last_role, last_parts)) if *last_role == role => last_parts.extend(parts),
            _ => out.push((role, parts)),
        }
    }
    out.into_iter().map(|(role, parts)| json!({"role": role, "parts": parts})).collect()
}

/// Inline bytes as `inlineData`; an address as `fileData` with its media type.
fn image_part(image: &Image) -> Value {
    match image.inline_data() {
        Some((mime_type, data)) => json!({"inlineData": {"mimeType": mime_type, "data": data}}),
        None => json!({"fileData": {"mimeType": image.media_type(), "fileUri": image.url}}),
    }
}

fn text_part(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"text": text}))
}

/// Classify a non-2xx answer: `{"error": {"code", "message", "status"}}` (possibly wrapped in
/// a one-element array).
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error =
        parsed.as_ref().map(|b| b.get(0).unwrap_or(b)).and_then(|b| b.get("error")).filter(|e| e.is_object());
    let class = error.map(|e| class_of(Some(status), e)).unwrap_or(ErrorClass::from_status(status));
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| http::excerpt(body));
    let retry_after = parse_retry_after(headers).or_else(|| error.and_then(retry_delay));
    UpstreamError::new(class, Some(status), message).with_retry_after(retry_after)
}

fn class_of(status: Option<u16>, error: &Value) -> ErrorClass {
    let message = error.get("message").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    match error.get("status").and_then(Value::as_str).unwrap_or("") {
        "RESOURCE_EXHAUSTED" => ErrorClass::RateLimited,
        "UNAVAILABLE" => ErrorClass::Overloaded,
        "INTERNAL" | "UNKNOWN" => ErrorClass::ServerError,
        "DEADLINE_EXCEEDED" => ErrorClass::Timeout,
        "PERMISSION_DENIED" | "UNAUTHENTICATED" => ErrorClass::Auth,
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => {
            if message.contains("exceeds the maximum number of tokens")
                || message.contains("input token count")
                || message.contains("token limit")
                || message.contains("too long")
            {
                ErrorClass::ContextLength
            } else {
                ErrorClass::InvalidRequest
            }
        }
        "NOT_FOUND" => ErrorClass::InvalidRequest,
        _ => status
            .or_else(|| error.get("code").and_then(Value::as_u64).map(|c| c as u16))
            .map(ErrorClass::from_status)
            .unwrap_or(ErrorClass::ServerError),
    }
}

/// `google.rpc.RetryInfo.retryDelay` ("17s", "0.5s") from an error's details.
fn retry_delay(error: &Value) -> Option<Duration> {
    error.get("details")?.as_array()?.iter().find_map(|detail| {
        let delay = detail.get("retryDelay")?.as_str()?.strip_suffix('s')?;
        delay.parse::<f64>().ok().filter(|s| *s >= 0.0).map(Duration::from_secs_f64)
    })
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "PROHIBITED_CONTENT" | "BLOCKLIST" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        // STOP, and anything else that ends the candidate.
        _ => FinishReason::Stop,
    }
}

fn usage(meta: &Value) -> Usage {
    Usage {
        input_tokens: http::as_u32(meta.get("promptTokenCount")),
        cached_input_tokens: http::as_u32(meta.get("cachedContentTokenCount")),
        output_tokens: http::as_u32(meta.get("candidatesTokenCount"))
            .saturating_add(http::as_u32(meta.get("thoughtsTokenCount"))),
        // Implicit caching bills no writes (explicit cached contents are made apart).
        cache_write_tokens: 0,
    }
}

/// Every event of a non-streamed `GenerateContentResponse` body.
pub(in crate::adapter) fn parse_response(body: &Value) -> Result<Vec<Event>, UpstreamError> {
    let mut parser = GeminiStream::new();
    let mut events = parser.on_chunk(body)?;
    events.extend(parser.close()?);
    Ok(events)
}

/// Parser state of one answer (streamed, or one whole body).
#[derive(Debug)]
pub(crate) struct GeminiStream {
    /// Prefix of the synthesised tool call ids, unique per answer.
    id_prefix: String,
    tool_calls: u32,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

impl GeminiStream {
    pub(crate) fn new() -> Self {
        Self::with_id_prefix(format!("call_{:012x}", rand::random::<u64>() >> 16))
    }

    pub(crate) fn with_id_prefix(id_prefix: impl Into<String>) -> Self {
        GeminiStream { id_prefix: id_prefix.into(), tool_calls: 0, usage: None, finish: None }
    }

    /// One `GenerateContentResponse`.
    fn on_chunk(&mut self, chunk: &Value) -> Result<Vec<Event>, UpstreamError> {
        if let Some(error) = chunk.get("error").filter(|e| e.is_object()) {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("upstream error");
            return Err(UpstreamError::new(class_of(None, error), None, message));
        }
        if let Some(meta) = chunk.get("usageMetadata").filter(|m| m.is_object()) {
            self.usage = Some(usage(meta));
        }
        let candidate = chunk.pointer("/candidates/0");
        if candidate.is_none() {
            if let Some(reason) = chunk.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
                return Err(UpstreamError::new(
                    ErrorClass::ContentPolicy,
                    None,
                    format!("prompt blocked by the provider: {reason}"),
                ));
            }
        }
        let mut events = Vec::new();
        let Some(candidate) = candidate else {
            return Ok(events);
        };
        let parts = candidate.pointer("/content/parts").and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(text) = part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                events.push(Event::TextDelta(text.to_string()));
            }
            if let Some(call) = part.get("functionCall") {
                let index = self.tool_calls;
                self.tool_calls += 1;
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{}_{index}", self.id_prefix));
                events.push(Event::ToolCallDelta {
                    index,
                    id: Some(id),
                    name: call.get("name").and_then(Value::as_str).map(str::to_string),
                    arguments: call.get("args").cloned().unwrap_or_else(|| json!({})).to_string(),
                });
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish = Some(finish_reason(reason));
        }
        Ok(events)
    }

    /// The answer is over: its closing events, or `StreamBroken` if no candidate finished.
    fn close(&mut self) -> Result<Vec<Event>, UpstreamError> {
        let Some(mut finish) = self.finish.take() else {
            return Err(http::truncated("a candidate with finishReason"));
        };
        // Gemini says STOP after function calls.
        if finish == FinishReason::Stop && self.tool_calls > 0 {
            finish = FinishReason::ToolCalls;
        }
        let mut events = Vec::new();
        if let Some(usage) = self.usage.take() {
            events.push(Event::Usage(usage));
        }
        events.push(Event::Finish(finish));
        Ok(events)
    }
}

impl StreamParser for GeminiStream {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let chunk: Value = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
        self.on_chunk(&chunk)
    }

    /// Gemini has no end marker after the finishing chunk: read to the end of the body, where
    /// the last `usageMetadata` is known.
    fn is_closed(&self) -> bool {
        false
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        self.close()
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
