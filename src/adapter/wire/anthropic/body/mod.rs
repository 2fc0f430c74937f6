//! The Messages request body as one typed value, serialised once: the host's own fields, the
//! system prompt, the conversation and the tools, and the rest. The translation of a canonical
//! request ([`super::request`]) fills it with blocks of its own; a client's Messages body
//! ([`super::native`]) fills it with the client's members borrowed as written, each edited
//! only where a host cannot take it (a block dropped, a signature unmarked, a system message
//! made a user turn), and passes every other member through. Cache marks ([`super::cache`]) are
//! placed on this value, not on a JSON tree. Pure: it builds and serialises, nothing else.

pub(crate) mod translated;

use std::borrow::Cow;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::host::HostFields;
use crate::adapter::wire::{Object, Passed};
use crate::canonical::shallow::Part;

/// A Messages request body for one host.
#[derive(Debug, serde::Serialize)]
pub(crate) struct ClaudeBody<'a> {
    #[serde(flatten)]
    pub host: HostFields<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<MessageOut<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolOut<'a>>>,
    /// The translation's other fields, or the client's other members.
    #[serde(flatten)]
    pub rest: Rest<'a>,
}

/// What a body holds beside its system prompt, conversation and tools.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum Rest<'a> {
    Translated(translated::Fields<'a>),
    Written(Members<'a>),
}

/// The client's members beside the system prompt, the conversation and the tools: as written,
/// but for those the body writes itself or drops (`owned`), and the task's `max_tokens`.
#[derive(Debug)]
pub(crate) struct Members<'a> {
    pub max_tokens: Option<u32>,
    pub members: Part<'a>,
    pub owned: Vec<&'static str>,
}

impl Serialize for Members<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            max_tokens: Option<u32>,
            #[serde(flatten)]
            rest: Passed<'a>,
        }
        let rest = Passed { members: self.members, owned: &self.owned };
        Out { max_tokens: self.max_tokens, rest }.serialize(serializer)
    }
}

/// The fields that say how to answer rather than what the request is: the count route takes
/// none of them.
pub(crate) const ANSWER_FIELDS: [&str; 7] =
    ["max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata"];

/// Why a body is built: to be answered, or to be counted (without [`ANSWER_FIELDS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    Answer,
    Count,
}

/// `{"type": "ephemeral"}`: Anthropic's default five-minute cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

pub(crate) const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

/// A system prompt or a message's content: text (the translation's, or the client's as
/// written), or blocks.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum Content<'a> {
    Text(Cow<'a, str>),
    WrittenText(Part<'a>),
    Blocks(Vec<BlockOut<'a>>),
}

impl<'a> Content<'a> {
    /// The client's content as written: its text, or its blocks; `None` for any other shape.
    pub(crate) fn written(value: Part<'a>) -> Option<Content<'a>> {
        match value.items() {
            Some(blocks) => Some(Content::Blocks(blocks.map(BlockOut::written).collect())),
            None if value.is_string() => Some(Content::WrittenText(value)),
            None => None,
        }
    }
}

/// A content block: one of the translation's, or one of the client's.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum BlockOut<'a> {
    Typed(Block<'a>),
    Written(Written<'a>),
}

impl<'a> BlockOut<'a> {
    pub(crate) fn written(block: Part<'a>) -> BlockOut<'a> {
        BlockOut::Written(Written::of(block))
    }

    pub(crate) fn text(text: Cow<'a, str>) -> BlockOut<'a> {
        BlockOut::Typed(Block::Text { text, cache_control: None })
    }
}

/// A content block the translation writes.
#[derive(Debug, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Ephemeral>,
    },
    Image {
        source: Source<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Ephemeral>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Object<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Ephemeral>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Ephemeral>,
    },
}

/// Where an image's bytes are.
#[derive(Debug, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Source<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

/// A JSON value of the client's (a content block, a tool), as written but for a signature
/// written without Spillway's mark and a cache mark of ours.
#[derive(Debug)]
pub(crate) struct Written<'a> {
    pub value: Part<'a>,
    /// A member written in place of the client's: a signature's field and its unmarked text.
    pub unmarked: Option<(&'static str, Cow<'a, str>)>,
    pub mark: bool,
}

impl<'a> Written<'a> {
    pub(crate) fn of(value: Part<'a>) -> Written<'a> {
        Written { value, unmarked: None, mark: false }
    }

    /// Whether the client put a `cache_control` on it.
    pub(crate) fn marked_by_client(&self) -> bool {
        self.value.get("cache_control").is_some()
    }
}

impl Serialize for Written<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !self.value.is_object() || (self.unmarked.is_none() && !self.mark) {
            return self.value.serialize(serializer);
        }
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.value.members() {
            match &self.unmarked {
                Some((field, secret)) if *field == key => map.serialize_entry(&key, secret)?,
                _ => map.serialize_entry(&key, &value)?,
            }
        }
        if self.mark {
            map.serialize_entry("cache_control", &EPHEMERAL)?;
        }
        map.end()
    }
}

/// A turn of the conversation: the client's as written, or one with its content written here.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum MessageOut<'a> {
    Written(Part<'a>),
    Turn(Turn<'a>),
}

impl MessageOut<'_> {
    /// Whether this is a user's turn.
    pub(crate) fn is_user(&self) -> bool {
        match self {
            MessageOut::Written(message) => message.get("role").is_some_and(|r| r.is_str("user")),
            MessageOut::Turn(turn) => turn.is_user(),
        }
    }
}

/// A turn with its content written here: the translation's (`role` set, nothing else), or a
/// client's message whose content was edited (its other members passed on as written).
#[derive(Debug, serde::Serialize)]
pub(crate) struct Turn<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'a str>,
    pub content: Content<'a>,
    #[serde(flatten)]
    pub rest: Option<Passed<'a>>,
}

impl<'a> Turn<'a> {
    /// A client's message with `content` in place of its own.
    pub(crate) fn edited(message: Part<'a>, content: Content<'a>) -> Turn<'a> {
        Turn { role: None, content, rest: Some(Passed { members: message, owned: &["content"] }) }
    }

    fn is_user(&self) -> bool {
        let written = || self.rest.and_then(|r| r.members.get("role")).is_some_and(|r| r.is_str("user"));
        self.role.map_or_else(written, |role| role == "user")
    }
}

/// A tool definition: the translation's, or the client's.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum ToolOut<'a> {
    Typed(translated::ToolSpec<'a>),
    Written(Written<'a>),
}
