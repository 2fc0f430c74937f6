//! Prompt-cache breakpoints for Anthropic, which caches a prompt's prefix only up to where a
//! content block carries `cache_control`. Without marks every spilled request is billed, and
//! rate-limited, as fresh input; with them a conversation's history is read back at a tenth
//! of the price. Where the marks go is [`breakpoints::plan`]'s to say (the one plan Converse's
//! cache points follow too): the last tool definition, the end of the system prompt and the
//! last block of each of the last N user turns, at most four in all. This module reads what
//! the typed body has room to mark and puts `cache_control` there.
//!
//! A request whose client placed any mark of its own is left exactly as written: the client
//! knows its prompt's stable parts better than we do, and adding ours could push it over the
//! limit. Pure: it edits the typed body about to be sent and does nothing else.

use super::body::{Block, BlockOut, ClaudeBody, Content, MessageOut, ToolOut, Turn, EPHEMERAL};
use crate::adapter::wire::breakpoints;
use crate::canonical::shallow::Part;
use crate::canonical::CachePlacement;

/// What [`place`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// The client had marked the request itself: nothing added.
    ClientMarks,
    /// This many marks added (0 when there was nothing to mark).
    Added(u8),
}

/// Put breakpoints into a Messages request body where [`breakpoints::plan`] says for
/// `placement`, unless the body has a `cache_control` of the client's anywhere.
pub(crate) fn place(body: &mut ClaudeBody, placement: &CachePlacement) -> Placed {
    if has_client_marks(body) {
        return Placed::ClientMarks;
    }
    let messages = body.messages.as_deref().unwrap_or_default();
    let users = messages.iter().enumerate().rev().filter(|(_, m)| m.is_user() && markable_message(m));
    let plan = breakpoints::plan(
        placement,
        body.tools.as_ref().and_then(|t| t.last()).is_some_and(markable_tool),
        body.system.as_ref().is_some_and(markable),
        users.map(|(at, _)| at),
    );
    if let (true, Some(tool)) = (plan.tools, body.tools.as_mut().and_then(|t| t.last_mut())) {
        mark_tool(tool);
    }
    if let (true, Some(system)) = (plan.system, &mut body.system) {
        mark(system);
    }
    if let Some(messages) = &mut body.messages {
        plan.turns.iter().for_each(|&at| mark_message(&mut messages[at]));
    }
    Placed::Added(plan.count())
}

/// Whether the last block of a system prompt or a message's content can take a mark: a
/// non-empty text (which becomes one text block), or blocks whose last is an object.
fn markable(content: &Content) -> bool {
    match content {
        Content::Text(text) => !text.is_empty(),
        Content::WrittenText(text) => text.str().is_some_and(|t| !t.is_empty()),
        Content::Blocks(blocks) => blocks.last().is_some_and(|b| match b {
            BlockOut::Typed(_) => true,
            BlockOut::Written(w) => w.value.is_object(),
        }),
    }
}

/// Mark the last block of `content` (which [`markable`] allows).
fn mark(content: &mut Content) {
    match content {
        Content::Text(_) | Content::WrittenText(_) => {
            let text = match content {
                Content::Text(text) => std::mem::take(text),
                Content::WrittenText(text) => text.str().unwrap_or_default(),
                Content::Blocks(_) => unreachable!("matched above"),
            };
            *content =
                Content::Blocks(vec![BlockOut::Typed(Block::Text { text, cache_control: Some(EPHEMERAL) })]);
        }
        Content::Blocks(blocks) => match blocks.last_mut() {
            Some(BlockOut::Written(w)) => w.mark = true,
            Some(BlockOut::Typed(
                Block::Text { cache_control, .. }
                | Block::Image { cache_control, .. }
                | Block::ToolUse { cache_control, .. }
                | Block::ToolResult { cache_control, .. },
            )) => *cache_control = Some(EPHEMERAL),
            None => {}
        },
    }
}

fn markable_tool(tool: &ToolOut) -> bool {
    match tool {
        ToolOut::Typed(_) => true,
        ToolOut::Written(w) => w.value.is_object(),
    }
}

fn mark_tool(tool: &mut ToolOut) {
    match tool {
        ToolOut::Typed(spec) => spec.cache_control = Some(EPHEMERAL),
        ToolOut::Written(w) => w.mark = true,
    }
}

/// The content of a client's message as written, if it is of a shape that takes a mark.
fn written_content(message: Part<'_>) -> Option<Content<'_>> {
    message.get("content").and_then(Content::written)
}

fn markable_message(message: &MessageOut) -> bool {
    match message {
        MessageOut::Written(m) => written_content(*m).is_some_and(|c| markable(&c)),
        MessageOut::Turn(turn) => markable(&turn.content),
    }
}

/// Mark a message's last block; a client's message as written becomes one whose content is
/// written here.
fn mark_message(message: &mut MessageOut) {
    if let MessageOut::Written(m) = *message {
        let Some(content) = written_content(m).filter(|_| m.is_object()) else { return };
        *message = MessageOut::Turn(Turn::edited(m, content));
    }
    if let MessageOut::Turn(turn) = message {
        mark(&mut turn.content);
    }
}

/// Whether the client put `cache_control` on a tool, a system block or a message's block.
fn has_client_marks(body: &ClaudeBody) -> bool {
    let block = |b: &BlockOut| matches!(b, BlockOut::Written(w) if w.marked_by_client());
    let content = |c: &Content| matches!(c, Content::Blocks(blocks) if blocks.iter().any(block));
    let tool = |t: &ToolOut| matches!(t, ToolOut::Written(w) if w.marked_by_client());
    let message = |m: &MessageOut| match m {
        MessageOut::Written(m) => written_content(*m).is_some_and(|c| content(&c)),
        MessageOut::Turn(turn) => content(&turn.content),
    };
    body.tools.as_ref().is_some_and(|t| t.iter().any(tool))
        || body.system.as_ref().is_some_and(content)
        || body.messages.as_ref().is_some_and(|m| m.iter().any(message))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use serde_json::Value;

    use super::*;
    use crate::adapter::provider::anthropic::Anthropic;
    use crate::adapter::wire::anthropic::{body::Purpose, host::HostFields, native};
    use crate::adapter::{Call, WireFormat};
    use crate::canonical::{ChatRequest, Dialect, NativeRequest};

    fn ephemeral() -> Value {
        json!({"type": "ephemeral"})
    }

    /// [`super::place`] on the as-written body of a client's Messages `body` for Anthropic:
    /// its tools, system prompt and messages as they would be sent.
    fn place(body: &mut Map<String, Value>, placement: &CachePlacement) -> Placed {
        let client = NativeRequest::of_tree(Dialect::AnthropicMessages, &Value::Object(body.clone()));
        let req = ChatRequest::default();
        let call = Call::as_written(WireFormat::Claude(&Anthropic), Default::default(), &req);
        let mut typed =
            native::body(&req, &call, &client, Some("anthropic"), HostFields::default(), Purpose::Answer);
        let placed = super::place(&mut typed, placement);
        let sent = serde_json::to_value(&typed).unwrap();
        for key in ["tools", "system", "messages"] {
            match sent.get(key) {
                Some(value) => body.insert(key.into(), value.clone()),
                None => body.remove(key),
            };
        }
        placed
    }

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
