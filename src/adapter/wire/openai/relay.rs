//! An upstream chat completion chunk split for relaying: its head (`id`, `object`, `created`,
//! `model`) dropped, since the router writes its own, and every other member kept as the
//! upstream wrote it, so fields Spillway does not model (logprobs, `reasoning_content`,
//! `system_fingerprint`) reach an OpenAI client unchanged. `choices`, `usage` and `error` are
//! also handed back raw for the typed reading that feeds the ledger and dispatch.
//!
//! One pass over the chunk's top level; member values are borrowed, never built into a tree.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::canonical::members::{value_at, walk_object, Key};
use crate::canonical::RelayChunk;

/// The members of one chunk: what the typed reading needs, and the rest for the relay.
pub(crate) struct SplitChunk<'a> {
    /// Every member but the head, `usage` and `error`, each as `,"name":value`.
    pub fields: Vec<u8>,
    pub choices: Option<&'a str>,
    pub usage: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// Where a member of a chunk goes.
enum Place {
    /// The head, which the router writes itself.
    Head,
    Usage,
    Error,
    Choices,
    Other,
}

impl Place {
    fn of(name: &str) -> Place {
        match name {
            "id" | "object" | "created" | "model" => Place::Head,
            "usage" => Place::Usage,
            "error" => Place::Error,
            "choices" => Place::Choices,
            _ => Place::Other,
        }
    }
}

impl<'a> SplitChunk<'a> {
    fn new() -> SplitChunk<'a> {
        SplitChunk { fields: Vec::with_capacity(256), choices: None, usage: None, error: None }
    }

    /// One pass over `data`: the chunk split, and its `choices` read as `C` on the way. `None`
    /// when the pass is not sure of it (not one object, broken JSON, `choices` not a `C`); the
    /// careful reading ([`Deserialize`]) then says what is wrong.
    pub fn read<C: Deserialize<'a>>(data: &'a str) -> Option<(SplitChunk<'a>, Option<C>)> {
        let body = data.as_bytes();
        let mut chunk = SplitChunk::new();
        let mut choices = None;
        walk_object(body, |key, key_span, at| {
            let place = Place::of(&key);
            let end = match place {
                Place::Head => return Some(value_at::<IgnoredAny>(body, at)?.1),
                Place::Choices => {
                    let (typed, end) = value_at::<C>(body, at)?;
                    choices = Some(typed);
                    end
                }
                Place::Usage | Place::Error | Place::Other => value_at::<IgnoredAny>(body, at)?.1,
            };
            let value = data.get(at..end)?;
            match place {
                Place::Usage => chunk.usage = Some(value),
                Place::Error => chunk.error = Some(value),
                _ => {
                    if let Place::Choices = place {
                        chunk.choices = Some(value);
                    }
                    chunk.member(data.get(key_span)?.as_bytes(), value);
                }
            }
            Some(end)
        })?;
        Some((chunk, choices))
    }

    /// Keep a member for the relay; `key` as written, quotes included.
    fn member(&mut self, key: &[u8], value: &str) {
        self.fields.push(b',');
        self.fields.extend_from_slice(key);
        self.fields.push(b':');
        self.fields.extend_from_slice(value.as_bytes());
    }

    /// The relay event for this chunk; `no_choices` from the typed reading of `choices`, and
    /// whether it stands for its `output` ([`RelayChunk::output`]).
    pub fn relay(self, no_choices: bool, output: bool) -> RelayChunk {
        RelayChunk {
            fields: self.fields.into(),
            usage: self.usage.map(|u| bytes::Bytes::copy_from_slice(u.as_bytes())),
            no_choices,
            output,
        }
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
                let mut chunk = SplitChunk::new();
                while let Some(Key(name)) = map.next_key::<Key<'de>>()? {
                    let value = map.next_value::<&'de RawValue>()?.get();
                    match Place::of(&name) {
                        Place::Head => continue,
                        Place::Usage => chunk.usage = Some(value),
                        Place::Error => chunk.error = Some(value),
                        place => {
                            if let Place::Choices = place {
                                chunk.choices = Some(value);
                            }
                            let key = serde_json::to_vec(name.as_ref()).map_err(de::Error::custom)?;
                            chunk.member(&key, value);
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
    use serde_json::Value;

    type Choices = Option<Vec<Value>>;

    /// Both readings of `data`, which must agree: the one pass and the careful one.
    fn both(data: &str) -> (SplitChunk<'_>, Choices) {
        let (fast, choices) = SplitChunk::read::<Choices>(data).expect("the one pass reads it");
        let careful: SplitChunk<'_> = serde_json::from_str(data).unwrap();
        let members = |c: &SplitChunk<'_>| -> Value {
            let fields = std::str::from_utf8(&c.fields).unwrap();
            serde_json::from_str(&format!("{{{}}}", fields.strip_prefix(',').unwrap_or(fields))).unwrap()
        };
        assert_eq!(members(&fast), members(&careful), "{data}");
        assert_eq!((fast.choices, fast.usage, fast.error), (careful.choices, careful.usage, careful.error));
        let typed: Choices = fast.choices.map(|c| serde_json::from_str(c).unwrap()).unwrap_or_default();
        let choices = choices.flatten();
        assert_eq!(choices, typed);
        (fast, choices)
    }

    #[test]
    fn the_head_goes_and_everything_else_stays_as_written() {
        let data = r#"{"id":"cmpl-up","object":"chat.completion.chunk","created":1,"model":"qwen-7b","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"hi","reasoning_content":null},"logprobs":{"content":[{"token":"hi","logprob":-0.1}]},"finish_reason":null}],"usage":null,"x\"odd":1}"#;
        let (chunk, choices) = both(data);
        let fields = String::from_utf8(chunk.fields.clone()).unwrap();
        assert_eq!(
            fields,
            r#","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"hi","reasoning_content":null},"logprobs":{"content":[{"token":"hi","logprob":-0.1}]},"finish_reason":null}],"x\"odd":1"#
        );
        assert_eq!(choices.unwrap().len(), 1);
        assert_eq!(chunk.usage, Some("null"));
        assert!(chunk.error.is_none());
        let relay = chunk.relay(false, false);
        assert_eq!(relay.usage.as_deref(), Some(&b"null"[..]));
    }

    #[test]
    fn the_one_pass_and_the_careful_reading_agree() {
        for data in [
            r#"{"choices":[],"usage":{"prompt_tokens":3}}"#,
            r#" { "model" : "m" , "choices" : null , "error" : {"message":"x"} } "#,
            r#"{"choi\u0063es":[{"index":0}],"\u0069d":"x"}"#,
            r#"{}"#,
        ] {
            both(data);
        }
    }

    #[test]
    fn a_chunk_that_is_not_an_object_is_refused() {
        for data in ["[1,2]", r#"{"choices":[}"#, r#"{"choices":1}"#, r#"{"a":1} {}"#] {
            assert!(SplitChunk::read::<Choices>(data).is_none(), "{data}");
        }
        assert!(serde_json::from_str::<SplitChunk<'_>>("[1,2]").is_err());
        assert!(serde_json::from_str::<SplitChunk<'_>>(r#"{"choices":[}"#).is_err());
    }
}
