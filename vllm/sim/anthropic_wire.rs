//! The Anthropic Messages wire format (`anthropic` kind).
//!
//! Decodes `POST /v1/messages` (`x-api-key`, `anthropic-version`, `system` as a string or
//! blocks, messages with string or block content, required `max_tokens`) and answers with a
//! Message object or the named-event SSE stream: message_start, content_block_start, ping,
//! content_block_delta…, content_block_stop, message_delta, message_stop. Errors use
//! `{"type":"error","error":{"type":…,"message":…}}`, also as a mid-stream `event: error`.
//! With `--tool-call-args`, a request that declares tools is answered with a `tool_use` block
//! whose input streams as `input_json_delta` fragments, and `stop_reason: tool_use`.

use super::engine::FinishReason;
use super::generate::{GenEvent, GenRequest, Usage};
use super::prompt_cache::BlockEnd;
use super::server::{AppState, SimError};
use super::{sse, SimKind};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

fn error_body(status: u16, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

/// Render an error in Anthropic's envelope.
pub fn error_response(e: &SimError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Json(error_body(e.status, &e.message))).into_response();
    e.put_retry_after(super::SimKind::Anthropic, resp.headers_mut());
    resp
}

/// A prompt being written out block by block, remembering where each block ends.
#[derive(Default)]
struct PromptText {
    text: String,
    blocks: Vec<BlockEnd>,
}

impl PromptText {
    fn push(&mut self, text: &str) {
        self.text.push_str(text);
    }

    /// Append one content block's text and mark its end.
    fn block(&mut self, text: &str, block: &Value) {
        self.text.push_str(text);
        self.blocks.push(BlockEnd { at: self.text.len(), marked: block.get("cache_control").is_some() });
    }

    /// A system prompt or a message's content: a string (one block) or blocks, joined by
    /// newlines.
    fn content(&mut self, content: &Value) {
        match content {
            Value::String(s) => self.block(s, content),
            Value::Array(blocks) => {
                for (i, b) in blocks.iter().enumerate() {
                    let text = block_text(b);
                    let sep = if i > 0 && !text.is_empty() { "\n" } else { "" };
                    self.block(&format!("{sep}{text}"), b);
                }
            }
            _ => {}
        }
    }
}

/// The text a content block adds to the prompt: a text block's text, a tool call's input, a
/// tool result's content; nothing for images and thinking.
fn block_text(block: &Value) -> String {
    match block.get("type").and_then(Value::as_str) {
        Some("tool_use") => block.get("input").map(Value::to_string).unwrap_or_default(),
        Some("tool_result") => match block.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                parts.iter().filter_map(|p| p.get("text")?.as_str()).collect::<Vec<_>>().join("\n")
            }
            _ => String::new(),
        },
        _ => block.get("text").and_then(Value::as_str).unwrap_or("").to_string(),
    }
}

/// What a decoded request asks beyond the generation itself.
struct Asked {
    model: Option<String>,
    stream: bool,
    /// `thinking: {type: enabled}`: a thinking block comes before the answer.
    thinking: bool,
}

