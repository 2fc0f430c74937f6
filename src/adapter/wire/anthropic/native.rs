//! A Messages request sent on as the client wrote it. Only `model`, `max_tokens` and `stream`
//! are rewritten (the backend's model, the task's output cap, whether dispatch streams), so
//! `cache_control` marks, thinking blocks, `metadata`, `top_k` and fields Spillway has never
//! heard of reach the backend unchanged. What each kind of backend cannot take is removed:
//!
//! - Anthropic checks the signature of every thinking block in the history. A block another
//!   model wrote (a local node's reasoning, before a spill) has none and would make Anthropic
//!   refuse the whole request, so unsigned thinking blocks are dropped for Anthropic.
//! - A node serving the Messages API natively (vLLM, SGLang, llama.cpp) implements the
//!   generally available API only: the beta body fields in [`BETA_FIELDS`] are dropped for it,
//!   it gets no `anthropic-beta` header, and a system message inside the conversation (a beta)
//!   reaches it as a user turn at the same place ([`system_turn`]). Thinking that Anthropic
//!   wrote (signed or redacted blocks, from turns before the session came home) is Anthropic's
//!   to read: it is dropped for a node ([`anthropics_own`]), which the door says in
//!   `x-spillway-dropped-content`. So are server tools (`web_search_…`, named in
//!   `x-spillway-dropped-tools`).

use serde_json::{json, Value};

use crate::adapter::{system_turn, Call};
use crate::canonical::{anthropics_own, ChatRequest, NativeRequest};

/// The Anthropic betas the clouds take (Bedrock's documented `anthropic_beta` values, which
/// Vertex AI takes as well). Bedrock refuses a whole request for one flag it does not know, so
/// any other flag a client sends is dropped for a cloud: Claude Code sends several, such as
/// `claude-code-20250219`, `oauth-2025-04-20`, `fine-grained-tool-streaming-2025-05-14`,
/// `files-api-2025-04-14` and `prompt-caching-scope-2026-01-05`.
pub const CLOUD_BETAS: &[&str] = &[
    "computer-use-2024-10-22",
    "computer-use-2025-01-24",
    "computer-use-2025-11-24",
    "token-efficient-tools-2025-02-19",
    "interleaved-thinking-2025-05-14",
    "output-128k-2025-02-19",
    "dev-full-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "tool-search-tool-2025-10-19",
    "tool-examples-2025-10-29",
];

/// The flags among `flags` a cloud takes ([`CLOUD_BETAS`]).
pub fn cloud_betas(flags: Vec<&str>) -> Vec<&str> {
    flags.into_iter().filter(|flag| CLOUD_BETAS.contains(flag)).collect()
}

/// Body fields of Anthropic beta features, dropped for a node.
pub const BETA_FIELDS: [&str; 4] = ["betas", "container", "context_management", "mcp_servers"];

/// The body for a host whose thinking `signer` signs (`None`: a node): the client's, with the
/// call's `model`, `stream` and variant, and the task's `max_tokens`.
pub fn body(req: &ChatRequest, call: &Call, client: &NativeRequest, signer: Option<&str>) -> Value {
    let mut body = call.native_body(client);
    if let Some(max_tokens) = req.max_tokens {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    match signer {
        Some(signer) => {
            let mut foreign = false;
            if let Some(Value::Array(messages)) = body.get_mut("messages") {
                messages.iter_mut().for_each(|m| drop_blocks(m, unsigned_thinking));
                foreign = super::provenance::fit_history(signer, messages);
            }
            if foreign && body.remove("thinking").is_some() {
                tracing::debug!(
                    signer,
                    "thinking another provider signed dropped, and thinking off for this attempt"
                );
            }
        }
        None => {
            for field in BETA_FIELDS {
                body.remove(field);
            }
            if let Some(Value::Array(messages)) = body.get_mut("messages") {
                messages.iter_mut().for_each(system_as_user_turn);
                messages.iter_mut().for_each(|m| drop_blocks(m, anthropics_own));
            }
            // Server tools run inside Anthropic: a node gets the client's own tools only.
            if let Some(Value::Array(tools)) = body.get_mut("tools") {
                tools.retain(|t| t.get("type").and_then(Value::as_str).is_none_or(|kind| kind == "custom"));
            }
        }
    }
    Value::Object(body)
}

/// A system message inside the conversation, as the user turn [`system_turn`] makes of it.
fn system_as_user_turn(message: &mut Value) {
    if message.get("role").and_then(Value::as_str) != Some("system") {
        return;
    }
    let text = match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => {
            let texts: Vec<&str> =
                blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect();
            texts.join("\n\n")
        }
        _ => String::new(),
    };
    *message = json!({"role": "user", "content": [{"type": "text", "text": system_turn(&text)}]});
}

