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
//!
//! Thinking signed through Spillway goes back to its signer unmarked and is dropped for another
//! ([`super::provenance`]), and with it the client's `thinking` for that attempt. The body is
//! the typed [`ClaudeBody`]: each message and tool is borrowed as written and only a message
//! that lost a block, had a signature unmarked or became a user turn is written anew; every
//! member the body does not write itself passes through untouched.

use std::borrow::Cow;

use super::body::{
    BlockOut, ClaudeBody, Content, Members, MessageOut, Purpose, Rest, ToolOut, Turn, Written, ANSWER_FIELDS,
};
use super::host::HostFields;
use super::provenance::{self, Fit};
use crate::adapter::{system_turn, Call};
use crate::canonical::shallow::Part;
use crate::canonical::{anthropics_own, prepended, ChatRequest, NativeRequest, Prepended};

/// Body fields of Anthropic beta features, dropped for a node.
pub const BETA_FIELDS: [&str; 4] = ["betas", "container", "context_management", "mcp_servers"];

/// The body for a host whose thinking `signer` signs (`None`: a node): the client's, with the
/// host's `fields` (the call's model and stream flag, where the host takes them there), the
/// task's variant before its system prompt and the task's `max_tokens`.
pub(crate) fn body<'a>(
    req: &ChatRequest,
    call: &'a Call,
    client: &'a NativeRequest,
    signer: Option<&str>,
    host: HostFields<'a>,
    purpose: Purpose,
) -> ClaudeBody<'a> {
    let written = client.body.root();
    let mut owned: Vec<&'static str> = vec!["model", "stream", "system", "messages", "tools"];
    owned.extend(host.written());
    let max_tokens = req.max_tokens.filter(|_| purpose == Purpose::Answer);
    owned.extend(max_tokens.map(|_| "max_tokens"));
    if purpose == Purpose::Count {
        owned.extend(ANSWER_FIELDS);
    }
    let variant = call.variant.as_ref().map(|v| v.content.as_str());
    let system = system(written.get("system"), variant);
    let (mut messages, mut tools) = (None, None);
    if let Some(written) = written.get("messages").and_then(|m| m.items()) {
        let mut foreign = false;
        messages = Some(written.map(|m| message(m, signer, &mut foreign)).collect());
        if foreign && client.body.get("thinking").is_some() {
            tracing::debug!(
                signer,
                "thinking another provider signed dropped, and thinking off for this attempt"
            );
            owned.push("thinking");
        }
    }
    if let Some(written) = written.get("tools").and_then(|t| t.items()) {
        // Server tools run inside Anthropic: a node gets the client's own tools only.
        let own = |t: &Part| t.get("type").and_then(|k| k.str()).is_none_or(|kind| kind == "custom");
        let kept = written.filter(|t| signer.is_some() || own(t));
        tools = Some(kept.map(|t| ToolOut::Written(Written::of(t))).collect());
    }
    if signer.is_none() {
        owned.extend(BETA_FIELDS);
    }
    // What is not of a shape the body writes passes on as written.
    owned.retain(|name| match *name {
        "system" => system.is_some(),
        "messages" => messages.is_some(),
        "tools" => tools.is_some(),
        _ => true,
    });
    ClaudeBody {
        host,
        system,
        messages,
        tools,
        rest: Rest::Written(Members { max_tokens, members: written, owned }),
    }
}

/// The system prompt, with the task's `variant` before the client's (a text block before its
/// blocks); `None`: the client's member passes on as written.
fn system<'a>(written: Option<Part<'a>>, variant: Option<&'a str>) -> Option<Content<'a>> {
    let Some(variant) = variant else { return written.filter(|w| !w.is_null()).and_then(Content::written) };
    match prepended(written, variant) {
        Prepended::Text(text) => Some(Content::Text(text)),
        Prepended::Blocks(text, blocks) => {
            let blocks = blocks.items().into_iter().flatten().map(BlockOut::written);
            Some(Content::Blocks(
                std::iter::once(BlockOut::text(Cow::Borrowed(text))).chain(blocks).collect(),
            ))
        }
        Prepended::AsWritten(_) => None,
    }
}

/// One message of the client's conversation as a host whose thinking `signer` signs takes it
/// (`foreign`: a block another signed was dropped).
fn message<'a>(message: Part<'a>, signer: Option<&str>, foreign: &mut bool) -> MessageOut<'a> {
    if signer.is_none() && message.get("role").is_some_and(|r| r.is_str("system")) {
        return system_as_user_turn(message);
    }
    let Some(blocks) = message.get("content").and_then(|c| c.items()) else {
        return MessageOut::Written(message);
    };
    let (mut kept, mut edited) = (Vec::with_capacity(blocks.len()), false);
    let blocks: Vec<Part<'a>> = blocks.collect();
    match signer {
        Some(signer) => {
            // Unsigned thinking goes, unless it is all there is (the API refuses an empty turn).
            let unsigned_go = blocks.iter().any(|&b| !unsigned_thinking(b));
            for &block in &blocks {
                match provenance::fit(signer, block) {
                    _ if unsigned_go && unsigned_thinking(block) => edited = true,
                    Fit::Keep => kept.push(BlockOut::written(block)),
                    Fit::Unmark(field, secret) => {
                        kept.push(BlockOut::Written(Written {
                            unmarked: Some((field, secret)),
                            ..Written::of(block)
                        }));
                        edited = true;
                    }
                    Fit::Drop => (edited, *foreign) = (true, true),
                }
            }
        }
        None if blocks.iter().any(|&b| !anthropics_own(b)) => {
            kept.extend(blocks.iter().filter(|&&b| !anthropics_own(b)).map(|&b| BlockOut::written(b)));
            edited = kept.len() < blocks.len();
        }
        None => return MessageOut::Written(message),
    }
    match edited {
        true => MessageOut::Turn(Turn::edited(message, Content::Blocks(kept))),
        false => MessageOut::Written(message),
    }
}