/// Like Claude, refuse a thinking block of an earlier turn that carries no signature, or one
/// this provider did not make: the sims sign as `sim-signature-{kind}-{seed}`, and a signature
/// of another kind's, or one still marked by a router, is not this provider's.
fn check_signatures(kind: SimKind, messages: &[Value]) -> Result<(), SimError> {
    let own = format!("sim-signature-{}-", kind.as_str());
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in m.get("content").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if b.get("type").and_then(Value::as_str) != Some("thinking") {
                continue;
            }
            match b.get("signature").and_then(Value::as_str).unwrap_or_default() {
                "" => {
                    let why = format!("messages.{i}.content.{j}.thinking.signature: Field required");
                    return Err(SimError::new(400, why));
                }
                made if made.starts_with("sim-signature-") && !made.starts_with(&own)
                    || made.starts_with("spillway:") =>
                {
                    let why = format!("messages.{i}.content.{j}: Invalid `signature` in `thinking` block");
                    return Err(SimError::new(400, why));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn decode_value(kind: SimKind, v: &Value) -> Result<(GenRequest, Asked), SimError> {
    let max_tokens = v
        .get("max_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| SimError::new(400, "max_tokens: Field required"))?;
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| SimError::new(400, "messages: Field required"))?;
    if kind.is_claude() {
        check_signatures(kind, messages)?;
    }
    // Tools, system, messages: the order in which Anthropic caches a prompt's prefixes.
    let mut prompt = PromptText::default();
    for tool in v.get("tools").and_then(Value::as_array).into_iter().flatten() {
        let mut unmarked = tool.clone();
        if let Some(tool) = unmarked.as_object_mut() {
            tool.remove("cache_control");
        }
        prompt.block(&format!("tool: {unmarked}\n"), tool);
    }
    if let Some(system) = v.get("system") {
        prompt.push("system: ");
        prompt.content(system);
        prompt.push("\n");
    }
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        prompt.push(&format!("{role}: "));
        if let Some(content) = m.get("content") {
            prompt.content(content);
        }
        prompt.push("\n");
    }
    let PromptText { text: prompt, blocks: cache_blocks } = prompt;
    let model = v.get("model").and_then(Value::as_str).map(str::to_string);
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let max_tokens = Some(max_tokens.min(u32::MAX as u64) as u32);
    let answered =
        messages.last().and_then(|m| m.get("content")).and_then(Value::as_array).is_some_and(|blocks| {
            blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        });
    let tool = requested_tool(v).filter(|_| !answered);
    let thinking = v.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
    Ok((GenRequest { prompt, max_tokens, cache_blocks, tool }, Asked { model, stream, thinking }))
}

/// The tool `tool_choice` names, else the first declared one (none for `tool_choice: none`).
fn requested_tool(v: &Value) -> Option<String> {
    let first = v.pointer("/tools/0/name").and_then(Value::as_str)?;
    match v.pointer("/tool_choice/type").and_then(Value::as_str) {
        Some("none") => None,
        Some("tool") => v.pointer("/tool_choice/name").and_then(Value::as_str).map(str::to_string),
        _ => Some(first.to_string()),
    }
}

fn stop_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
    }
}

fn usage_json(u: &Usage, output_tokens: u32) -> Value {
    json!({
        "input_tokens": u.prompt_tokens - u.cached_tokens - u.cache_write_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "output_tokens": output_tokens,
    })
}

/// `POST /v1/messages`.
pub async fn messages(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    match inner(&st, &headers, &body).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

/// The key a client presented: Anthropic's `x-api-key`, or a bearer token (what a
/// self-hosted engine's Messages route checks).
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let header = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    header("x-api-key").or_else(|| header("authorization").and_then(|v| v.strip_prefix("Bearer ")))
}

/// `POST /v1/messages/count_tokens`: the simulator's own count of the prompt.
pub async fn count_tokens(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let counted = st.check_key(presented_key(&headers)).and_then(|()| {
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| SimError::new(400, format!("invalid JSON body: {e}")))?;
        count(st.kind, v)
    });
    match counted {
        Ok(n) => Json(json!({"input_tokens": n})).into_response(),
        Err(e) => error_response(&e),
    }
}

/// The prompt tokens of a count request's body `v` (which has no `max_tokens`).
pub(super) fn count(kind: SimKind, mut v: Value) -> Result<u32, SimError> {
    if v.get("max_tokens").is_some() {
        return Err(SimError::new(400, "max_tokens: Extra inputs are not permitted"));
    }
    v["max_tokens"] = json!(1);
    let (req, _) = decode_value(kind, &v)?;
    Ok(super::text::prompt_tokens(&req.prompt))
}

