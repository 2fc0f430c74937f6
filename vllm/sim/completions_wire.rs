//! The OpenAI legacy completions wire (`POST /v1/completions`), spoken by the `vllm` and
//! `openai` kinds.
//!
//! Decodes `prompt` (a string, strings, token ids or lists of them; token ids are read as one
//! word each), `max_tokens` (16 when absent, as both real servers do), `stream`,
//! `stream_options.include_usage` and `echo`, starts the reply through `AppState::start` (so
//! the engine model, quotas and every fault apply), and answers with a `text_completion` object
//! or an SSE stream of `text_completion` chunks ending in `data: [DONE]`. Only `n: 1` is
//! simulated.

use super::engine::FinishReason;
use super::generate::{GenEvent, GenRequest};
use super::openai_wire::{error_response, presented_key, usage_json};
use super::server::{AppState, SimError};
use super::{sse, SimKind};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// `max_tokens` when the request gives none.
const DEFAULT_MAX_TOKENS: u32 = 16;

/// What the sim reads of a completions request.
struct Decoded {
    prompt: String,
    model: Option<String>,
    max_tokens: u32,
    stream: bool,
    include_usage: bool,
    echo: bool,
}

fn decode(body: &[u8]) -> Result<Decoded, SimError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| SimError::new(400, format!("invalid JSON body: {e}")))?;
    let bad = || SimError::new(400, "'prompt' must be a string, strings, token ids or lists of token ids");
    let prompt = match v.get("prompt") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) if items.first().is_some_and(Value::is_number) => {
            token_words(items).ok_or_else(bad)?
        }
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Some(s.clone()),
                Value::Array(ids) => token_words(ids),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?
            .join("\n"),
        _ => return Err(bad()),
    };
    if v.get("n").and_then(Value::as_u64).is_some_and(|n| n != 1) {
        return Err(SimError::new(400, "only n = 1 is simulated"));
    }
    let max_tokens = v
        .get("max_tokens")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_MAX_TOKENS, |n| n.min(u32::MAX as u64) as u32);
    Ok(Decoded {
        prompt,
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        max_tokens,
        stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: v.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false),
        echo: v.get("echo").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// `POST /v1/completions`.
pub async fn completions(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    match answer(&st, &headers, &body).await {
        Ok(r) => r,
        Err(e) => error_response(st.kind, &e),
    }
}

async fn answer(st: &Arc<AppState>, headers: &HeaderMap, body: &[u8]) -> Result<Response, SimError> {
    st.check_key(presented_key(st.kind, headers))?;
    let req = decode(body)?;
    let model = req.model.clone().unwrap_or_else(|| st.model.clone());
    if st.kind == SimKind::Vllm && model != st.model {
        return Err(SimError::new(404, format!("The model `{model}` does not exist.")));
    }
    let gen_req = GenRequest {
        prompt: req.prompt.clone(),
        max_tokens: Some(req.max_tokens),
        cache_blocks: Vec::new(),
        tool: None,
    };
    let started = st.start(headers, &gen_req)?;
    let id = format!("cmpl-sim{:08x}", started.id);
    let created = st.created;
    let echoed = if req.echo { req.prompt.clone() } else { String::new() };
    let mut gen = started.gen;
    let choice = |text: &str, finish: Option<FinishReason>| json!([{"index": 0, "text": text, "logprobs": null, "finish_reason": finish.map(FinishReason::as_str)}]);
    if !req.stream {
        return Ok(match gen.collect().await {
            Ok((text, usage, finish)) => Json(json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "choices": choice(&format!("{echoed}{text}"), Some(finish)),
                "usage": usage_json(&usage),
            }))
            .into_response(),
            Err(GenEvent::Fail) => {
                error_response(st.kind, &SimError::new(500, gen.failure("simulated failure mid-answer")))
            }
            Err(_) => sse::dropped_response(),
        });
    }
    let (tx, resp) = sse::response(HeaderMap::new());
    let kind = st.kind;
    tokio::spawn(async move {
        let chunk = |choices: Value| {
            let mut c = json!({"id": id, "object": "text_completion", "created": created, "model": model,
                               "choices": choices});
            if req.include_usage {
                c["usage"] = Value::Null;
            }
            c
        };
        if !echoed.is_empty() && !tx.data(&chunk(choice(&echoed, None))).await {
            return;
        }
        loop {
            match gen.next().await {
                Some(GenEvent::Token(t)) => {
                    if !tx.data(&chunk(choice(&t, None))).await {
                        return;
                    }
                }
                Some(GenEvent::Final(t, usage, finish)) => {
                    tx.data(&chunk(choice(&t, Some(finish)))).await;
                    if req.include_usage {
                        let mut u = chunk(json!([]));
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

/// Token ids as the prompt text the sim reads: one word per id.
fn token_words(ids: &[Value]) -> Option<String> {
    let words: Option<Vec<String>> = ids.iter().map(|id| id.as_u64().map(|id| format!("t{id}"))).collect();
    words.filter(|w| !w.is_empty()).map(|w| w.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_of_every_shape_are_read() {
        let read = |v: Value| decode(v.to_string().as_bytes());
        assert_eq!(read(json!({"prompt": "Once"})).unwrap().prompt, "Once");
        assert_eq!(read(json!({"prompt": ["a", "b"]})).unwrap().prompt, "a\nb");
        assert_eq!(read(json!({"prompt": [1, 2]})).unwrap().prompt, "t1 t2");
        assert_eq!(read(json!({"prompt": [[1, 2], [3]]})).unwrap().prompt, "t1 t2\nt3");
        let plain = read(json!({"prompt": "x"})).unwrap();
        assert_eq!((plain.max_tokens, plain.stream, plain.echo), (DEFAULT_MAX_TOKENS, false, false));
        for bad in [
            json!({}),
            json!({"prompt": 1}),
            json!({"prompt": []}),
            json!({"prompt": [{}]}),
            json!({"prompt": ["a", 1]}),
            json!({"prompt": [[]]}),
            json!({"prompt": "x", "n": 2}),
        ] {
            assert_eq!(read(bad.clone()).err().map(|e| e.status), Some(400), "{bad}");
        }
    }
}
