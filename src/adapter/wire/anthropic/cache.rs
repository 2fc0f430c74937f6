//! Prompt-cache breakpoints for Anthropic, which caches a prompt's prefix only up to where a
//! content block carries `cache_control`. Without marks every spilled request is billed, and
//! rate-limited, as fresh input; with them a conversation's history is read back at a tenth
//! of the price. The marks go, in this order of priority and at most
//! [`MAX_BREAKPOINTS`] in all, on the last tool definition, the end of the system prompt and
//! the last block of each of the last N user turns.
//!
//! A request whose client placed any mark of its own is left exactly as written: the client
//! knows its prompt's stable parts better than we do, and adding ours could push it over the
//! limit. Pure: it edits the body about to be sent and does nothing else.

use serde_json::{json, Map, Value};

use crate::canonical::{CachePlacement, MAX_BREAKPOINTS};

/// What [`place`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// The client had marked the request itself: nothing added.
    ClientMarks,
    /// This many marks added (0 when there was nothing to mark).
    Added(u8),
}

/// Put breakpoints into a Messages request body as `placement` says, unless the body has a
/// `cache_control` of its own anywhere.
pub fn place(body: &mut Map<String, Value>, placement: &CachePlacement) -> Placed {
    if has_client_marks(body) {
        return Placed::ClientMarks;
    }
    let mut budget = MAX_BREAKPOINTS;
    if placement.tools {
        let last_tool = body.get_mut("tools").and_then(Value::as_array_mut).and_then(|t| t.last_mut());
        if let Some(Value::Object(tool)) = last_tool {
            tool.insert("cache_control".into(), ephemeral());
            budget -= 1;
        }
    }
    if placement.system && body.get_mut("system").is_some_and(mark_content) {
        budget -= 1;
    }
    let turns = placement.last_turns.min(budget);
    let mut marked = 0;
    if let Some(Value::Array(messages)) = body.get_mut("messages") {
        for message in messages.iter_mut().rev() {
            if marked == turns {
                break;
            }
            let user = message.get("role").and_then(Value::as_str) == Some("user");
            if user && message.get_mut("content").is_some_and(mark_content) {
                marked += 1;
            }
        }
    }
    Placed::Added(MAX_BREAKPOINTS - budget + marked)
}