/// The key and `anthropic-version` checks of every Messages route (batches included).
pub(super) fn check_headers(st: &AppState, headers: &HeaderMap) -> Result<(), SimError> {
    st.check_key(presented_key(headers))?;
    if st.kind == SimKind::Anthropic && !headers.contains_key("anthropic-version") {
        return Err(SimError::new(400, "anthropic-version: header is required"));
    }
    Ok(())
}

async fn inner(st: &Arc<AppState>, headers: &HeaderMap, body: &[u8]) -> Result<Response, SimError> {
    check_headers(st, headers)?;
    let v = st.read_json(body)?;
    answer(st, headers, &v, Serving::default()).await
}

/// How a cloud serves the Messages body: the model and whether it streams come from the path,
/// and a stream may come in other frames.
#[derive(Default)]
pub(super) struct Serving {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub framing: Option<sse::Framing>,
}

/// The answer to a Messages body `v` that was admitted.
pub(super) async fn answer(
    st: &Arc<AppState>,
    headers: &HeaderMap,
    v: &Value,
    serving: Serving,
) -> Result<Response, SimError> {
    let (req, asked) = decode_value(st.kind, v)?;
    let Asked { model, stream, thinking } = asked;
    let model = serving.model.or(model).unwrap_or_else(|| st.model.clone());
    let stream = serving.stream.unwrap_or(stream);
    // Claude signs its thinking (each provider with its own key); a self-hosted engine's
    // reasoning carries no signature.
    let thought = thinking.then(|| {
        let signature =
            st.kind.is_claude().then(|| format!("sim-signature-{}-{}", st.kind.as_str(), st.seed));
        ("Considering the request.".to_string(), signature)
    });
    let started = st.start(headers, &req)?;
    let mut extra = HeaderMap::new();
    extra.insert("request-id", HeaderValue::from_str(&format!("req_sim{:08x}", started.id)).expect("ascii"));
    if let Some(r) = started.remaining {
        for (what, left, limit) in
            [("requests", r.requests, st.quota.rpm), ("tokens", r.tokens, st.quota.tpm)]
        {
            if let Some(left) = left {
                let name = |k: &str| {
                    HeaderName::from_bytes(format!("anthropic-ratelimit-{what}-{k}").as_bytes())
                        .expect("name")
                };
                extra.insert(name("limit"), limit.into());
                extra.insert(name("remaining"), left.into());
            }
        }
    }
    let id = format!("msg_sim{:016x}", started.id);
    let tool_call = started.tool_call.map(|name| (format!("toolu_sim{:016x}", started.id), name));
    let mut gen = started.gen;
    let start_usage = started.usage;
    if !stream {
        return Ok(match gen.collect().await {
            Ok((text, usage, finish)) => {
                let (content, stop) = match &tool_call {
                    Some((call_id, name)) => {
                        let input: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
                        (
                            json!([{"type": "tool_use", "id": call_id, "name": name, "input": input}]),
                            "tool_use",
                        )
                    }
                    None => (json!([{"type": "text", "text": text}]), stop_reason(finish)),
                };
                let content = match &thought {
                    Some((thinking, signature)) => {
                        let mut block = json!({"type": "thinking", "thinking": thinking});
                        if let Some(signature) = signature {
                            block["signature"] = json!(signature);
                        }
                        let mut all = vec![block];
                        all.extend(content.as_array().cloned().unwrap_or_default());
                        Value::Array(all)
                    }
                    None => content,
                };
                let mut resp = Json(json!({
                    "id": id, "type": "message", "role": "assistant", "model": model,
                    "content": content,
                    "stop_reason": stop, "stop_sequence": null,
                    "usage": usage_json(&usage, usage.completion_tokens),
                }))
                .into_response();
                resp.headers_mut().extend(extra);
                resp
            }
            Err(GenEvent::Fail) => error_response(&SimError::new(529, gen.failure("Overloaded"))),
            Err(_) => sse::dropped_response(),
        });
    }
    let main = u32::from(thought.is_some());
    let (tx, resp) = sse::response_as(extra, serving.framing.unwrap_or(sse::Framing::Sse));
    tokio::spawn(async move {
        let mut emitted = 0u32;
        loop {
            let ev = gen.next().await;
            if emitted == 0 {
                if let Some(GenEvent::Token(_) | GenEvent::Final(..)) = ev {
                    let usage = usage_json(&start_usage, 1);
                    let start = json!({"type": "message_start", "message": {
                        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
                        "stop_reason": null, "stop_sequence": null, "usage": usage}});
                    let content_block = match &tool_call {
                        Some((call_id, name)) => {
                            json!({"type": "tool_use", "id": call_id, "name": name, "input": {}})
                        }
                        None => json!({"type": "text", "text": ""}),
                    };
                    let block =
                        json!({"type": "content_block_start", "index": main, "content_block": content_block});
                    if !tx.event("message_start", &start).await {
                        return;
                    }
                    if let Some((thinking, signature)) = &thought {
                        if !thinking_block(&tx, thinking, signature.as_deref()).await {
                            return;
                        }
                    }
                    // Anthropic's order: the first block opens, then a ping.
                    if !(tx.event("content_block_start", &block).await
                        && tx.event("ping", &json!({"type": "ping"})).await)
                    {
                        return;
                    }
                }
            }
            let delta = |t: &str| match &tool_call {
                Some(_) => json!({"type": "content_block_delta", "index": main,
                                  "delta": {"type": "input_json_delta", "partial_json": t}}),
                None => {
                    json!({"type": "content_block_delta", "index": main, "delta": {"type": "text_delta", "text": t}})
                }
            };
            match ev {
                Some(GenEvent::Token(t)) => {
                    emitted += 1;
                    if !tx.event("content_block_delta", &delta(&t)).await {
                        return;
                    }
                }
                Some(GenEvent::Final(t, usage, finish)) => {
                    tx.event("content_block_delta", &delta(&t)).await;
                    tx.event("content_block_stop", &json!({"type": "content_block_stop", "index": main}))
                        .await;
                    let stop = if tool_call.is_some() { "tool_use" } else { stop_reason(finish) };
                    let md = json!({"type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": null},
                        "usage": {"output_tokens": usage.completion_tokens}});
                    tx.event("message_delta", &md).await;
                    let mut stop = json!({"type": "message_stop"});
                    if tx.framing() == sse::Framing::EventStream {
                        stop["amazon-bedrock-invocationMetrics"] = json!({
                            "inputTokenCount": start_usage.prompt_tokens, "outputTokenCount": usage.completion_tokens,
                            "invocationLatency": 0, "firstByteLatency": 0});
                    }
                    tx.event("message_stop", &stop).await;
                    return;
                }
                Some(GenEvent::Fail) => {
                    tx.event("error", &error_body(529, &gen.failure("Overloaded"))).await;
                    return;
                }
                Some(GenEvent::Drop) | None => return tx.abort().await,
            }
        }
    });
    Ok(resp)
}

/// A thinking block at index 0: its text, then its signature when it has one.
async fn thinking_block(tx: &sse::FrameTx, thinking: &str, signature: Option<&str>) -> bool {
    let delta = |delta: Value| json!({"type": "content_block_delta", "index": 0, "delta": delta});
    let start = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}});
    let mut ok = tx.event("content_block_start", &start).await
        && tx
            .event("content_block_delta", &delta(json!({"type": "thinking_delta", "thinking": thinking})))
            .await;
    if let Some(signature) = signature {
        ok = ok
            && tx
                .event(
                    "content_block_delta",
                    &delta(json!({"type": "signature_delta", "signature": signature})),
                )
                .await;
    }
    ok && tx.event("content_block_stop", &json!({"type": "content_block_stop", "index": 0})).await
}
