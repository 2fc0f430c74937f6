//! The OpenAI embeddings wire (`POST /v1/embeddings`), spoken by the `vllm` and `openai` kinds.
//!
//! `input` is a string, strings, token ids or lists of token ids (anything else: 400 naming
//! `input`); `encoding_format` is float or base64 (little-endian `f32`, as the real servers
//! write it); `dimensions` sets the vector length. Vectors are deterministic: each is drawn
//! from a hash of `--seed` and its input and scaled to unit length, so the same text embeds
//! the same on every sim with the same seed. Usage counts the input's tokens. The key, the
//! model (vllm), hosted quotas and the fault plan (`status`, `hang`, `ttft_ms`) apply as they
//! do to chat; there is no stream to break.

use super::openai_wire::{error_response, presented_key};
use super::server::{AppState, SimError};
use super::{text, SimKind, FAULT_HEADER};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Vector length when the request sets no `dimensions`.
pub const DEFAULT_DIMENSIONS: usize = 32;
/// The longest vector served.
const MAX_DIMENSIONS: u64 = 4096;

/// One input to embed.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Tokens(Vec<u64>),
}

impl Piece {
    fn tokens(&self) -> u32 {
        match self {
            Piece::Text(t) => text::prompt_tokens(t),
            Piece::Tokens(ids) => ids.len() as u32,
        }
    }
}

/// `POST /v1/embeddings`.
pub async fn embeddings(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    match answer(&st, &headers, &body).await {
        Ok(body) => Json(body).into_response(),
        Err(e) => error_response(st.kind, &e),
    }
}

async fn answer(st: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Value, SimError> {
    st.check_key(presented_key(st.kind, headers))?;
    let v: Value =
        serde_json::from_slice(body).map_err(|e| SimError::new(400, format!("invalid JSON body: {e}")))?;
    let model = v.get("model").and_then(Value::as_str).unwrap_or(&st.model).to_string();
    if st.kind == SimKind::Vllm && model != st.model {
        return Err(SimError::new(404, format!("The model `{model}` does not exist.")));
    }
    let pieces = pieces(v.get("input"))?;
    let base64 = match v.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => return Err(SimError::new(400, format!("unknown encoding_format `{other}`"))),
    };
    let dimensions = match v.get("dimensions") {
        None | Some(Value::Null) => DEFAULT_DIMENSIONS,
        Some(d) => match d.as_u64().filter(|d| (1..=MAX_DIMENSIONS).contains(d)) {
            Some(d) => d as usize,
            None => return Err(SimError::new(400, format!("dimensions must be 1 to {MAX_DIMENSIONS}"))),
        },
    };
    let tokens: u32 = pieces.iter().map(Piece::tokens).sum();
    admit(st, headers, tokens).await?;
    let data: Vec<Value> = pieces
        .iter()
        .enumerate()
        .map(|(index, piece)| {
            let vector = vector(st.seed, piece, dimensions);
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

/// The inputs, whatever shape they came in.
fn pieces(input: Option<&Value>) -> Result<Vec<Piece>, SimError> {
    let bad = || SimError::new(400, "'input' must be a string, strings, token ids or lists of token ids");
    let ids = |v: &[Value]| v.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>();
    match input.ok_or_else(bad)? {
        Value::String(s) => Ok(vec![Piece::Text(s.clone())]),
        Value::Array(items) => match items.first().ok_or_else(bad)? {
            Value::String(_) => {
                items.iter().map(|i| i.as_str().map(|s| Piece::Text(s.into())).ok_or_else(bad)).collect()
            }
            Value::Number(_) => Ok(vec![Piece::Tokens(ids(items).ok_or_else(bad)?)]),
            _ => items
                .iter()
                .map(|i| i.as_array().and_then(|a| ids(a)).map(Piece::Tokens).ok_or_else(bad))
                .collect(),
        },
        _ => Err(bad()),
    }
}

/// Hosted quota, then the fault plan: an error status, a hang, or a slower answer.
async fn admit(st: &AppState, headers: &HeaderMap, tokens: u32) -> Result<(), SimError> {
    if st.engine.is_none() {
        st.quota.check(u64::from(tokens), Instant::now()).map_err(|e| SimError {
            status: 429,
            message: format!(
                "Rate limit reached for {} per minute (simulated)",
                if e.tokens { "tokens" } else { "requests" }
            ),
            retry_after: Some(std::time::Duration::from_secs(e.retry_after_secs)),
        })?;
    }
    let header = headers.get(FAULT_HEADER).and_then(|v| v.to_str().ok());
    let plan = st.faults.plan(header).map_err(|m| SimError::new(400, m))?;
    if let Some(status) = plan.status {
        return Err(SimError {
            status,
            message: format!("simulated failure ({status})"),
            retry_after: (status == 429).then_some(st.faults.retry_after),
        });
    }
    if plan.hang {
        let _ = st.shutdown.clone().wait_for(|down| *down).await;
        return Err(SimError::new(503, "shutting down"));
    }
    let delay = plan.ttft_ms.map(Duration::from_millis);
    let delay = delay.unwrap_or(if st.engine.is_none() { st.pacer.ttft } else { Duration::ZERO });
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    Ok(())
}

/// A unit vector drawn from a hash of the seed and the input.
fn vector(seed: u64, piece: &Piece, dimensions: usize) -> Vec<f32> {
    let mut state = match piece {
        Piece::Text(t) => xxhash_rust::xxh3::xxh3_64_with_seed(t.as_bytes(), seed),
        Piece::Tokens(ids) => {
            let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
            xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, seed ^ 0x70c3)
        }
    };
    let raw: Vec<f32> = (0..dimensions)
        .map(|_| {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
    raw.into_iter().map(|x| x / norm).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_deterministic_unit_length_and_differ_by_input() {
        let text = Piece::Text("hello".into());
        let a = vector(1, &text, 64);
        assert_eq!(a, vector(1, &text, 64));
        assert_eq!(a.len(), 64);
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        assert_ne!(a, vector(1, &Piece::Text("hullo".into()), 64));
        assert_ne!(a, vector(2, &text, 64), "the seed matters");
        assert_ne!(vector(1, &Piece::Tokens(vec![1]), 8), vector(1, &Piece::Tokens(vec![2]), 8));
    }

    #[test]
    fn every_input_shape_is_read_and_others_refused() {
        let read = |v: Value| pieces(Some(&v));
        assert_eq!(read(json!("a")).unwrap(), [Piece::Text("a".into())]);
        assert_eq!(read(json!(["a", "b"])).unwrap().len(), 2);
        assert_eq!(read(json!([1, 2])).unwrap(), [Piece::Tokens(vec![1, 2])]);
        assert_eq!(read(json!([[1], [2, 3]])).unwrap(), [Piece::Tokens(vec![1]), Piece::Tokens(vec![2, 3])]);
        for bad in [json!(1), json!([]), json!(["a", 1]), json!([1, "a"]), json!([[1], "a"]), json!({})] {
            assert_eq!(read(bad.clone()).unwrap_err().status, 400, "{bad}");
        }
        assert_eq!(pieces(None).unwrap_err().status, 400);
    }
}
