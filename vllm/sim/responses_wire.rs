//! The OpenAI Responses wire format (`POST /v1/responses`), spoken by the `vllm` and `openai`
//! kinds, stateless as vLLM serves it.
//!
//! Decodes `input` (a string, or message / `function_call` / `function_call_output` items),
//! `instructions`, `max_output_tokens`, function `tools` and `tool_choice`, `stream`, and
//! answers with a Response object or OpenAI's SSE event sequence (`response.created` …
//! `response.completed`, every event with its `sequence_number`). With `--tool-call-args`, a
//! request that declares tools and whose last item is not a `function_call_output` is answered
//! with a `function_call` item whose arguments stream as `response.function_call_arguments.delta`
//! events. `store` and `previous_response_id` are accepted and echoed in the Response object,
//! as OpenAI does (nothing is stored: a test sees that they reached the backend). Faults are
//! the shared ones: an error status before the first token, an abrupt close
//! (`drop_after`), or `response.failed` then `error` after the first token (`error_event`).

use super::generate::{GenEvent, GenRequest, Usage};
use super::openai_wire::error_response;
use super::server::{AppState, SimError};
use super::sse;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// `POST /v1/responses`.
pub async fn responses(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    match respond(&st, &headers, &body).await {
        Ok(r) => r,
        Err(e) => error_response(st.kind, &e),
    }
}

/// What the Response object repeats of the request: `store` and `previous_response_id`.
struct Echo {
    store: bool,
    previous_response_id: Value,
}

/// Decode a Responses request into a `GenRequest` plus (model, stream, echo).
/// `openai`: read as OpenAI does, which takes more item types than vLLM.
fn decode(v: &Value, openai: bool) -> Result<(GenRequest, Option<String>, bool, Echo), SimError> {
    let mut prompt = String::new();
    if let Some(instructions) = v.get("instructions").and_then(Value::as_str) {
        prompt.push_str(&format!("system: {instructions}\n"));
    }
    let mut answered = false;
    match v.get("input") {
        Some(Value::String(text)) => prompt.push_str(&format!("user: {text}\n")),
        Some(Value::Array(items)) if !items.is_empty() => {
            for item in items {
                let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
                let line = match kind {
                    "message" => {
                        let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
                        format!("{role}: {}", item.get("content").map(content_text).unwrap_or_default())
                    }
                    "function_call" | "custom_tool_call" => format!(
                        "assistant: {}({})",
                        item.get("name").and_then(Value::as_str).unwrap_or_default(),
                        item.get("arguments")
                            .or(item.get("input"))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    ),
                    "function_call_output" | "custom_tool_call_output" => {
                        format!("tool: {}", item.get("output").map(content_text).unwrap_or_default())
                    }
                    // What OpenAI takes and vLLM does not: its encrypted reasoning (which must be
                    // OpenAI's own) and tools declared in the input.
                    "reasoning" | "additional_tools" if openai => {
                        openais_own(item)?;
                        continue;
                    }
                    other => return Err(SimError::new(400, format!("Invalid input item type: '{other}'"))),
                };
                answered = kind.ends_with("call_output");
                prompt.push_str(&line);
                prompt.push('\n');
            }
        }
        _ => return Err(SimError::new(400, "'input' is a required property: a string or a non-empty array")),
    }
    let max_tokens =
        v.get("max_output_tokens").and_then(Value::as_u64).map(|n| n.min(u32::MAX as u64) as u32);
    let model = v.get("model").and_then(Value::as_str).map(str::to_string);
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let tool = requested_tool(v).filter(|_| !answered);
    let echo = Echo {
        store: v.get("store").and_then(Value::as_bool).unwrap_or(false),
        previous_response_id: v.get("previous_response_id").cloned().unwrap_or(Value::Null),
    };
    Ok((GenRequest { prompt, max_tokens, cache_blocks: Vec::new(), tool }, model, stream, echo))
}

/// The prefix of the simulated OpenAI's encrypted reasoning (what a test writes as OpenAI's).
pub const ENCRYPTED_PREFIX: &str = "gAAAAsim";

