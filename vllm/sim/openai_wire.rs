//! The OpenAI Chat Completions wire format, spoken by the `vllm` and `openai` kinds.
//!
//! Decodes `POST /v1/chat/completions` (string or content-part messages, `max_tokens` /
//! `max_completion_tokens`, `stream`, `stream_options.include_usage`) and answers with a
//! `chat.completion` object or an SSE stream of `chat.completion.chunk`s ending in
//! `data: [DONE]`. The two kinds differ where the real servers do: vLLM puts `finish_reason`
//! on the last content chunk and answers 401 with `{"error":"Unauthorized"}` and other errors
//! with vLLM's `{"error":{"type":"BadRequestError",…,"code":400}}`; OpenAI sends a separate
//! empty-delta finish chunk, uses its own error types and adds `x-ratelimit-*` headers.
//! With `--tool-call-args`, a request that declares tools is answered with a `tool_calls`
//! message whose arguments stream as `function.arguments` fragments.

use super::engine::FinishReason;
use super::generate::{GenEvent, GenRequest, Usage};
use super::server::{AppState, SimError};
use super::{sse, SimKind};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// Render an error in the OpenAI (or vLLM) envelope, with `Retry-After` when known.
pub fn error_response(kind: SimKind, e: &SimError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = if kind == SimKind::Vllm {
        if e.status == 401 {
            json!({"error": "Unauthorized"})
        } else {
            let ty = match e.status {
                400 => "BadRequestError",
                404 => "NotFoundError",
                429 => "RateLimitError",
                503 => "ServiceUnavailableError",
                _ => "InternalServerError",
            };
            json!({"error": {"message": e.message, "type": ty, "param": null, "code": e.status}})
        }
    } else if kind == SimKind::AzureOpenai {
        // Azure's envelope: the status as a string `code`, no `type`.
        let message = match e.status {
            401 => "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
            _ => e.message.as_str(),
        };
        json!({"error": {"code": e.status.to_string(), "message": message}})
    } else {
        let (ty, code) = match e.status {
            400 => ("invalid_request_error", Value::Null),
            401 => ("invalid_request_error", json!("invalid_api_key")),
            403 => ("permission_error", Value::Null),
            404 => ("invalid_request_error", json!("model_not_found")),
            429 => ("requests", json!("rate_limit_exceeded")),
            _ => ("server_error", Value::Null),
        };
        json!({"error": {"message": e.message, "type": ty, "param": null, "code": code}})
    };
    let mut resp = (status, Json(body)).into_response();
    e.put_retry_after(kind, resp.headers_mut());
    resp
}

/// The key an OpenAI-format request presents: Azure's `api-key` header, else a bearer token.
pub(super) fn presented_key(kind: SimKind, headers: &HeaderMap) -> Option<&str> {
    let bearer = || headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim);
    if kind == SimKind::AzureOpenai {
        // The `api-key`, else a Microsoft Entra token.
        return headers.get("api-key").and_then(|v| v.to_str().ok()).map(str::trim).or_else(bearer);
    }
    bearer()
}

fn content_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text")?.as_str()).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// Decode a chat request into a `GenRequest` plus (model, stream, include_usage).
fn decode(v: &Value) -> Result<(GenRequest, Option<String>, bool, bool), SimError> {
    let messages =
        v.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty()).ok_or_else(|| {
            SimError::new(400, "'messages' is a required property and must be a non-empty array")
        })?;
    let mut prompt = String::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        prompt.push_str(&format!("{role}: {}\n", m.get("content").map(content_text).unwrap_or_default()));
    }
    let max_tokens = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_u64))
        .map(|n| n.min(u32::MAX as u64) as u32);
    let model = v.get("model").and_then(Value::as_str).map(str::to_string);
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = v.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    let answered = messages.last().and_then(|m| m.get("role")).and_then(Value::as_str) == Some("tool");
    let tool = requested_tool(v).filter(|_| !answered);
    Ok((GenRequest { prompt, max_tokens, cache_blocks: Vec::new(), tool }, model, stream, include_usage))
}

/// The tool `tool_choice` names, else the first declared one (none for `tool_choice: none`).
fn requested_tool(v: &Value) -> Option<String> {
    let first = v.pointer("/tools/0/function/name").and_then(Value::as_str)?;
    match v.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => None,
        Some(choice) => {
            Some(choice.pointer("/function/name").and_then(Value::as_str).unwrap_or(first).to_string())
        }
        None => Some(first.to_string()),
    }
}

pub(super) fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