/// Remove a message's blocks that `dropped` picks (unless that would leave it empty, which the
/// API refuses for another reason).
fn drop_blocks(message: &mut Value, dropped: fn(&Value) -> bool) {
    let Some(Value::Array(blocks)) = message.get_mut("content") else { return };
    if blocks.iter().any(|b| !dropped(b)) {
        blocks.retain(|b| !dropped(b));
    }
}

fn unsigned_thinking(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("thinking")
        && block.get("signature").and_then(Value::as_str).is_none_or(str::is_empty)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::adapter::WireFormat;
    use crate::canonical::Dialect;

    fn client(body: Value) -> NativeRequest {
        let Value::Object(body) = body else { panic!("an object") };
        NativeRequest { dialect: Dialect::AnthropicMessages, body: Arc::new(body), headers: Vec::new() }
    }

    #[test]
    fn only_model_max_tokens_and_stream_are_rewritten() {
        let native = client(json!({
            "model": "claude-sonnet-4-6", "max_tokens": 9000, "stream": false, "top_k": 5,
            "metadata": {"user_id": "u1"}, "context_management": {"edits": []},
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}],
        }));
        let req =
            ChatRequest { model: "qwen".into(), max_tokens: Some(512), stream: true, ..Default::default() };
        let to_anthropic = body(
            &req,
            &Call::as_written(WireFormat::Claude(&super::super::host::Node), Default::default(), &req),
            &native,
            Some("anthropic"),
        );
        assert_eq!(to_anthropic["model"], "qwen");
        assert_eq!(to_anthropic["max_tokens"], 512);
        assert_eq!(to_anthropic["stream"], true);
        assert_eq!(to_anthropic["top_k"], 5);
        assert_eq!(to_anthropic["metadata"]["user_id"], "u1");
        assert_eq!(to_anthropic["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(to_anthropic["context_management"], json!({"edits": []}));
        let to_node = body(
            &req,
            &Call::as_written(WireFormat::Claude(&super::super::host::Node), Default::default(), &req),
            &native,
            None,
        );
        assert!(to_node.get("context_management").is_none());
        assert_eq!(to_node["system"], to_anthropic["system"]);
    }

    #[test]
    fn a_system_message_inside_the_conversation_reaches_a_node_as_a_user_turn() {
        let native = client(json!({"max_tokens": 10, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "Tools changed."}]},
            {"role": "system", "content": "Be brief."},
        ]}));
        let req = ChatRequest::default();
        let call = Call::as_written(WireFormat::Claude(&super::super::host::Node), Default::default(), &req);
        let to_anthropic = body(&req, &call, &native, Some("anthropic"));
        assert_eq!(to_anthropic["messages"], native.body["messages"], "Anthropic takes it as written");
        let to_node = body(&req, &call, &native, None);
        assert_eq!(
            to_node["messages"],
            json!([
                {"role": "user", "content": "hi"},
                {"role": "user", "content": [{"type": "text", "text": "<system>\nTools changed.\n</system>"}]},
                {"role": "user", "content": [{"type": "text", "text": "<system>\nBe brief.\n</system>"}]},
            ])
        );
    }

    #[test]
    fn each_side_gets_only_the_thinking_it_can_read() {
        let native = client(json!({"max_tokens": 10, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "local reasoning"},
                {"type": "thinking", "thinking": "signed", "signature": "sig"},
                {"type": "text", "text": "hello"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "alone"}]},
        ]}));
        let req = ChatRequest::default();
        let to_anthropic = body(
            &req,
            &Call::as_written(WireFormat::Claude(&super::super::host::Node), Default::default(), &req),
            &native,
            Some("anthropic"),
        );
        let kept: Vec<&str> = to_anthropic["messages"][1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.get("thinking").or(b.get("text")).and_then(Value::as_str).unwrap())
            .collect();
        assert_eq!(kept, ["signed", "hello"]);
        assert_eq!(to_anthropic["messages"][2]["content"][0]["thinking"], "alone");
        let to_node = body(
            &req,
            &Call::as_written(WireFormat::Claude(&super::super::host::Node), Default::default(), &req),
            &native,
            None,
        );
        // A node gets its own kind's (unsigned) reasoning, never Anthropic's signed thinking.
        let kept: Vec<&str> = to_node["messages"][1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.get("thinking").or(b.get("text")).and_then(Value::as_str).unwrap())
            .collect();
        assert_eq!(kept, ["local reasoning", "hello"]);
        assert!(anthropics_own(&json!({"type": "redacted_thinking", "data": "x"})));
        assert!(!anthropics_own(&json!({"type": "thinking", "thinking": "t", "signature": ""})));
    }
}
