//! The chat door's scan of a conversation as written: it reads the shape of every message
//! without building one (no string copied, no escape undone) and gathers the facts routing
//! reads ([`Facts`]). It is cautious: where it cannot be sure the decoder would take a message
//! as it is (content parts, a member written twice, a lone surrogate half), it gives up, and
//! the door decodes the conversation instead, whose refusal then names the field.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use serde::de::{SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::Object;
use crate::canonical::members::{value_at, walk_object};
use crate::canonical::{unescaped_len, Facts, Role};

/// A message as the scan reads it: its role, and the rest as written.
#[derive(Deserialize)]
struct MessageShape<'a> {
    role: Role,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    tool_calls: Option<Vec<Object<ToolCallShape>>>,
    #[serde(default)]
    tool_call_id: Option<Text>,
}

/// Only checked: each member's shape is all the scan reads.
#[derive(Deserialize)]
struct ToolCallShape {
    #[serde(rename = "id")]
    _id: Text,
    #[serde(rename = "function")]
    _function: FunctionShape,
}

#[derive(Deserialize)]
struct FunctionShape {
    #[serde(rename = "name")]
    _name: Text,
    /// Absent is the empty string; `null` is refused, as the decoder refuses it.
    #[serde(rename = "arguments", default)]
    _arguments: Text,
}

/// A JSON string (a value of another type, or a string with a lone surrogate half, is refused).
#[derive(Default)]
struct Text;

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(deserializer)?;
        match unescaped_len(raw.get().as_bytes()) {
            Some(_) => Ok(Text),
            None => Err(serde::de::Error::custom("not a string")),
        }
    }
}

/// The conversation as the scan read it, in the same pass as the rest of the body: its texts
/// are slices of the body. A message whose shape the decoder refuses stops the pass (the door
/// reads the body again, to name the field); one the scan is not sure of (content parts, a
/// message the decoder's checks refuse) leaves it not `sure`.
#[derive(Default)]
pub(super) struct Scanned<'a> {
    sure: bool,
    count: usize,
    text_bytes: usize,
    first_system: Option<&'a str>,
    first_user: Option<&'a str>,
    leading_system: Vec<&'a str>,
}

impl<'a> Scanned<'a> {
    /// Add a message; false if the scan is not sure of it.
    fn add(&mut self, m: &MessageShape<'a>) -> bool {
        let calls = m.tool_calls.as_ref().is_some_and(|c| !c.is_empty());
        if m.role == Role::Tool && m.tool_call_id.is_none() {
            return false;
        }
        let text = match m.content {
            None if m.role == Role::Assistant && calls => None,
            None => return false,
            Some(raw) => match unescaped_len(raw.get().as_bytes()) {
                Some(len) => {
                    self.text_bytes += len;
                    Some(raw.get())
                }
                None => return false,
            },
        };
        self.count += 1;
        let leading = self.leading_system.len() + 1 == self.count && m.role == Role::System;
        if let Some(text) = text {
            if leading {
                self.leading_system.push(text);
            }
            match m.role {
                Role::System if self.first_system.is_none() => self.first_system = Some(text),
                Role::User if self.first_user.is_none() => self.first_user = Some(text),
                _ => {}
            }
        }
        true
    }

    /// The facts, their texts as spans of `body` (which the texts are slices of), if the scan
    /// is sure of every message.
    pub(super) fn facts(&self, body: &[u8]) -> Option<Facts> {
        let span = |text: &str| {
            let at = (text.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
            (at + text.len() <= body.len()).then_some(at..at + text.len())
        };
        if !self.sure {
            return None;
        }
        let first = |text: Option<&str>| match text {
            Some(text) => span(text).map(Some),
            None => Some(None),
        };
        Some(Facts {
            count: self.count,
            text_bytes: self.text_bytes,
            first_system: first(self.first_system)?,
            first_user: first(self.first_user)?,
            leading_system: self.leading_system.iter().map(|t| span(t)).collect::<Option<_>>()?,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scanned<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Messages<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Messages<'a> {
            type Value = Scanned<'a>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of messages")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scanned<'a>, A::Error> {
                let mut scanned = Scanned { sure: true, ..Scanned::default() };
                while let Some(Object(message)) = seq.next_element::<Object<MessageShape<'de>>>()? {
                    scanned.sure &= scanned.add(&message);
                }
                Ok(scanned)
            }
        }
        deserializer.deserialize_seq(Messages(PhantomData))
    }
}

/// A chat body read in one pass: its members as written (spans of the body: the key as
/// written, quotes included, and the value), and its conversation scanned.
pub(super) struct Walked<'a> {
    pub(super) members: Vec<(&'a str, &'a RawValue)>,
    pub(super) spans: Vec<(Range<usize>, Range<usize>)>,
    pub(super) conversation: Scanned<'a>,
}

/// Walk `body`, one JSON object and nothing after it, member by member: `messages` is scanned
/// ([`Scanned`]), every other value kept as written. `None` for anything else (no object, no
/// conversation, broken JSON), which the door then reads the careful way.
pub(super) fn walk(body: &[u8]) -> Option<Walked<'_>> {
    let mut members = Vec::with_capacity(16);
    let mut spans = Vec::with_capacity(16);
    let mut conversation = None;
    walk_object(body, |key, key_span, value_starts| {
        // A key with an escape is not borrowed: the careful reading takes it.
        let Cow::Borrowed(key) = key else { return None };
        let end = if key == "messages" {
            let (scanned, end) = value_at::<Scanned<'_>>(body, value_starts)?;
            // Twice is refused by the careful reading, which says so.
            if conversation.replace(scanned).is_some() {
                return None;
            }
            end
        } else {
            let (raw, end) = value_at::<&RawValue>(body, value_starts)?;
            members.push((key, raw));
            end
        };
        spans.push((key_span, value_starts..end));
        Some(end)
    })?;
    Some(Walked { members, spans, conversation: conversation? })
}

/// The facts of `json`, a conversation as written, if the scan is sure of it.
#[cfg(test)]
fn facts(json: &str) -> Option<Facts> {
    serde_json::from_str::<Scanned>(json).ok()?.facts(json.as_bytes())
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