/// A `reasoning` item's `encrypted_content` must be OpenAI's own (here: carry the prefix), as
/// OpenAI refuses another provider's or a tampered one.
fn openais_own(item: &Value) -> Result<(), SimError> {
    match item.get("encrypted_content").and_then(Value::as_str) {
        Some(text) if !text.starts_with(ENCRYPTED_PREFIX) => {
            Err(SimError::new(400, "The encrypted content for item could not be verified."))
        }
        _ => Ok(()),
    }
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

/// The function `tool_choice` names, else the first declared one (none for `tool_choice: none`).
fn requested_tool(v: &Value) -> Option<String> {
    let tools = v.get("tools")?.as_array()?;
    let first = tools.iter().find(|t| t.get("type") == Some(&json!("function")))?.get("name")?.as_str()?;
    match v.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => None,
        Some(choice) => Some(choice.get("name").and_then(Value::as_str).unwrap_or(first).to_string()),
        None => Some(first.to_string()),
    }
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// One answer's ids and its Response object in each state.
struct Answer {
    id: String,
    item_id: String,
    /// `(call_id, name)` when the answer is a function call.
    call: Option<(String, String)>,
    model: String,
    created: u64,
    echo: Echo,
}

impl Answer {
    fn response(&self, status: &str, output: Value, usage: Value) -> Value {
        json!({
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": null, "incomplete_details": null, "instructions": null, "model": self.model,
            "output": output, "parallel_tool_calls": true, "temperature": 1.0, "tool_choice": "auto",
            "tools": [], "top_p": 1.0, "store": self.echo.store, "text": {"format": {"type": "text"}},
            "previous_response_id": self.echo.previous_response_id, "usage": usage, "metadata": {},
        })
    }

    /// The output item holding `text` (the arguments, for a function call).
    fn item(&self, text: &str, status: &str) -> Value {
        match &self.call {
            Some((call_id, name)) => json!({"id": self.item_id, "type": "function_call", "status": status,
                "call_id": call_id, "name": name, "arguments": text}),
            None if status == "in_progress" => json!({"id": self.item_id, "type": "message",
                "status": status, "role": "assistant", "content": []}),
            None => json!({"id": self.item_id, "type": "message", "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}),
        }
    }

    /// The final Response object for `text` ending with `finish` (`length` → incomplete).
    fn finished(&self, text: &str, usage: &Usage, length: bool) -> (Value, &'static str) {
        let status = if length { "incomplete" } else { "completed" };
        let mut response = self.response(status, json!([self.item(text, status)]), usage_json(usage));
        if length {
            response["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        (response, if length { "response.incomplete" } else { "response.completed" })
    }
}

async fn respond(st: &Arc<AppState>, headers: &HeaderMap, body: &[u8]) -> Result<Response, SimError> {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    st.check_key(bearer.and_then(|v| v.strip_prefix("Bearer ")).map(str::trim))?;
    let (req, model, stream, echo) = decode(&st.read_json(body)?, st.kind == super::SimKind::OpenAi)?;
    let model = model.unwrap_or_else(|| st.model.clone());
    if st.kind == super::SimKind::Vllm && model != st.model {
        return Err(SimError::new(404, format!("The model `{model}` does not exist.")));
    }
    let started = st.start(headers, &req)?;
    let answer = Answer {
        id: format!("resp_sim{:08x}", started.id),
        item_id: format!("{}_sim{:08x}", if started.tool_call.is_some() { "fc" } else { "msg" }, started.id),
        call: started.tool_call.map(|name| (format!("call_sim{:08x}", started.id), name)),
        model,
        created: st.created,
        echo,
    };
    let mut gen = started.gen;
    if !stream {
        return Ok(match gen.collect().await {
            Ok((text, usage, finish)) => {
                Json(answer.finished(&text, &usage, finish.as_str() == "length").0).into_response()
            }
            Err(GenEvent::Fail) => {
                error_response(st.kind, &SimError::new(500, gen.failure("simulated failure mid-answer")))
            }
            Err(_) => sse::dropped_response(),
        });
    }
    let (tx, resp) = sse::response(HeaderMap::new());
    tokio::spawn(async move {
        let mut sequence = 0u64;
        let mut send = |kind: &str, mut body: Value| {
            body["type"] = json!(kind);
            body["sequence_number"] = json!(sequence);
            sequence += 1;
            format!("event: {kind}\ndata: {body}\n\n")
        };
        let at = json!({"item_id": answer.item_id, "output_index": 0});
        let with = |more: Value| {
            let mut v = at.clone();
            if let (Some(v), Value::Object(more)) = (v.as_object_mut(), more) {
                v.extend(more);
            }
            v
        };
        let delta_kind = if answer.call.is_some() {
            "response.function_call_arguments.delta"
        } else {
            "response.output_text.delta"
        };
        let mut text = String::new();
        let mut first = true;
        loop {
            let ev = gen.next().await;
            if first && matches!(ev, Some(GenEvent::Token(_) | GenEvent::Final(..))) {
                first = false;
                let opening = answer.response("in_progress", json!([]), Value::Null);
                let mut frames = send("response.created", json!({"response": opening}));
                frames += &send("response.in_progress", json!({"response": opening}));
                frames += &send(
                    "response.output_item.added",
                    json!({"output_index": 0, "item": answer.item("", "in_progress")}),
                );
                if answer.call.is_none() {
                    let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                    frames +=
                        &send("response.content_part.added", with(json!({"content_index": 0, "part": part})));
                }
                if !tx.send(frames).await {
                    return;
                }
            }
            let delta = |t: &str| match &answer.call {
                Some(_) => with(json!({"delta": t})),
                None => with(json!({"content_index": 0, "delta": t, "logprobs": []})),
            };
            match ev {
                Some(GenEvent::Token(t)) => {
                    text.push_str(&t);
                    if !tx.send(send(delta_kind, delta(&t))).await {
                        return;
                    }
                }
                Some(GenEvent::Final(t, usage, finish)) => {
                    text.push_str(&t);
                    let mut frames = send(delta_kind, delta(&t));
                    let (response, end) = answer.finished(&text, &usage, finish.as_str() == "length");
                    let item = &response["output"][0];
                    if answer.call.is_some() {
                        frames +=
                            &send("response.function_call_arguments.done", with(json!({"arguments": text})));
                    } else {
                        frames += &send(
                            "response.output_text.done",
                            with(json!({"content_index": 0, "text": text, "logprobs": []})),
                        );
                        frames += &send(
                            "response.content_part.done",
                            with(json!({"content_index": 0, "part": item["content"][0]})),
                        );
                    }
                    frames += &send("response.output_item.done", json!({"output_index": 0, "item": item}));
                    frames += &send(end, json!({"response": response}));
                    tx.send(frames).await;
                    return;
                }
                Some(GenEvent::Fail) => {
                    let mut failed =
                        answer.response("failed", json!([answer.item(&text, "incomplete")]), Value::Null);
                    let message = gen.failure("simulated failure mid-answer");
                    failed["error"] = json!({"code": "server_error", "message": message});
                    let mut frames = send("response.failed", json!({"response": failed}));
                    frames +=
                        &send("error", json!({"code": "server_error", "message": message, "param": null}));
                    tx.send(frames).await;
                    return;
                }
                Some(GenEvent::Drop) | None => return tx.abort().await,
            }
        }
    });
    Ok(resp)
}
