//! One pass over a JSON object's top-level members, each value read where it lies in the
//! bytes (typed, skipped, or kept as its span), so a body read once can be forwarded member by
//! member without a second scan: the chat door's request and each relayed upstream chunk.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A member name, borrowed unless it held escapes.
pub struct Key<'a>(pub Cow<'a, str>);

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

/// Walk `body`, one JSON object and nothing after it: `member(key, key_span, value_start)`
/// reads each member's value from `value_start` and returns where it ends. The key's span is
/// as written, quotes included. `None` when the body is anything else or `member` gives up.
pub fn walk_object<'a>(
    body: &'a [u8],
    member: impl FnMut(Cow<'a, str>, Range<usize>, usize) -> Option<usize>,
) -> Option<()> {
    let end = object_at(body, skip_space(body, 0), member)?;
    (skip_space(body, end) == body.len()).then_some(())
}

/// [`walk_object`] for the object that starts at `at` (its `{`), wherever it is in `body`:
/// where it ends, past its `}`.
pub fn object_at<'a>(
    body: &'a [u8],
    at: usize,
    mut member: impl FnMut(Cow<'a, str>, Range<usize>, usize) -> Option<usize>,
) -> Option<usize> {
    let mut at = expect(body, at, b'{')?;
    if body.get(skip_space(body, at)) == Some(&b'}') {
        at = skip_space(body, at);
    } else {
        loop {
            let key_at = skip_space(body, at);
            let (key, key_end) = name_at(body, key_at)?;
            let value_starts = skip_space(body, expect(body, skip_space(body, key_end), b':')?);
            let end = member(key, key_at..key_end, value_starts)?;
            at = skip_space(body, end);
            match body.get(at)? {
                b',' => at += 1,
                b'}' => break,
                _ => return None,
            }
        }
    }
    Some(at + 1)
}

/// The member name whose opening quote is at `at`, and where it ends: read in place when it
/// holds no escape (nor a control character, which JSON refuses), else by serde.
fn name_at(body: &[u8], at: usize) -> Option<(Cow<'_, str>, usize)> {
    let rest = body.get(at + 1..).filter(|_| body.get(at) == Some(&b'"'))?;
    if let Some(len) = memchr::memchr2(b'"', b'\\', rest) {
        let name = &rest[..len];
        if rest[len] == b'"' && name.iter().all(|&b| b >= 0x20) {
            return Some((Cow::Borrowed(std::str::from_utf8(name).ok()?), at + len + 2));
        }
    }
    let (Key(key), end) = value_at::<Key<'_>>(body, at)?;
    Some((key, end))
}

/// One JSON value of `body` at `at`, and where it ends.
pub fn value_at<'a, T: Deserialize<'a>>(body: &'a [u8], at: usize) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_slice(body.get(at..)?).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, at + values.byte_offset()))
}

pub(crate) fn skip_space(body: &[u8], mut at: usize) -> usize {
    while body.get(at).is_some_and(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

fn expect(body: &[u8], at: usize, byte: u8) -> Option<usize> {
    (body.get(at) == Some(&byte)).then_some(at + 1)
}

/// Texts that are not one JSON object, which every reader of one refuses.
#[cfg(test)]
pub(crate) const NOT_ONE_OBJECT: [&str; 8] =
    ["", "[1]", "{\"a\":1", "{\"a\":1}x", "{\"a\" 1}", "{\"a\":1,}", "{a:1}", "{\"a\":1}{}"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn members(body: &str) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        walk_object(body.as_bytes(), |key, _, at| {
            let (raw, end) = value_at::<&RawValue>(body.as_bytes(), at)?;
            out.push((key.into_owned(), raw.get().to_string()));
            Some(end)
        })?;
        Some(out)
    }

    #[test]
    fn each_member_is_found_where_it_is_written() {
        let got = members(" {\"a\" : 1 ,\"b\\u0063\":[1, {\"x\":\"}\"}], \"c\":null}\n").unwrap();
        let want = [("a", "1"), ("bc", "[1, {\"x\":\"}\"}]"), ("c", "null")];
        assert_eq!(got, want.map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(members("{}").unwrap(), vec![]);
        // A name read in place is the text between its quotes, whatever its characters.
        assert_eq!(members("{\"é中\":2}").unwrap(), [("é中".to_string(), "2".to_string())]);
    }

    #[test]
    fn anything_but_one_object_is_refused() {
        for body in NOT_ONE_OBJECT.into_iter().chain(["{\"a\tb\":1}"]) {
            assert_eq!(members(body), None, "{body}");
        }
    }
}
