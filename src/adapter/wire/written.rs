//! A client's body sent on as the bytes it wrote, with only the members Spillway owns
//! rewritten: an agent resends 50–400 KB of instructions, tool schemas and history every turn,
//! and an upstream that speaks the client's dialect gets those bytes without a tree built or a
//! string re-escaped. The top-level members are found once (borrowed slices of the body); each
//! member the wire passes on is copied as written, and the ones Spillway owns are written after
//! them.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::canonical::WrittenBody;

/// The top-level members of a JSON object body, each value's JSON text as the client wrote it.
#[derive(Debug)]
pub(crate) struct Members<'a>(pub Vec<(Cow<'a, str>, &'a str)>);

impl<'a> Members<'a> {
    /// The members of `body`, which must be one JSON object.
    pub(crate) fn of(body: &'a [u8]) -> Result<Members<'a>, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let members = de.deserialize_map(MembersVisitor)?;
        de.end()?;
        Ok(members)
    }

    /// The members of `written`, where the door found them (else read from its bytes).
    pub(crate) fn of_written(written: &'a WrittenBody) -> Result<Members<'a>, serde_json::Error> {
        let Some(spans) = &written.members else { return Members::of(&written.bytes) };
        let text = |span: &std::ops::Range<usize>| {
            let bytes = written.bytes.get(span.clone()).unwrap_or_default();
            std::str::from_utf8(bytes).map_err(serde::de::Error::custom)
        };
        let mut members = Vec::with_capacity(spans.len());
        for (key, value) in spans.iter() {
            let key = text(key)?;
            let key = match key.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
                Some(plain) if !plain.contains('\\') => Cow::Borrowed(plain),
                _ => Cow::Owned(serde_json::from_str::<String>(key)?),
            };
            members.push((key, text(value)?));
        }
        Ok(Members(members))
    }

    /// The value of the member `name`, as written (the last, if the client wrote it twice).
    pub(crate) fn get(&self, name: &str) -> Option<&'a str> {
        self.0.iter().rev().find(|(key, _)| key == name).map(|(_, value)| *value)
    }

    /// The body: every member `passed` names, as written and in its place, then the members
    /// of `own` (a struct or map; its `None`s skipped by its own serde attributes).
    pub(crate) fn write(
        &self,
        passed: impl Fn(&str) -> bool,
        own: &impl Serialize,
    ) -> Result<Vec<u8>, serde_json::Error> {
        let written: usize = self.0.iter().map(|(key, value)| key.len() + value.len() + 4).sum();
        let mut out = Vec::with_capacity(written + 256);
        out.push(b'{');
        for (key, value) in self.0.iter().filter(|(key, _)| passed(key)) {
            if out.len() > 1 {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, key)?;
            out.push(b':');
            out.extend_from_slice(value.as_bytes());
        }
        let own = serde_json::to_vec(own)?;
        // `own` is an object: `{}` adds nothing, else its members go after a comma.
        if let Some(inner) =
            own.strip_prefix(b"{").and_then(|o| o.strip_suffix(b"}")).filter(|i| !i.is_empty())
        {
            if out.len() > 1 {
                out.push(b',');
            }
            out.extend_from_slice(inner);
        }
        out.push(b'}');
        Ok(out)
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(16));
        while let Some((key, value)) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
            members.push((key, value.get()));
        }
        Ok(Members(members))
    }
}

/// A JSON array as written with `first` put before its items: the task's system prompt ahead
/// of the client's conversation, the conversation left as bytes.
pub(crate) struct WithFirst<'a, T> {
    pub first: T,
    /// The JSON text of an array.
    pub rest: &'a str,
}

impl<T: Serialize> Serialize for WithFirst<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let items: Vec<&RawValue> = serde_json::from_str(self.rest).map_err(S::Error::custom)?;
        let mut seq = serializer.serialize_seq(Some(items.len() + 1))?;
        seq.serialize_element(&self.first)?;
        for item in items {
            seq.serialize_element(item)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    #[derive(Serialize)]
    struct Own<'a> {
        model: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
    }

    fn rewrite(body: &str, owned: &[&str], own: &impl Serialize) -> String {
        let members = Members::of(body.as_bytes()).unwrap();
        String::from_utf8(members.write(|key| !owned.contains(&key), own).unwrap()).unwrap()
    }

    #[test]
    fn members_not_owned_keep_their_bytes_and_place_and_owned_ones_follow() {
        let body = r#"{ "model" : "task", "messages":[{"role":"user","content":"caf\u00e9 \"q\""}],
            "temperature":0.70, "max_tokens":9, "x-custom":{"a" : [1,2]} }"#;
        let out = rewrite(body, &["model", "max_tokens"], &Own { model: "m", max_tokens: Some(5) });
        assert_eq!(
            out,
            r#"{"messages":[{"role":"user","content":"caf\u00e9 \"q\""}],"temperature":0.70,"x-custom":{"a" : [1,2]},"model":"m","max_tokens":5}"#
        );
        let (written, sent): (Value, Value) =
            (serde_json::from_str(body).unwrap(), serde_json::from_str(&out).unwrap());
        assert_eq!(sent["messages"], written["messages"]);
        assert_eq!(sent["x-custom"], written["x-custom"]);
    }

    #[test]
    fn an_owned_member_written_twice_goes_once_and_escaped_keys_stay_keys() {
        let body = r#"{"model":"a","model":"b","we\"ird":1}"#;
        let members = Members::of(body.as_bytes()).unwrap();
        assert_eq!(members.get("model"), Some(r#""b""#));
        let out = rewrite(body, &["model"], &Own { model: "m", max_tokens: None });
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), json!({"we\"ird": 1, "model": "m"}));
        assert_eq!(rewrite("{}", &[], &json!({})), "{}");
        assert_eq!(rewrite(r#"{"a":1}"#, &["a"], &json!({})), "{}");
    }

    #[test]
    fn a_body_that_is_not_one_object_is_refused() {
        for body in ["[1]", "{\"a\":1} {}", "{\"a\":", "nope", ""] {
            assert!(Members::of(body.as_bytes()).is_err(), "{body}");
        }
    }

    #[test]
    fn with_first_puts_its_item_first_and_keeps_the_rest_as_written() {
        let rest = r#"[ {"role":"user", "content":"hi"} ]"#;
        let out = serde_json::to_string(&WithFirst { first: json!({"role": "system"}), rest }).unwrap();
        assert_eq!(out, r#"[{"role":"system"},{"role":"user", "content":"hi"}]"#);
        assert_eq!(serde_json::to_string(&WithFirst { first: 1, rest: "[]" }).unwrap(), "[1]");
    }
}