/// A system message inside the conversation, as the user turn [`system_turn`] makes of it.
fn system_as_user_turn(message: Part<'_>) -> MessageOut<'_> {
    let content = message.get("content");
    let text = match (content.and_then(|c| c.str()), content.and_then(|c| c.items())) {
        (Some(text), _) => text.into_owned(),
        (None, Some(blocks)) => {
            let texts: Vec<_> = blocks.filter_map(|b| b.get("text")?.str()).collect();
            texts.join("\n\n")
        }
        _ => String::new(),
    };
    let content = Content::Blocks(vec![BlockOut::text(Cow::Owned(system_turn(&text)))]);
    MessageOut::Turn(Turn { role: Some("user"), content, rest: None })
}

fn unsigned_thinking(block: Part<'_>) -> bool {
    block.get("type").is_some_and(|t| t.is_str("thinking"))
        && block.get("signature").and_then(|s| s.str()).is_none_or(|s| s.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use std::sync::Arc;

    use super::*;
    use crate::adapter::WireFormat;
    use crate::canonical::Dialect;

    /// The body sent for `client` on `call` to a host whose thinking `signer` signs.
    fn body(req: &ChatRequest, call: &Call, client: &NativeRequest, signer: Option<&str>) -> Value {
        crate::adapter::wire::anthropic::tests::written(req, call, client, signer)
    }

    fn client(body: Value) -> NativeRequest {
        NativeRequest::of_tree(Dialect::AnthropicMessages, &body)
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
    fn what_is_not_edited_goes_on_as_the_bytes_the_client_wrote() {
        use crate::canonical::shallow::Shallow;
        // Spaces, escapes and number forms a tree would not keep.
        let messages = r#"[ {"role":"user", "content":[{"type":"text","text":"caf\u00e9 \/ 1.0e2"}]},
            {"role" : "assistant","content":[{"type":"thinking","thinking":"t","signature":"spillway:anthropic:S"},
              {"type":"text","text":"ok"}]} ]"#;
        let tools = r#"[ {"name":"t","input_schema":{"type" :"object"}} ]"#;
        let metadata = r#"{"user_id" : "u"}"#;
        let text = format!(
            r#"{{"model":"m", "max_tokens": 10, "messages": {messages}, "tools":{tools}, "metadata": {metadata}, "temperature": 1.0 }}"#
        );
        let body = Shallow::read(text.into(), Dialect::AnthropicMessages.depth()).unwrap();
        let native = NativeRequest { body: Arc::new(body), ..client(json!({})) };
        let req = ChatRequest { model: "m2".into(), ..Default::default() };
        let call = Call::as_written(WireFormat::Claude(&super::super::host::Node), Default::default(), &req);
        let sent = |signer| {
            let fields = HostFields::default();
            String::from_utf8(
                serde_json::to_vec(&super::body(&req, &call, &native, signer, fields, Purpose::Answer))
                    .unwrap(),
            )
            .unwrap()
        };
        // Each message and tool the host takes as it is, and every member the body does not own,
        // is the client's text.
        let first = r#"{"role":"user", "content":[{"type":"text","text":"caf\u00e9 \/ 1.0e2"}]}"#;
        let tool = r#"{"name":"t","input_schema":{"type" :"object"}}"#;
        for signer in ["bedrock", "anthropic"] {
            let sent = sent(Some(signer));
            for written in [first, tool, metadata, r#""temperature": 1.0"#.replace(' ', "").as_str()] {
                assert!(sent.contains(written), "{written} in {sent}");
            }
        }
        // A message with a block dropped is written anew around its other blocks, as written.
        let to_other = sent(Some("bedrock"));
        assert!(to_other.contains(r#"[{"type":"text","text":"ok"}]"#), "{to_other}");
        assert!(!to_other.contains("signature"), "{to_other}");
        // To its own signer, the signature goes unmarked.
        let to_signer = sent(Some("anthropic"));
        assert!(to_signer.contains(r#""signature":"S""#), "{to_signer}");
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
        assert_eq!(to_anthropic["messages"], native.body.tree()["messages"], "Anthropic takes it as written");
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
        let own = |block: Value| {
            let body = client(json!({"messages": [{"role": "assistant", "content": [block]}]}));
            let messages = body.body.get("messages").unwrap().items().unwrap().next().unwrap();
            let own = anthropics_own(messages.get("content").unwrap().items().unwrap().next().unwrap());
            own
        };
        assert!(own(json!({"type": "redacted_thinking", "data": "x"})));
        assert!(!own(json!({"type": "thinking", "thinking": "t", "signature": ""})));
    }
}
