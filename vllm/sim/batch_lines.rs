//! A batch line answered as the simulator's own realtime route for its URL would answer it,
//! not streamed: what a provider's batch does with each line. Above the store and the routes
//! both, so neither depends on the other.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use serde_json::{json, Value};

use super::batch_store::{Answer, Line};
use super::faults::FAULT_HEADER;
use super::server::AppState;
use super::{anthropic_wire, completions_wire, embeddings_wire, openai_wire, responses_wire, SimKind};

/// Answer every line at once, in order, through the realtime routes.
pub async fn answer_all(st: &Arc<AppState>, lines: &[Line]) -> Vec<Answer> {
    futures::future::join_all(lines.iter().map(|l| answer(st, l))).await
}

/// Answer one line as its realtime route would, not streamed.
pub async fn answer(st: &Arc<AppState>, line: &Line) -> Answer {
    let mut headers = HeaderMap::new();
    if let Some(key) = st.api_key.as_deref().and_then(|k| HeaderValue::from_str(k).ok()) {
        headers.insert("x-api-key", key);
    }
    if let Some(key) = st.api_key.as_deref().and_then(|k| HeaderValue::from_str(&format!("Bearer {k}")).ok())
    {
        headers.insert(header::AUTHORIZATION, key);
    }
    headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    let fault = line.body.pointer("/metadata/sim_fault").and_then(Value::as_str);
    if let Some(fault) = fault.and_then(|f| HeaderValue::from_str(f).ok()) {
        headers.insert(FAULT_HEADER, fault);
    }
    let mut body = line.body.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("stream");
        o.remove("stream_options");
    }
    let bytes = Bytes::from(body.to_string());
    let state = State(Arc::clone(st));
    let resp = match (st.kind, line.url.as_str()) {
        (SimKind::Anthropic, _) => anthropic_wire::messages(state, headers, bytes).await,
        (_, "/v1/embeddings") => embeddings_wire::embeddings(state, headers, bytes).await,
        (_, "/v1/completions") => completions_wire::completions(state, headers, bytes).await,
        (_, "/v1/responses") => responses_wire::responses(state, headers, bytes).await,
        _ => openai_wire::chat(state, headers, bytes).await,
    };
    let status = resp.status().as_u16();
    let request_id = match resp.headers().get("request-id").and_then(|v| v.to_str().ok()) {
        Some(id) => id.to_string(),
        None => st.batches.new_id("req_"),
    };
    let (status, body) = match axum::body::to_bytes(resp.into_body(), usize::MAX).await {
        Ok(b) => (status, serde_json::from_slice(&b).unwrap_or(Value::Null)),
        // A reply cut mid-flight (`drop_after`, `hang` at shutdown): a server error.
        Err(_) => (500, json!({"error": {"message": "connection closed mid-reply (simulated)"}})),
    };
    Answer { status, body, request_id }
}
