//! The shapes of a Response object as OpenAI writes them: its output items (`message` with one
//! `output_text` part, `function_call` or `custom_tool_call` under the client's own tool name
//! and namespace), its usage, and the request settings it repeats
//! (`instructions`, `tools`, `tool_choice`, `text`, …). Only shapes; the event sequence that
//! builds them is `events.rs`.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::decode::ResponsesRequest;
use super::toolset::{custom_input, Shape, Toolset};
use crate::canonical::Usage;

/// What every Response object of one answer repeats.
pub(crate) struct Head {
    pub id: String,
    pub created_at: u64,
    /// The task's name.
    pub model: String,
    /// The request's settings (`instructions`, `tools`, `tool_choice`, …).
    pub echo: Map<String, Value>,
    /// The request's tools: how a backend's call is written back.
    pub tools: Arc<Toolset>,
}

/// The output item being written.
pub(super) enum Open {
    Message { id: String, text: String },
    Call { index: u32, id: String, call_id: String, name: String, arguments: String },
}

impl Open {
    /// The item as the Response object lists it, with `status`; a call under the client's
    /// own name (and namespace) for `tools`.
    pub(super) fn item(&self, status: &str, tools: &Toolset) -> Value {
        match self {
            Open::Message { id, text } => json!({"id": id, "type": "message", "status": status,
                                                 "role": "assistant", "content": [output_text(text)]}),
            Open::Call { id, call_id, name, arguments, .. } => {
                let client = tools.client_tool(name);
                let mut item = match client.map(|t| t.shape) {
                    Some(Shape::Custom) => json!({"id": id, "type": "custom_tool_call", "status": status,
                        "call_id": call_id, "name": name, "input": custom_input(arguments)}),
                    _ => json!({"id": id, "type": "function_call", "status": status, "call_id": call_id,
                        "name": name, "arguments": arguments}),
                };
                if let Some(client) = client {
                    item["name"] = json!(client.name);
                    if let Some(namespace) = &client.namespace {
                        item["namespace"] = json!(namespace);
                    }
                }
                item
            }
        }
    }

    /// Whether this is a call of a `custom` tool (its input is written whole, at its end).
    pub(super) fn is_custom(&self, tools: &Toolset) -> bool {
        matches!(self, Open::Call { name, .. } if tools.client_tool(name).is_some_and(|t| t.shape == Shape::Custom))
    }
}

/// A message's one content part.
pub(super) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The Response object: `head`'s fields, `status`, the output so far, usage (`null` while in
/// progress or when the backend reported none) and the error of a failed answer.
pub fn response(
    head: &Head,
    status: &str,
    output: &[Value],
    usage: Option<&Usage>,
    error: Option<Value>,
) -> Value {
    let usage = usage.map(|u| {
        json!({
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.input_tokens + u.output_tokens,
        })
    });
    let mut response = head.echo.clone();
    let own = json!({
        "id": head.id, "object": "response", "created_at": head.created_at, "status": status,
        "error": error, "incomplete_details": null, "model": head.model, "output": output, "usage": usage,
    });
    if let Value::Object(own) = own {
        response.extend(own);
    }
    Value::Object(response)
}

/// The request's settings as the Response object repeats them.
pub fn echo(request: &ResponsesRequest) -> Map<String, Value> {
    let tools: Vec<Value> = request
        .tools()
        .map(|t| match t.get("type").is_some_and(|k| k.is_str("function")) {
            // A function tool with every member OpenAI lists (null where not given).
            true => json!({"type": "function", "name": t.get("name"),
                "description": t.get("description"), "parameters": t.get("parameters"), "strict": t.get("strict")}),
            false => serde_json::to_value(t).unwrap_or_default(),
        })
        .collect();
    let format = request.text.as_ref().and_then(|t| t.format.clone());
    let verbosity = request.text.as_ref().and_then(|t| t.verbosity.clone());
    let text = json!({"format": format.unwrap_or_else(|| json!({"type": "text"})), "verbosity": verbosity});
    let echo = json!({
        "instructions": request.instructions,
        "tools": tools,
        "tool_choice": request.tool_choice.clone().unwrap_or_else(|| json!("auto")),
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "parallel_tool_calls": request.parallel_tool_calls.unwrap_or(true),
        "text": text,
        "metadata": request.metadata.clone().unwrap_or_default(),
        "user": request.user,
        "store": false,
        "previous_response_id": null,
        "truncation": "disabled",
    });
    match echo {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
