//! Where a thinking signature was made. Claude signs its thinking (and encrypts redacted
//! thinking) with a key of the provider that ran it, and checks the signatures of every
//! thinking block in a conversation's history: a block another provider signed is refused
//! with a 400, which is the request's fault and fails it. So the signatures a client gets
//! through Spillway are marked with their signer (`spillway:bedrock:…`), and a conversation
//! sent on to a Claude provider carries its own provider's blocks unmarked, as they were made,
//! and none of another's: those are dropped, and with them `thinking` for that attempt (a
//! turn that used tools would otherwise need the thinking that came before it). Signatures
//! without a mark (from a client that called a provider directly) pass as they are.

use std::borrow::Cow;

use serde_json::Value;

use crate::canonical::shallow::Part;

/// The start of a marked signature: `spillway:{signer}:{signature}`.
pub const MARK: &str = "spillway:";

/// `signature` as the client gets it.
pub fn mark(signer: &str, signature: &str) -> String {
    format!("{MARK}{signer}:{signature}")
}

/// Whether `value` (a relayed event's payload or a whole message) carries a signature to mark:
/// a `signature_delta`, a redacted block's start, or a message with thinking. Read by its shape,
/// so that the other events pass untouched.
pub fn signed(value: &Value) -> bool {
    let at = |pointer| value.pointer(pointer).and_then(Value::as_str);
    at("/delta/type") == Some("signature_delta")
        || at("/content_block/type") == Some("redacted_thinking")
        || value.get("content").and_then(Value::as_array).is_some_and(|blocks| {
            blocks.iter().any(|b| {
                matches!(b.get("type").and_then(Value::as_str), Some("thinking" | "redacted_thinking"))
            })
        })
}

/// Mark every signature in `value` (a relayed event's payload or a whole message): a
/// `signature_delta`'s `signature`, a thinking block's `signature`, a redacted thinking block's
/// `data`. Whether anything was marked.
pub fn mark_all(signer: &str, value: &mut Value) -> bool {
    match value {
        Value::Array(items) => items.iter_mut().fold(false, |any, v| mark_all(signer, v) | any),
        Value::Object(map) => {
            let field = match map.get("type").and_then(Value::as_str) {
                Some("thinking" | "signature_delta") => Some("signature"),
                Some("redacted_thinking") => Some("data"),
                _ => None,
            };
            let mut marked = false;
            if let Some(Value::String(secret)) = field.and_then(|f| map.get_mut(f)) {
                if !secret.is_empty() && !secret.starts_with(MARK) {
                    *secret = mark(signer, secret);
                    marked = true;
                }
            }
            map.values_mut().fold(marked, |any, v| mark_all(signer, v) | any)
        }
        _ => false,
    }
}

/// What a conversation sent on to `signer` does with one of its blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit<'a> {
    /// Keep it as written: no signature of Spillway's mark.
    Keep,
    /// Keep it with this field (`signature` or `data`) written unmarked, as its signer made it.
    Unmark(&'static str, Cow<'a, str>),
    /// Drop it: another provider signed it.
    Drop,
}

/// What a conversation sent on to `signer` does with `block`: its own blocks unmarked, another's
/// dropped.
pub fn fit<'a>(signer: &str, block: Part<'a>) -> Fit<'a> {
    let Some((field, marked)) = marked(block) else { return Fit::Keep };
    let Some((made_by, secret)) = marked.strip_prefix(MARK).and_then(|m| m.split_once(':')) else {
        return Fit::Keep;
    };
    if made_by != signer {
        return Fit::Drop;
    }
    let secret = match marked {
        Cow::Borrowed(marked) => Cow::Borrowed(&marked[marked.len() - secret.len()..]),
        Cow::Owned(_) => Cow::Owned(secret.to_string()),
    };
    Fit::Unmark(field, secret)
}

/// The signature field of a thinking or redacted thinking block, and its text.
fn marked(block: Part<'_>) -> Option<(&'static str, Cow<'_, str>)> {
    let field = match block.get("type")?.str()?.as_ref() {
        "thinking" => "signature",
        "redacted_thinking" => "data",
        _ => return None,
    };
    Some((field, block.get(field)?.str()?))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn signatures_leave_marked_and_come_back_only_to_their_signer() {
        let mut delta = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQB"}});
        assert!(signed(&delta));
        assert!(!signed(
            &json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}})
        ));
        assert!(mark_all("bedrock", &mut delta));
        assert_eq!(delta["delta"]["signature"], "spillway:bedrock:EqQB");
        assert!(!mark_all("bedrock", &mut delta), "marked once");
        let mut message = json!({"content": [
            {"type": "thinking", "thinking": "t", "signature": "S1"},
            {"type": "redacted_thinking", "data": "R1"},
            {"type": "text", "text": "hi"}]});
        assert!(mark_all("anthropic", &mut message));
        assert_eq!(message["content"][0]["signature"], "spillway:anthropic:S1");
        assert_eq!(message["content"][1]["data"], "spillway:anthropic:R1");

        // The history as the as-written body sends it on to `signer`, and whether a block
        // another signed was dropped (the client's `thinking` then goes too).
        let fit_history = |signer: &str, history: &Value| {
            let sent = crate::adapter::wire::anthropic::tests::as_written(
                signer,
                json!({"max_tokens": 10, "thinking": {"type": "enabled"}, "messages": history}),
            );
            (sent["messages"].clone(), sent.get("thinking").is_none())
        };
        let history = json!([
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "a", "signature": "spillway:anthropic:S1"},
                {"type": "thinking", "thinking": "b", "signature": "spillway:bedrock:S2"},
                {"type": "thinking", "thinking": "c", "signature": "direct"},
                {"type": "redacted_thinking", "data": "spillway:bedrock:R2"},
                {"type": "text", "text": "hi"}]}]);
        let (to_bedrock, dropped) = fit_history("bedrock", &history);
        assert!(dropped);
        assert_eq!(
            to_bedrock[0]["content"],
            json!([
                {"type": "thinking", "thinking": "b", "signature": "S2"},
                {"type": "thinking", "thinking": "c", "signature": "direct"},
                {"type": "redacted_thinking", "data": "R2"},
                {"type": "text", "text": "hi"}])
        );
        let (to_vertex, dropped) = fit_history("vertex", &history);
        assert!(dropped);
        assert_eq!(to_vertex[0]["content"].as_array().unwrap().len(), 2, "only the unmarked and the text");
        let clean = json!([{"role": "user", "content": "hi"}]);
        assert!(!fit_history("vertex", &clean).1);
    }
}
