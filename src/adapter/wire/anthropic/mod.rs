//! Anthropic Messages API.
//!
//! `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version: 2023-06-01`. System
//! messages go to the top-level `system`; tool calls and results become `tool_use` and
//! `tool_result` content blocks; consecutive messages of one role are merged, as the API wants
//! roles to alternate. A stream is complete only once `message_stop` has arrived.
//!
//! Structured output follows Anthropic's documented, generally available form (Claude
//! Sonnet 4.5, Opus 4.5 and Haiku 4.5 and later; no beta header): a `json_schema` response
//! format becomes `output_config: {format: {type: "json_schema", schema}}`, and the answer
//! comes back as text holding the JSON. Anthropic has no schema-less JSON mode, so
//! `json_object` adds one line to the system prompt asking for a single JSON object; in both
//! cases dispatch checks the answer before anything reaches the client. Images become `image`
//! blocks after the message's text: a base64 `data:` URL as a `base64` source, any other
//! address as a `url` source.

use reqwest::header::{HeaderName, ACCEPT, CONTENT_TYPE};
use serde_json::{json, Map, Value};

use crate::adapter::transport;
use crate::adapter::transport::http;
use crate::adapter::{system_turn, Call, EventStream, Transport};
use crate::canonical::{ChatRequest, Dialect, Image, ResponseFormat, Role, ToolChoice, UpstreamError};

pub mod cache;
mod count;
pub mod error;
pub mod host;
pub(crate) mod native;
pub mod provenance;
pub mod stream;

pub(in crate::adapter) use count::count_tokens;
pub(in crate::adapter) use error::classify;
pub use host::ClaudeHost;
use stream::{parse_response, relayed, AnthropicStream};

/// The API version this adapter speaks.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by Anthropic; used when the request has none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Appended to the system prompt for `response_format: json_object` (no native JSON mode).
pub const JSON_OBJECT_INSTRUCTION: &str =
    "Answer with a single JSON object and nothing else: no prose and no code fences.";

/// `POST` in the Messages format to `host`: Anthropic itself, a node that serves the Messages
/// API natively, or a cloud's Claude. A request that came in Messages form goes as the client
/// wrote it (see [`native`]); any other is translated from the canonical request.
pub(in crate::adapter) async fn send_to(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
    host: &dyn ClaudeHost,
) -> Result<EventStream, UpstreamError> {
    let client = req.native.as_ref().filter(|n| n.dialect == Dialect::AnthropicMessages);
    let url = host.url(&call.upstream.base_url, call.model, call.stream);
    let (mut headers, mut body) = prepared(call, req, host);
    if call.stream {
        headers.push((ACCEPT, host.stream_type().to_string()));
    }
    // Claude caches where told to; a node caches every prefix on its own.
    if let (Some(placement), true) = (&call.cache_placement, host.signer().is_some()) {
        let placed = cache::place(&mut body, placement);
        tracing::debug!(?placed, "prompt-cache breakpoints");
    }
    let body = Value::Object(body).to_string().into_bytes();
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer =
        transport::eventstream::unframed(http::post(transport, &url, &headers, body, host.classify()).await?);
    let relay = req.relay && client.is_some();
    let signer = host.signer();
    let parse = move |b: &[u8]| if relay { relayed(b, signer) } else { parse_response(b) };
    Ok(http::answer_events(answer, call.stream, AnthropicStream::new(relay, signer), parse))
}

/// The headers and body of `call` of `req` as `host` takes them: the client's own body (or
/// the translation of the canonical request), with the client's version and the betas the
/// host takes.
fn prepared(
    call: &Call<'_>,
    req: &ChatRequest,
    host: &dyn ClaudeHost,
) -> (Vec<(HeaderName, String)>, Map<String, Value>) {
    let client = req.native.as_ref().filter(|n| n.dialect == Dialect::AnthropicMessages);
    let version = client.and_then(|n| n.header("anthropic-version")).unwrap_or(API_VERSION);
    let flags = client
        .and_then(|n| n.header("anthropic-beta"))
        .map(|h| h.split(',').map(str::trim).filter(|f| !f.is_empty()).collect());
    let betas = host.betas(flags.unwrap_or_default());
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(host.headers(version, &betas, call.upstream.api_key.as_deref()));
    let body = match client {
        Some(client) => native::body(req, call, client, host.signer()),
        None => request_body(req, call),
    };
    let Value::Object(mut body) = body else { unreachable!("a Messages body is an object") };
    host.fit(&mut body, &betas);
    (headers, body)
}

/// The Messages request body for `call` of `req`.
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(call.model));
    body.insert("max_tokens".into(), json!(req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    let system = match (call.system_prompt(req), &req.response_format) {
        (Some(system), ResponseFormat::JsonObject) => Some(format!("{system}\n\n{JSON_OBJECT_INSTRUCTION}")),
        (None, ResponseFormat::JsonObject) => Some(JSON_OBJECT_INSTRUCTION.to_string()),
        (system, _) => system,
    };
    if let Some(system) = system {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages(req, call)));
    if let ResponseFormat::JsonSchema { schema, .. } = &req.response_format {
        body.insert("output_config".into(), json!({"format": {"type": "json_schema", "schema": schema}}));
    }
    if let Some(temperature) = req.temperature {
        // Anthropic accepts 0..=1 (OpenAI 0..=2).
        body.insert("temperature".into(), json!(temperature.clamp(0.0, 1.0)));
    }
    if let Some(top_p) = req.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if let Some(top_k) = req.top_k {
        body.insert("top_k".into(), json!(top_k));
    }
    if let Some(user) = &req.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop));
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), json!(t.name));
                if let Some(description) = &t.description {
                    tool.insert("description".into(), json!(description));
                }
                // The API let through only an object schema or none; Anthropic requires one.
                let schema = match &t.parameters {
                    Value::Null => json!({"type": "object", "properties": {}}),
                    schema => schema.clone(),
                };
                tool.insert("input_schema".into(), schema);
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    body.insert("stream".into(), json!(call.stream));
    Value::Object(body)
}

/// OpenAI's `tool_choice` in Anthropic's words.
pub(crate) fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
    }
}

/// The conversation after the system prompt, as alternating user/assistant content blocks (a
/// later system message a user turn at its place: [`system_turn`]).
fn messages(req: &ChatRequest, call: &Call) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in call.turns(req) {
        let (role, blocks) = match m.role {
            Role::System => ("user", text_block(&system_turn(&m.content)).into_iter().collect()),
            Role::User => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                blocks.extend(m.images.iter().map(image_block));
                ("user", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                for call in &m.tool_calls {
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({
                        "type": "tool_use", "id": call.id, "name": call.name, "input": input,
                    }));
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect()
}

/// An `image` content block: inline bytes as a `base64` source, an address as a `url` source.
fn image_block(image: &Image) -> Value {
    let source = match image.inline_data() {
        Some((media_type, data)) => json!({"type": "base64", "media_type": media_type, "data": data}),
        None => json!({"type": "url", "url": image.url}),
    };
    json!({"type": "image", "source": source})
}

/// Anthropic rejects empty text blocks.
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

#[cfg(test)]
mod tests;
