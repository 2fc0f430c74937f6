//! Bedrock's Converse API (`POST /model/{model}/converse`, `/converse-stream`), for the models
//! Bedrock serves that are not Claude. The body is checked as Bedrock checks it: roles
//! alternate from a user turn, and a history with `toolUse` or `toolResult` blocks needs a
//! `toolConfig`. The stream's events are event-stream frames named by `:event-type`
//! (`messageStart`, `contentBlockStart` for a tool call only, `contentBlockDelta`,
//! `contentBlockStop`, `messageStop`, then `metadata` with the usage).

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::engine::FinishReason;
use super::generate::{GenEvent, GenRequest, Usage};
use super::server::{AppState, SimError};
use super::sse::{self, Framing};
use crate::adapter::transport::eventstream;

fn invalid(message: &str) -> SimError {
    SimError::new(400, message)
}

/// The prompt and what the request asks, once the body passes Bedrock's checks.
fn decode(v: &Value) -> Result<GenRequest, SimError> {
    let messages = v.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty());
    let messages = messages.ok_or_else(|| invalid("Malformed input request: messages must not be empty"))?;
    let mut prompt = String::new();
    for text in
        v.get("system").and_then(Value::as_array).into_iter().flatten().filter_map(|b| b["text"].as_str())
    {
        prompt.push_str(&format!("system: {text}\n"));
    }
    let mut uses_tools = false;
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            return Err(invalid("A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again."));
        }
        prompt.push_str(&format!("{role}: "));
        for block in m.get("content").and_then(Value::as_array).into_iter().flatten() {
            if let Some(text) = block.get("text").and_then(Value::as_str) {
                prompt.push_str(text);
            } else if let Some(tool) = block.get("toolUse").or(block.get("toolResult")) {
                uses_tools = true;
                prompt.push_str(&tool.to_string());
            }
        }
        prompt.push('\n');
    }
    let config = v.get("toolConfig");
    if uses_tools && config.is_none() {
        return Err(invalid(
            "The toolConfig field must be defined when using toolUse and toolResult content blocks.",
        ));
    }
    let answered = messages
        .last()
        .and_then(|m| m["content"].as_array())
        .is_some_and(|blocks| blocks.iter().any(|b| b.get("toolResult").is_some()));
    let tool = config
        .and_then(|c| c.pointer("/toolChoice/tool/name").or(c.pointer("/tools/0/toolSpec/name")))
        .and_then(Value::as_str)
        .map(str::to_string)
        .filter(|_| !answered);
    let max_tokens = v
        .pointer("/inferenceConfig/maxTokens")
        .and_then(Value::as_u64)
        .map(|n| n.min(u32::MAX as u64) as u32);
    Ok(GenRequest { prompt, max_tokens, cache_blocks: Vec::new(), tool })
}

fn stop_reason(finish: FinishReason, tool: bool) -> &'static str {
    match (tool, finish) {
        (true, _) => "tool_use",
        (false, FinishReason::Stop) => "end_turn",
        (false, FinishReason::Length) => "max_tokens",
    }
}

fn usage_json(u: &Usage) -> Value {
    json!({"inputTokens": u.prompt_tokens, "outputTokens": u.completion_tokens,
           "totalTokens": u.prompt_tokens + u.completion_tokens})
}

/// One event frame of a ConverseStream answer.
fn frame(event: &str, payload: &Value) -> bytes::Bytes {
    let headers = [(":event-type", event), (":content-type", "application/json"), (":message-type", "event")];
    eventstream::frame(&headers, payload.to_string().as_bytes())
}

/// The answer to an admitted Converse body `v`, whole or streamed.
pub(super) async fn answer(
    st: &Arc<AppState>,
    headers: &HeaderMap,
    v: &Value,
    stream: bool,
) -> Result<Response, SimError> {
    let req = decode(v)?;
    let started = st.start(headers, &req)?;
    let tool = started.tool_call.map(|name| (format!("tooluse_sim{:016x}", started.id), name));
    let mut gen = started.gen;
    if !stream {
        return Ok(match gen.collect().await {
            Ok((text, usage, finish)) => {
                let content = match &tool {
                    Some((id, name)) => {
                        let input: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
                        json!([{"toolUse": {"toolUseId": id, "name": name, "input": input}}])
                    }
                    None => json!([{"text": text}]),
                };
                Json(json!({
                    "output": {"message": {"role": "assistant", "content": content}},
                    "stopReason": stop_reason(finish, tool.is_some()),
                    "usage": usage_json(&usage), "metrics": {"latencyMs": 1},
                }))
                .into_response()
            }
            Err(GenEvent::Fail) => {
                return Err(SimError::new(500, gen.failure("The server encountered an internal error.")))
            }
            Err(_) => sse::dropped_response(),
        });
    }
    let (tx, resp) = sse::response_as(HeaderMap::new(), Framing::EventStream);
    tokio::spawn(async move {
        if !tx.frame(frame("messageStart", &json!({"role": "assistant"}))).await {
            return;
        }
        if let Some((id, name)) = &tool {
            let start =
                json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": id, "name": name}}});
            if !tx.frame(frame("contentBlockStart", &start)).await {
                return;
            }
        }
        let delta = |piece: &str| match &tool {
            Some(_) => json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": piece}}}),
            None => json!({"contentBlockIndex": 0, "delta": {"text": piece}}),
        };
        loop {
            match gen.next().await {
                Some(GenEvent::Token(t)) => {
                    if !tx.frame(frame("contentBlockDelta", &delta(&t))).await {
                        return;
                    }
                }
                Some(GenEvent::Final(t, usage, finish)) => {
                    tx.frame(frame("contentBlockDelta", &delta(&t))).await;
                    tx.frame(frame("contentBlockStop", &json!({"contentBlockIndex": 0}))).await;
                    let stop = json!({"stopReason": stop_reason(finish, tool.is_some())});
                    tx.frame(frame("messageStop", &stop)).await;
                    let metadata = json!({"usage": usage_json(&usage), "metrics": {"latencyMs": 1}});
                    tx.frame(frame("metadata", &metadata)).await;
                    return;
                }
                Some(GenEvent::Fail) => {
                    let headers =
                        [(":exception-type", "modelStreamErrorException"), (":message-type", "exception")];
                    let payload = json!({"message": gen.failure("The model stream failed.")}).to_string();
                    tx.frame(eventstream::frame(&headers, payload.as_bytes())).await;
                    return;
                }
                Some(GenEvent::Drop) | None => return tx.abort().await,
            }
        }
    });
    Ok(resp)
}
