//! An upstream chat completion chunk split for relaying: its head (`id`, `object`, `created`,
//! `model`) dropped, since the router writes its own, and every other member kept as the
//! upstream wrote it, so fields Spillway does not model (logprobs, `reasoning_content`,
//! `system_fingerprint`) reach an OpenAI client unchanged. `choices`, `usage` and `error` are
//! also handed back raw for the typed reading that feeds the ledger and dispatch.
//!
//! One pass over the chunk's top level; member values are borrowed, never built into a tree.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::canonical::RelayChunk;

/// The members of one chunk: what the typed reading needs, and the rest for the relay.
pub(crate) struct SplitChunk<'a> {
    /// Every member but the head, `usage` and `error`, each as `,"name":value`.
    pub fields: Vec<u8>,
    pub choices: Option<&'a RawValue>,
    pub usage: Option<&'a RawValue>,
    pub error: Option<&'a RawValue>,
}

impl SplitChunk<'_> {
    /// The relay event for this chunk; `no_choices` from the typed reading of `choices`.
    pub fn relay(self, no_choices: bool) -> RelayChunk {
        RelayChunk {
            fields: self.fields.into(),
            usage: self.usage.map(|u| bytes::Bytes::copy_from_slice(u.get().as_bytes())),
            no_choices,
        }
    }
}

/// A member name, borrowed unless it held escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_string())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for SplitChunk<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChunkVisitor;
        impl<'de> Visitor<'de> for ChunkVisitor {
            type Value = SplitChunk<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a chat completion chunk object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SplitChunk<'de>, A::Error> {
                let mut chunk =
                    SplitChunk { fields: Vec::with_capacity(256), choices: None, usage: None, error: None };
                while let Some(Key(name)) = map.next_key::<Key<'de>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    match name.as_ref() {
                        "id" | "object" | "created" | "model" => continue,
                        "usage" => chunk.usage = Some(value),
                        "error" => chunk.error = Some(value),
                        other => {
                            if other == "choices" {
                                chunk.choices = Some(value);
                            }
                            chunk.fields.push(b',');
                            serde_json::to_writer(&mut chunk.fields, other).map_err(de::Error::custom)?;
                            chunk.fields.push(b':');
                            chunk.fields.extend_from_slice(value.get().as_bytes());
                        }
                    }
                }
                Ok(chunk)
            }
        }
        deserializer.deserialize_map(ChunkVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_goes_and_everything_else_stays_as_written() {
        let data = r#"{"id":"cmpl-up","object":"chat.completion.chunk","created":1,"model":"qwen-7b","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"hi","reasoning_content":null},"logprobs":{"content":[{"token":"hi","logprob":-0.1}]},"finish_reason":null}],"usage":null,"x\"odd":1}"#;
        let chunk: SplitChunk<'_> = serde_json::from_str(data).unwrap();
        let fields = String::from_utf8(chunk.fields.clone()).unwrap();
        assert_eq!(
            fields,
            r#","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"hi","reasoning_content":null},"logprobs":{"content":[{"token":"hi","logprob":-0.1}]},"finish_reason":null}],"x\"odd":1"#
        );
        assert!(chunk.choices.unwrap().get().starts_with(r#"[{"index":0"#));
        assert_eq!(chunk.usage.unwrap().get(), "null");
        assert!(chunk.error.is_none());
        let relay = chunk.relay(false);
        assert_eq!(relay.usage.as_deref(), Some(&b"null"[..]));
    }

    #[test]
    fn a_chunk_that_is_not_an_object_is_refused() {
        assert!(serde_json::from_str::<SplitChunk<'_>>("[1,2]").is_err());
        assert!(serde_json::from_str::<SplitChunk<'_>>(r#"{"choices":[}"#).is_err());
    }
}
