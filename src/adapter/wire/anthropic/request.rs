//! The canonical request translated into a Messages body, typed and borrowed from the request
//! and the call.
//!
//! The leading system prompt (with the task's variant) goes to `system`; the rest of the
//! conversation becomes alternating user and assistant turns of content blocks: tool calls
//! `tool_use` blocks (their arguments passed on as written when they are a JSON object),
//! tool results `tool_result` blocks in the user's turn, a later system message a user turn
//! at its place, images `image` blocks after the text. Turns of one role are merged, as the
//! API wants roles to alternate, and empty text is left out, as the API refuses it.

use std::borrow::Cow;

use super::body::{
    translated::{Fields, ToolSpec},
    Block, BlockOut, ClaudeBody, Content, MessageOut, Purpose, Rest, Source, ToolOut, Turn,
};
use super::host::HostFields;
use super::JSON_OBJECT_INSTRUCTION;
use crate::adapter::wire::{written, Object};
use crate::adapter::{system_turn, Call};
use crate::canonical::{ChatRequest, Image, ResponseFormat, Role};

/// The Messages body of `call` of `req`, with the host's `fields` beside it.
pub(crate) fn body<'a>(
    req: &'a ChatRequest,
    call: &'a Call,
    host: HostFields<'a>,
    purpose: Purpose,
) -> ClaudeBody<'a> {
    let system = match (call.system_prompt(req), &req.response_format) {
        (Some(system), ResponseFormat::JsonObject) => {
            Some(format!("{system}\n\n{JSON_OBJECT_INSTRUCTION}").into())
        }
        (None, ResponseFormat::JsonObject) => Some(Cow::Borrowed(JSON_OBJECT_INSTRUCTION)),
        (system, _) => system.map(Cow::Owned),
    };
    let tools = req.tools.iter().map(|tool| ToolOut::Typed(ToolSpec::of(tool)));
    ClaudeBody {
        host,
        system: system.map(Content::Text),
        messages: Some(messages(req, call)),
        tools: (!req.tools.is_empty()).then(|| tools.collect()),
        rest: Rest::Translated(Fields::of(req, purpose)),
    }
}

/// The conversation after the system prompt, as alternating user/assistant content blocks (a
/// later system message a user turn at its place: [`system_turn`]).
fn messages<'a>(req: &'a ChatRequest, call: &'a Call) -> Vec<MessageOut<'a>> {
    let mut out: Vec<(&'static str, Vec<BlockOut<'a>>)> = Vec::new();
    for m in call.turns(req) {
        let (role, blocks) = match m.role {
            Role::System => ("user", text_block(Cow::Owned(system_turn(&m.content))).into_iter().collect()),
            Role::User => {
                let mut blocks: Vec<BlockOut> = text_block(Cow::Borrowed(&m.content)).into_iter().collect();
                blocks.extend(m.images.iter().map(image_block));
                ("user", blocks)
            }
            Role::Tool => {
                let tool_use_id = m.tool_call_id.as_deref().unwrap_or_default();
                let result = Block::ToolResult { tool_use_id, content: &m.content, cache_control: None };
                ("user", vec![BlockOut::Typed(result)])
            }
            Role::Assistant => {
                let mut blocks: Vec<BlockOut> = text_block(Cow::Borrowed(&m.content)).into_iter().collect();
                blocks.extend(m.tool_calls.iter().map(|call| {
                    let input = written(&call.arguments).map_or(Object::Empty {}, Object::Written);
                    BlockOut::Typed(Block::ToolUse {
                        id: &call.id,
                        name: &call.name,
                        input,
                        cache_control: None,
                    })
                }));
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    let turn = |(role, blocks)| {
        MessageOut::Turn(Turn { role: Some(role), content: Content::Blocks(blocks), rest: None })
    };
    out.into_iter().map(turn).collect()
}

/// An `image` content block: inline bytes as a `base64` source, an address as a `url` source.
fn image_block(image: &Image) -> BlockOut<'_> {
    let source = match image.inline_data() {
        Some((media_type, data)) => Source::Base64 { media_type, data },
        None => Source::Url { url: &image.url },
    };
    BlockOut::Typed(Block::Image { source, cache_control: None })
}

/// Anthropic rejects empty text blocks.
fn text_block(text: Cow<'_, str>) -> Option<BlockOut<'_>> {
    (!text.is_empty()).then(|| BlockOut::text(text))
}