fn rate_headers(st: &AppState, r: Option<super::quota::Remaining>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let (SimKind::OpenAi | SimKind::AzureOpenai, Some(r)) = (st.kind, r) {
        let reset = HeaderValue::from_str(&format!("{}s", r.reset.as_secs())).expect("ascii");
        let req = r.requests.map(|n| (st.quota.rpm, n));
        let tok = r.tokens.map(|n| (st.quota.tpm, n));
        for (what, v) in [("requests", req), ("tokens", tok)] {
            if let Some((limit, left)) = v {
                h.insert(
                    header::HeaderName::from_bytes(format!("x-ratelimit-limit-{what}").as_bytes())
                        .expect("name"),
                    limit.into(),
                );
                h.insert(
                    header::HeaderName::from_bytes(format!("x-ratelimit-remaining-{what}").as_bytes())
                        .expect("name"),
                    left.into(),
                );
                h.insert(
                    header::HeaderName::from_bytes(format!("x-ratelimit-reset-{what}").as_bytes())
                        .expect("name"),
                    reset.clone(),
                );
            }
        }
    }
    h
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    match chat_inner(&st, &headers, &body).await {
        Ok(r) => r,
        Err(e) => error_response(st.kind, &e),
    }
}

async fn chat_inner(st: &Arc<AppState>, headers: &HeaderMap, body: &[u8]) -> Result<Response, SimError> {
    st.check_key(presented_key(st.kind, headers))?;
    let (req, model, stream, include_usage) = decode(&st.read_json(body)?)?;
    let model = model.unwrap_or_else(|| st.model.clone());
    if st.kind == SimKind::Vllm && model != st.model {
        return Err(SimError::new(404, format!("The model `{model}` does not exist.")));
    }
    let started = st.start(headers, &req)?;
    let extra = rate_headers(st, started.remaining);
    let id = format!("chatcmpl-sim{:08x}", started.id);
    let tool_call = started.tool_call.map(|name| (format!("call_sim{:08x}", started.id), name));
    let mut gen = started.gen;
    if !stream {
        return Ok(match gen.collect().await {
            Ok((text, usage, finish)) => {
                let (message, finish) = match &tool_call {
                    Some((call_id, name)) => (
                        json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                            {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}]}),
                        "tool_calls",
                    ),
                    None => (json!({"role": "assistant", "content": text, "refusal": null}), finish.as_str()),
                };
                let body = json!({
                    "id": id, "object": "chat.completion", "created": st.created, "model": model,
                    "system_fingerprint": null,
                    "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
                    "usage": usage_json(&usage),
                });
                let mut resp = Json(body).into_response();
                resp.headers_mut().extend(extra);
                resp
            }
            Err(GenEvent::Fail) => {
                error_response(st.kind, &SimError::new(500, gen.failure("simulated failure mid-answer")))
            }
            Err(_) => sse::dropped_response(),
        });
    }
    let (tx, resp) = sse::response(extra);
    let (kind, created) = (st.kind, st.created);
    tokio::spawn(async move {
        let chunk = |delta: Value, finish: Option<FinishReason>| {
            let finish = finish.map(|f| if tool_call.is_some() { "tool_calls" } else { f.as_str() });
            let mut c = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": null,
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            });
            if include_usage {
                c["usage"] = Value::Null;
            }
            c
        };
        // A piece of the answer: text, or a fragment of the tool call's arguments.
        let piece = |t: String| match &tool_call {
            Some(_) => json!({"tool_calls": [{"index": 0, "function": {"arguments": t}}]}),
            None => json!({"content": t}),
        };
        let opening = match &tool_call {
            Some((call_id, name)) => json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            None => json!({"role": "assistant", "content": ""}),
        };
        let mut first = true;
        loop {
            let ev = gen.next().await;
            if first && matches!(ev, Some(GenEvent::Token(_) | GenEvent::Final(..))) {
                first = false;
                if !tx.data(&chunk(opening.clone(), None)).await {
                    return;
                }
            }
            match ev {
                Some(GenEvent::Token(t)) => {
                    if !tx.data(&chunk(piece(t), None)).await {
                        return;
                    }
                }
                Some(GenEvent::Final(t, usage, finish)) => {
                    if kind == SimKind::Vllm {
                        tx.data(&chunk(piece(t), Some(finish))).await;
                    } else {
                        tx.data(&chunk(piece(t), None)).await;
                        tx.data(&chunk(json!({}), Some(finish))).await;
                    }
                    if include_usage {
                        let mut u = chunk(json!({}), None);
                        u["choices"] = json!([]);
                        u["usage"] = usage_json(&usage);
                        tx.data(&u).await;
                    }
                    tx.send("data: [DONE]\n\n".to_string()).await;
                    return;
                }
                Some(GenEvent::Fail) => {
                    let err = json!({"error": {"message": gen.failure("simulated failure mid-answer"),
                        "type": if kind == SimKind::Vllm { "InternalServerError" } else { "server_error" },
                        "param": null, "code": if kind == SimKind::Vllm { json!(500) } else { Value::Null }}});
                    tx.data(&err).await;
                    tx.send("data: [DONE]\n\n".to_string()).await;
                    return;
                }
                Some(GenEvent::Drop) | None => return tx.abort().await,
            }
        }
    });
    Ok(resp)
}

/// `GET /v1/models`.
pub async fn models(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = st.check_key(presented_key(st.kind, &headers)) {
        return error_response(st.kind, &e);
    }
    let owner = if st.kind == SimKind::Vllm { "vllm" } else { "system" };
    Json(json!({"object": "list", "data": [
        {"id": st.model, "object": "model", "created": st.created, "owned_by": owner}
    ]}))
    .into_response()
}
