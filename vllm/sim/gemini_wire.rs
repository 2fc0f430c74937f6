//! The Gemini `generateContent` wire format (`gemini` kind).
//!
//! Serves `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`
//! (`?alt=sse` gives SSE `data:` frames, each a whole `GenerateContentResponse`, the last with
//! `finishReason` and `usageMetadata`, and no `[DONE]`; without `alt=sse` the stream is one
//! JSON array, as the real API does). The key comes from `x-goog-api-key` or `?key=`.
//! Errors use Google's `{"error":{"code","message","status"}}` envelope. With
//! `--tool-call-args`, a request that declares function declarations is answered with one
//! `functionCall` part carrying whole `args`, as Gemini streams calls (never in fragments).

use super::engine::FinishReason;
use super::generate::{GenEvent, GenRequest, Usage};
use super::server::{AppState, SimError};
use super::sse;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

fn status_name(code: u16) -> &'static str {
    match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

fn error_body(code: u16, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "status": status_name(code)}})
}

/// Render an error in Google's envelope. A bad or missing key is 400 INVALID_ARGUMENT /
/// 403 PERMISSION_DENIED on the real API; the simulator keeps that.
pub fn error_response(e: &SimError) -> Response {
    let code = match (e.status, e.message.as_str()) {
        (401, "missing API key") => 403,
        (401, _) => 400,
        (s, _) => s,
    };
    let message = match code {
        403 if e.status == 401 => "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
        400 if e.status == 401 => "API key not valid. Please pass a valid API key.",
        _ => e.message.as_str(),
    };
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Json(error_body(code, message))).into_response();
    e.put_retry_after(super::SimKind::Gemini, resp.headers_mut());
    resp
}

fn parts_text(v: &Value) -> String {
    v.get("parts")
        .and_then(Value::as_array)
        .map(|ps| ps.iter().filter_map(|p| p.get("text")?.as_str()).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

fn decode(body: &[u8]) -> Result<GenRequest, SimError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| SimError::new(400, format!("Invalid JSON payload received. {e}")))?;
    let contents =
        v.get("contents").and_then(Value::as_array).filter(|c| !c.is_empty()).ok_or_else(|| {
            SimError::new(400, "* GenerateContentRequest.contents: contents is not specified")
        })?;
    let mut prompt = String::new();
    if let Some(si) = v.get("systemInstruction").or_else(|| v.get("system_instruction")) {
        prompt.push_str(&format!("system: {}\n", parts_text(si)));
    }
    for c in contents {
        let role = c.get("role").and_then(Value::as_str).unwrap_or("user");
        prompt.push_str(&format!("{role}: {}\n", parts_text(c)));
    }
    let max_tokens = v
        .pointer("/generationConfig/maxOutputTokens")
        .and_then(Value::as_u64)
        .map(|n| n.min(u32::MAX as u64) as u32);
    let answered = contents
        .last()
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .is_some_and(|parts| parts.iter().any(|p| p.get("functionResponse").is_some()));
    let tool = requested_tool(&v).filter(|_| !answered);
    Ok(GenRequest { prompt, max_tokens, cache_blocks: Vec::new(), tool })
}

/// The function `toolConfig` allows (its first allowed name), else the first declared one;
/// none with mode NONE.
fn requested_tool(v: &Value) -> Option<String> {
    let first = v.pointer("/tools/0/functionDeclarations/0/name").and_then(Value::as_str)?;
    let config = v.pointer("/toolConfig/functionCallingConfig");
    if config.and_then(|c| c.get("mode")).and_then(Value::as_str) == Some("NONE") {
        return None;
    }
    let allowed = config.and_then(|c| c.pointer("/allowedFunctionNames/0")).and_then(Value::as_str);
    Some(allowed.unwrap_or(first).to_string())
}