/// `{"type": "ephemeral"}`: Anthropic's default five-minute cache.
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Mark the last block of a system prompt or a message's content; a non-empty string
/// becomes one text block first. False when there is nothing to mark.
fn mark_content(content: &mut Value) -> bool {
    match content {
        Value::String(text) if !text.is_empty() => {
            let text = std::mem::take(text);
            *content = json!([{"type": "text", "text": text, "cache_control": ephemeral()}]);
            true
        }
        Value::Array(blocks) => match blocks.last_mut() {
            Some(Value::Object(block)) => {
                block.insert("cache_control".into(), ephemeral());
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// Whether the client put `cache_control` on a tool, a system block or a message's block.
fn has_client_marks(body: &Map<String, Value>) -> bool {
    let marked = |blocks: Option<&Value>| {
        blocks.and_then(Value::as_array).is_some_and(|b| b.iter().any(|b| b.get("cache_control").is_some()))
    };
    let messages = body.get("messages").and_then(Value::as_array);
    marked(body.get("tools"))
        || marked(body.get("system"))
        || messages.is_some_and(|m| m.iter().any(|m| marked(m.get("content"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        let Value::Object(body) = value else { panic!("an object") };
        body
    }

    /// Where the marks are, as JSON pointers, in document order.
    fn marks(body: &Map<String, Value>) -> Vec<String> {
        fn walk(value: &Value, at: String, out: &mut Vec<String>) {
            match value {
                Value::Object(o) => {
                    if o.get("cache_control") == Some(&ephemeral()) {
                        out.push(at.clone());
                    }
                    o.iter().for_each(|(k, v)| walk(v, format!("{at}/{k}"), out));
                }
                Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| walk(v, format!("{at}/{i}"), out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        for key in ["tools", "system", "messages"] {
            if let Some(v) = body.get(key) {
                walk(v, format!("/{key}"), &mut out);
            }
        }
        out
    }

    /// A conversation of three user turns with a tool loop in the middle.
    fn conversation() -> Map<String, Value> {
        body(json!({
            "model": "claude", "max_tokens": 10,
            "system": "You are a coding agent.",
            "tools": [{"name": "read", "input_schema": {"type": "object"}},
                      {"name": "write", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "fix the bug"},
                {"role": "assistant", "content": [{"type": "text", "text": "reading"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "code"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "found it"}]},
                {"role": "user", "content": [{"type": "text", "text": "now test it"},
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]},
            ],
        }))
    }

    const ALL: CachePlacement = CachePlacement { system: true, tools: true, last_turns: 2 };

    #[test]
    fn the_default_marks_the_last_tool_the_system_prompt_and_the_last_two_user_turns() {
        let mut b = conversation();
        assert_eq!(place(&mut b, &ALL), Placed::Added(4));
        assert_eq!(marks(&b), ["/tools/1", "/system/0", "/messages/2/content/0", "/messages/4/content/1"]);
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "You are a coding agent.",
                                        "cache_control": {"type": "ephemeral"}}])
        );
        assert!(b["tools"][0].get("cache_control").is_none());
        assert_eq!(b["messages"][0]["content"], "fix the bug", "an older turn is left alone");
    }

    #[test]
    fn never_more_than_four_marks_and_the_oldest_turns_give_way() {
        let mut b = conversation();
        let many = CachePlacement { last_turns: 4, ..ALL };
        assert_eq!(place(&mut b, &many), Placed::Added(4));
        assert_eq!(marks(&b).len(), 4);
        assert!(!marks(&b).contains(&"/messages/0/content/0".to_string()));

        // Without tools and system, up to four turns; there are only three.
        let mut b = conversation();
        let turns_only = CachePlacement { system: false, tools: false, last_turns: 4 };
        assert_eq!(place(&mut b, &turns_only), Placed::Added(3));
        assert_eq!(marks(&b), ["/messages/0/content/0", "/messages/2/content/0", "/messages/4/content/1"]);
        assert_eq!(b["messages"][0]["content"][0]["text"], "fix the bug", "a string became a text block");
    }

    #[test]
    fn each_part_can_be_left_unmarked() {
        let mut b = conversation();
        let last_turn = CachePlacement { system: false, tools: false, last_turns: 1 };
        assert_eq!(place(&mut b, &last_turn), Placed::Added(1));
        assert_eq!(marks(&b), ["/messages/4/content/1"]);

        let mut b = conversation();
        let off = CachePlacement { system: false, tools: false, last_turns: 0 };
        assert!(off.is_off());
        assert_eq!(place(&mut b, &off), Placed::Added(0));
        assert_eq!(b, conversation());
    }

    #[test]
    fn a_client_mark_anywhere_leaves_the_body_as_written() {
        for at in ["/tools/0", "/system/0", "/messages/1/content/1"] {
            let mut b = conversation();
            b["system"] = json!([{"type": "text", "text": "You are a coding agent."}]);
            let mut value = Value::Object(b);
            value.pointer_mut(at).unwrap()["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
            let Value::Object(written) = value else { unreachable!() };
            let mut b = written.clone();
            assert_eq!(place(&mut b, &ALL), Placed::ClientMarks, "{at}");
            assert_eq!(b, written, "{at}");
        }
    }

    #[test]
    fn nothing_to_mark_is_not_a_mark() {
        let mut b = body(json!({"system": "", "tools": [], "messages": [
            {"role": "user", "content": ""}, {"role": "assistant", "content": "hello"}]}));
        assert_eq!(place(&mut b, &ALL), Placed::Added(0));
        assert!(marks(&b).is_empty());
        assert_eq!(b["system"], "");

        let mut b = body(json!({"messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(place(&mut b, &ALL), Placed::Added(1));
        assert_eq!(marks(&b), ["/messages/0/content/0"]);
    }
}
