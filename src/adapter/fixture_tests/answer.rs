//! The client's answer of a case, read from the events `adapter::send` yields: what a door
//! would hand its client (text, reasoning, tool calls joined by index, finish, usage), what it
//! would relay as the upstream wrote it (chat or completion chunks less their head, the client's
//! own dialect's events), the vectors of an embeddings answer, and the error that ended it with
//! its class, status and `Retry-After`.

use serde_json::{json, Value};

use crate::canonical::{Event, NativeEvent, RelayChunk, UpstreamError};

/// `events`, read beside their relayed chunks, as an adapter relaying alone yields them: each
/// relayed chunk or native event marked with whether output was read from it, and no output
/// event.
pub(super) fn alone(events: &[Result<Event, UpstreamError>]) -> Vec<Result<Event, UpstreamError>> {
    let mut alone: Vec<Result<Event, UpstreamError>> = Vec::new();
    for event in events {
        match event {
            Ok(event) if event.is_output() => {
                let relayed = alone.iter_mut().rev().find_map(|e| match e {
                    Ok(
                        Event::Relay(RelayChunk { output, .. }) | Event::Native(NativeEvent { output, .. }),
                    ) => Some(output),
                    _ => None,
                });
                *relayed.unwrap_or_else(|| panic!("output before any relayed event: {event:?}")) = true;
            }
            event => alone.push(event.clone()),
        }
    }
    alone
}

/// The answer a client gets from `events`. The members an answer of a chat has are always
/// written; `relayed`, `native`, `embeddings`, `error_status` and `retry_after_ms` only where
/// the events have them.
pub(super) fn answer(events: Vec<Result<Event, UpstreamError>>) -> Value {
    let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::<Value>::new());
    let (mut finish, mut usage, mut error) = (Value::Null, Value::Null, Value::Null);
    let (mut relayed, mut native, mut embeddings) = (Vec::new(), Vec::new(), Vec::new());
    let mut extra = serde_json::Map::new();
    for event in events {
        match event {
            Ok(Event::TextDelta(t)) => text += &t,
            Ok(Event::ReasoningDelta(t)) => reasoning += &t,
            Ok(Event::ToolCallDelta { index, id, name, arguments }) => {
                let at = match calls.iter().position(|c| c["index"] == index) {
                    Some(at) => at,
                    None => {
                        calls.push(json!({"index": index, "id": null, "name": null, "arguments": ""}));
                        calls.len() - 1
                    }
                };
                let call = &mut calls[at];
                if let Some(id) = id {
                    call["id"] = json!(minted(&id));
                }
                if let Some(name) = name {
                    call["name"] = json!(name);
                }
                call["arguments"] = json!(format!("{}{arguments}", call["arguments"].as_str().unwrap_or("")));
            }
            Ok(Event::Finish(reason)) => finish = json!(format!("{reason:?}")),
            Ok(Event::Usage(u)) => usage = serde_json::to_value(u).unwrap(),
            // A relayed chunk as the door would write it after its own head.
            Ok(Event::Relay(chunk)) => relayed.push(json!({
                "fields": String::from_utf8(chunk.fields.to_vec()).unwrap(),
                "usage": chunk.usage.map(|u| String::from_utf8(u.to_vec()).unwrap()),
                "no_choices": chunk.no_choices,
            })),
            Ok(Event::Native(event)) => native.push(json!(&*event.name)),
            Ok(Event::Embeddings(vectors)) => embeddings.extend(vectors.into_iter().map(|v| json!(v))),
            Err(e) => {
                error = json!(format!("{:?}: {}", e.class, e.message));
                if let Some(status) = e.status {
                    extra.insert("error_status".into(), json!(status));
                }
                if let Some(after) = e.retry_after {
                    extra.insert("retry_after_ms".into(), json!(after.as_millis() as u64));
                }
            }
        }
    }
    let mut got = json!({"text": text, "reasoning": reasoning, "tool_calls": calls, "finish": finish,
                         "usage": usage, "error": error});
    for (name, list) in [("relayed", relayed), ("native", native), ("embeddings", embeddings)] {
        if !list.is_empty() {
            extra.insert(name.into(), Value::Array(list));
        }
    }
    got.as_object_mut().unwrap().extend(extra);
    got
}

/// A call id the adapter minted for a wire that has none (Gemini's: `call_<12 hex>_<n>`), with
/// its random part written as `minted`; any other id as it is.
fn minted(id: &str) -> String {
    let parts: Vec<&str> = id.split('_').collect();
    match parts.as_slice() {
        ["call", hex, n] if hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit()) => {
            format!("call_minted_{n}")
        }
        _ => id.to_string(),
    }
}