/// The last chunk of a function-call answer: one `functionCall` part with the whole `args`.
fn call_json(model: &str, id: &str, name: &str, args: &str, usage: &Usage) -> Value {
    let args: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
    json!({
        "candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": name, "args": args}}]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage_json(usage),
        "modelVersion": model,
        "responseId": id,
    })
}

fn usage_json(u: &Usage) -> Value {
    let mut m = json!({
        "promptTokenCount": u.prompt_tokens,
        "candidatesTokenCount": u.completion_tokens,
        "totalTokenCount": u.prompt_tokens + u.completion_tokens,
    });
    if u.cached_tokens > 0 {
        m["cachedContentTokenCount"] = json!(u.cached_tokens);
    }
    m
}

fn response_json(model: &str, id: &str, text: &str, end: Option<(&Usage, FinishReason)>) -> Value {
    let mut cand = json!({"content": {"role": "model", "parts": [{"text": text}]}, "index": 0});
    let mut r = json!({"candidates": [], "modelVersion": model, "responseId": id});
    if let Some((usage, finish)) = end {
        cand["finishReason"] = json!(match finish {
            FinishReason::Stop => "STOP",
            FinishReason::Length => "MAX_TOKENS",
        });
        r["usageMetadata"] = usage_json(usage);
    }
    r["candidates"] = json!([cand]);
    r
}

/// `POST /v1beta/models/{model}:{generateContent|streamGenerateContent}`.
pub async fn generate(
    State(st): State<Arc<AppState>>,
    Path(model_action): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match inner(&st, &model_action, &q, &headers, &body).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn inner(
    st: &Arc<AppState>,
    model_action: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, SimError> {
    let key =
        headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()).or(q.get("key").map(String::as_str));
    st.check_key(key)?;
    let (model, stream) = match model_action.split_once(':') {
        Some((m, "generateContent")) => (m.to_string(), false),
        Some((m, "streamGenerateContent")) => (m.to_string(), true),
        _ => return Err(SimError::new(404, format!("models/{model_action} is not found"))),
    };
    let req = decode(body)?;
    let started = st.start(headers, &req)?;
    let id = format!("sim{:016x}", started.id);
    let tool_call = started.tool_call;
    let mut gen = started.gen;
    let sse_mode = q.get("alt").is_some_and(|a| a == "sse");
    if !stream || !sse_mode || tool_call.is_some() {
        let collected = gen.collect().await;
        if let (Some(name), Ok((args, usage, _))) = (&tool_call, &collected) {
            let r = call_json(&model, &id, name, args, usage);
            if stream && sse_mode {
                let (tx, resp) = sse::response(HeaderMap::new());
                tokio::spawn(async move { tx.data(&r).await });
                return Ok(resp);
            }
            return Ok(if stream { Json(json!([r])) } else { Json(r) }.into_response());
        }
        return Ok(match collected {
            Ok((text, usage, finish)) => {
                let r = response_json(&model, &id, &text, Some((&usage, finish)));
                if stream {
                    Json(json!([r])).into_response()
                } else {
                    Json(r).into_response()
                }
            }
            Err(GenEvent::Fail) => {
                error_response(&SimError::new(500, gen.failure("An internal error has occurred.")))
            }
            Err(_) => sse::dropped_response(),
        });
    }
    let (tx, resp) = sse::response(HeaderMap::new());
    tokio::spawn(async move {
        loop {
            match gen.next().await {
                Some(GenEvent::Token(t)) => {
                    if !tx.data(&response_json(&model, &id, &t, None)).await {
                        return;
                    }
                }
                Some(GenEvent::Final(t, usage, finish)) => {
                    tx.data(&response_json(&model, &id, &t, Some((&usage, finish)))).await;
                    return;
                }
                Some(GenEvent::Fail) => {
                    tx.data(&error_body(500, &gen.failure("An internal error has occurred."))).await;
                    return;
                }
                Some(GenEvent::Drop) | None => return tx.abort().await,
            }
        }
    });
    Ok(resp)
}
