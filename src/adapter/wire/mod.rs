//! One folder per wire format: the body an upstream of that format is sent, typed and borrowed
//! from the canonical request and the call; the events it answers with, read into typed
//! structs; and how its errors are classified. Providers (`super::provider`) choose a wire and
//! address and sign its calls; nothing here knows who runs the upstream.

pub mod anthropic;
pub(crate) mod breakpoints;
pub mod converse;
pub mod gemini;
pub mod openai;
pub(crate) mod output;
pub(crate) mod written;

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::canonical::shallow::Part;

/// Members of the client's body passed on as it wrote them, beside a typed body's own fields
/// (`#[serde(flatten)]`): every member but those the typed body writes itself (`owned`), so
/// no member is written twice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Passthrough<'a> {
    pub members: &'a Map<String, Value>,
    pub owned: &'a [&'a str],
}

impl Serialize for Passthrough<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.members.iter().filter(|(key, _)| !self.owned.contains(&key.as_str())) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// The members of a client's object as it wrote them (a part of its body), beside a typed
/// body's own fields (`#[serde(flatten)]`), but for those the typed body writes itself (`owned`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Passed<'a> {
    pub members: Part<'a>,
    pub owned: &'a [&'a str],
}

impl Serialize for Passed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.members.members().filter(|(key, _)| !self.owned.contains(&key.as_ref())) {
            map.serialize_entry(&key, &value)?;
        }
        map.end()
    }
}

/// A JSON object as the client wrote it, or the one that stands in for anything else.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum Object<'a> {
    Written(&'a RawValue),
    Schema(&'a Value),
    Empty {},
    OpenSchema {
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

/// A JSON object written as text (a tool call's arguments, a tool's result), if the text is one.
pub(crate) fn written(text: &str) -> Option<&RawValue> {
    let raw: &RawValue = serde_json::from_str(text).ok()?;
    raw.get().starts_with('{').then_some(raw)
}

/// A member that should be an object: read as `T` when it is one, and as `Other` (which the
/// readers treat as absent) when it is anything else.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum ObjectOr<T> {
    Object(T),
    Other(IgnoredAny),
}

impl<T> ObjectOr<T> {
    pub(crate) fn object(&self) -> Option<&T> {
        match self {
            ObjectOr::Object(t) => Some(t),
            ObjectOr::Other(_) => None,
        }
    }
}

/// A member of an error object read as text or a whole number; any other shape counts as
/// absent, as a classifier that looks for text or a status would treat it.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
pub(crate) enum Scalar {
    Text(String),
    Number(u64),
    #[default]
    #[serde(skip)]
    Absent,
    Other(IgnoredAny),
}

impl Scalar {
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Scalar::Text(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn number(&self) -> Option<u64> {
        match self {
            Scalar::Number(n) => Some(*n),
            _ => None,
        }
    }
}

/// An event's `type` member, which names it where the client gets the event as it was written.
pub(crate) fn event_type(data: &str) -> Cow<'static, str> {
    #[derive(Deserialize)]
    struct Named<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
    }
    serde_json::from_str::<Named>(data).map(|n| Cow::Owned(n.kind.into_owned())).unwrap_or_default()
}

/// A token count as an answer wrote it (absent: none), within what usage holds.
pub(crate) fn count(tokens: Option<u64>) -> u32 {
    tokens.map_or(0, |n| n.min(u32::MAX as u64) as u32)
}

/// Usage from counts whose input leaves out the tokens read from the cache and written to it
/// (Claude's and Converse's): canonical input counts every prompt token.
pub(crate) fn usage_beside_cache(
    input: Option<u64>,
    output: Option<u64>,
    read: Option<u64>,
    written: Option<u64>,
) -> crate::canonical::Usage {
    let (read, written) = (count(read), count(written));
    crate::canonical::Usage {
        input_tokens: count(input).saturating_add(read).saturating_add(written),
        cached_input_tokens: read,
        output_tokens: count(output),
        cache_write_tokens: written,
    }
}
