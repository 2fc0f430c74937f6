//! A JSON body read only as deep as a backend of the client's own dialect edits it, every part
//! a span of the bytes the client sent. An agent's turn is 50–400 KB of instructions, tool
//! schemas and history; a native backend gets it back as those bytes, with only the parts it
//! cannot take (a block dropped, a signature unmarked, a cache mark placed) written anew, so
//! the body is read once, by one pass that builds no tree and copies no string.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::ser::{Serialize, SerializeStruct, Serializer};

use super::members::{object_at, skip_space, value_at};

/// A client's body as it sent it, read to the depth its dialect needs ([`Depth`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Shallow {
    bytes: Bytes,
    root: Node,
}

/// One JSON value of a [`Shallow`] body: an object or an array read into its parts, or any
/// value left whole. Spans are of the body's bytes.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Object { span: Range<usize>, members: Vec<(Name, Node)> },
    Array { span: Range<usize>, items: Vec<Node> },
    Whole(Range<usize>),
}

/// A member's name: a span of the body, or the name unescaped where it was written with escapes.
#[derive(Debug, Clone, PartialEq)]
enum Name {
    Plain(Range<usize>),
    Escaped(Box<str>),
}

/// Which values a reading opens: `at` is how deep the value is (the body is 0), `key` the name
/// of the member it is the value of (`None` for an item of an array).
pub type Depth = fn(at: usize, key: Option<&str>) -> bool;

impl Shallow {
    /// Read `bytes`, one JSON object and nothing after it, opening what `depth` says; `None`
    /// for anything else (the door's typed reading has refused it already).
    pub fn read(bytes: Bytes, depth: Depth) -> Option<Shallow> {
        let mut reader = Reader { body: &bytes, depth };
        let at = skip_space(&bytes, 0);
        let (root, end) = reader.value(at, 0, None)?;
        if !matches!(root, Node::Object { .. }) || skip_space(&bytes, end) != bytes.len() {
            return None;
        }
        Some(Shallow { bytes, root })
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The body itself.
    pub fn root(&self) -> Part<'_> {
        Part { body: &self.bytes, node: &self.root }
    }

    /// The body as a tree (a test's reading).
    pub fn tree(&self) -> serde_json::Value {
        serde_json::from_slice(&self.bytes).unwrap_or_default()
    }

    /// A member of the body.
    pub fn get(&self, name: &str) -> Option<Part<'_>> {
        self.root().get(name)
    }
}

/// A value of a body, beside the bytes its spans are of.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    body: &'a Bytes,
    node: &'a Node,
}

impl<'a> Part<'a> {
    /// The value's JSON text as written.
    pub fn json(&self) -> &'a str {
        // Spans end at a value's end, which the reader found at a character boundary.
        std::str::from_utf8(self.bytes()).unwrap_or_default()
    }

    /// The value's JSON text as written, as bytes (read without checking them for UTF-8 again).
    pub fn bytes(&self) -> &'a [u8] {
        &self.body[self.span()]
    }

    pub fn is_null(&self) -> bool {
        self.bytes() == b"null"
    }

    /// The value's JSON text as written, sharing the body's bytes.
    pub fn shared(&self) -> Bytes {
        self.body.slice(self.span())
    }

    fn span(&self) -> Range<usize> {
        match self.node {
            Node::Object { span, .. } | Node::Array { span, .. } | Node::Whole(span) => span.clone(),
        }
    }

    /// The value of member `name` (the last, if written twice).
    pub fn get(&self, name: &str) -> Option<Part<'a>> {
        self.members().filter(|(key, _)| key == name).last().map(|(_, value)| value)
    }

    /// The members of an object (none for anything else), in the order written.
    pub fn members(&self) -> impl Iterator<Item = (Cow<'a, str>, Part<'a>)> + 'a {
        let members = match self.node {
            Node::Object { members, .. } => members.as_slice(),
            _ => &[],
        };
        let body = self.body;
        members.iter().map(move |(name, node)| {
            let name = match name {
                // A plain name is written without escapes: its text between the quotes.
                Name::Plain(span) => Cow::Borrowed(
                    std::str::from_utf8(&body[span.start + 1..span.end - 1]).unwrap_or_default(),
                ),
                Name::Escaped(name) => Cow::Borrowed(&**name),
            };
            (name, Part { body, node })
        })
    }

    /// The items of an array, if it is one that was opened.
    pub fn items(&self) -> Option<impl ExactSizeIterator<Item = Part<'a>> + 'a> {
        let Node::Array { items, .. } = self.node else { return None };
        let body = self.body;
        Some(items.iter().map(move |node| Part { body, node }))
    }

    pub fn is_object(&self) -> bool {
        self.bytes().first() == Some(&b'{')
    }

    pub fn is_string(&self) -> bool {
        self.bytes().first() == Some(&b'"')
    }

    /// The text of a JSON string, unescaped (borrowed where it has no escapes).
    pub fn str(&self) -> Option<Cow<'a, str>> {
        if !self.is_string() {
            return None;
        }
        let json = self.json();
        match json[1..json.len() - 1].contains('\\') {
            false => Some(Cow::Borrowed(&json[1..json.len() - 1])),
            true => serde_json::from_str::<String>(json).ok().map(Cow::Owned),
        }
    }

    /// Whether this is the JSON string `text` (which needs no escapes).
    pub fn is_str(&self, text: &str) -> bool {
        self.str().is_some_and(|s| s == text)
    }
}

/// A value written as the client wrote it: its JSON text goes into the body unchanged.
#[derive(Debug, Clone, Copy)]
pub struct AsWritten<'a>(pub &'a str);

impl Serialize for AsWritten<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // serde_json writes a value of this name as its text, unchanged (the way it writes its
        // own `RawValue`); a test below holds that.
        const RAW: &str = "$serde_json::private::RawValue";
        let mut s = serializer.serialize_struct(RAW, 1)?;
        s.serialize_field(RAW, self.0)?;
        s.end()
    }
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        AsWritten(self.json()).serialize(serializer)
    }
}

struct Reader<'a> {
    body: &'a [u8],
    depth: Depth,
}

impl Reader<'_> {
    /// The value at `at`, `deep` levels down, the value of member `key`; and where it ends.
    fn value(&mut self, at: usize, deep: usize, key: Option<&str>) -> Option<(Node, usize)> {
        let opens = (self.depth)(deep, key);
        match self.body.get(at)? {
            b'{' if opens => self.object(at, deep),
            b'[' if opens => self.array(at, deep),
            _ => {
                let (IgnoredAny, end) = value_at::<IgnoredAny>(self.body, at)?;
                Some((Node::Whole(at..end), end))
            }
        }
    }

    fn object(&mut self, start: usize, deep: usize) -> Option<(Node, usize)> {
        let mut members = Vec::new();
        let body = self.body;
        let end = object_at(body, start, |key, key_span, value_starts| {
            let (value, end) = self.value(value_starts, deep + 1, Some(&key))?;
            let name = match key {
                Cow::Borrowed(_) => Name::Plain(key_span),
                Cow::Owned(key) => Name::Escaped(key.into()),
            };
            members.push((name, value));
            Some(end)
        })?;
        Some((Node::Object { span: start..end, members }, end))
    }

    fn array(&mut self, start: usize, deep: usize) -> Option<(Node, usize)> {
        let mut items = Vec::new();
        let mut at = skip_space(self.body, start + 1);
        if self.body.get(at) != Some(&b']') {
            loop {
                let (item, end) = self.value(at, deep + 1, None)?;
                items.push(item);
                at = skip_space(self.body, end);
                match self.body.get(at)? {
                    b',' => at = skip_space(self.body, at + 1),
                    b']' => break,
                    _ => return None,
                }
            }
        }
        Some((Node::Array { span: start..at + 1, items }, at + 1))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// Opens everything but the values of members named `closed`.
    fn all_but_closed(_: usize, key: Option<&str>) -> bool {
        key != Some("closed")
    }

    fn read(text: &str, depth: Depth) -> Option<Shallow> {
        Shallow::read(Bytes::from(text.to_string()), depth)
    }

    #[test]
    fn each_part_is_the_text_as_written() {
        let text =
            r#" { "a" : [1, {"b":"c\n"} ,"d"], "clo\u0073ed": {"x" : 1}, "closed":{"y":[ ]}, "e":{} } "#;
        let body = read(text, all_but_closed).unwrap();
        assert_eq!(body.get("a").unwrap().json(), r#"[1, {"b":"c\n"} ,"d"]"#);
        let items: Vec<_> = body.get("a").unwrap().items().unwrap().map(|p| p.json()).collect();
        assert_eq!(items, ["1", r#"{"b":"c\n"}"#, r#""d""#]);
        let inner = body.get("a").unwrap().items().unwrap().nth(1).unwrap();
        assert_eq!(inner.get("b").unwrap().str().unwrap(), "c\n");
        assert!(body.get("a").unwrap().items().unwrap().nth(2).unwrap().is_str("d"));
        // A name written with escapes is still its name; a member written twice is the last.
        assert_eq!(body.get("closed").unwrap().json(), r#"{"y":[ ]}"#);
        assert!(body.get("closed").unwrap().items().is_none(), "left whole");
        let names: Vec<_> = body.root().members().map(|(name, _)| name.into_owned()).collect();
        assert_eq!(names, ["a", "closed", "closed", "e"]);
        assert_eq!(body.get("e").unwrap().json(), "{}");
        assert!(body.get("e").unwrap().is_object());
        assert_eq!(body.get("missing").map(|p| p.json()), None);
        // Written back, each part is its own text.
        let out = serde_json::to_string(&body.get("a").unwrap()).unwrap();
        assert_eq!(out, r#"[1, {"b":"c\n"} ,"d"]"#);
        let value = serde_json::to_value(body.root()).unwrap();
        assert_eq!(value, serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn as_written_text_goes_into_a_body_unchanged() {
        #[derive(serde::Serialize)]
        struct Body<'a> {
            a: AsWritten<'a>,
            b: u8,
        }
        let out = serde_json::to_string(&Body { a: AsWritten(r#"{ "k" :"\u00e9" }"#), b: 1 }).unwrap();
        assert_eq!(out, r#"{"a":{ "k" :"\u00e9" },"b":1}"#);
        assert_eq!(serde_json::to_value(AsWritten("[1, 2]")).unwrap(), json!([1, 2]));
    }

    #[test]
    fn anything_but_one_object_is_refused() {
        let nested = ["{\"a\":[1,]}", "{\"a\":[1 2]}", "{\"a\":{\"b\":1,}}"];
        for text in crate::canonical::members::NOT_ONE_OBJECT.into_iter().chain(nested) {
            assert_eq!(read(text, all_but_closed), None, "{text}");
        }
        assert!(read(" {} ", |at, _| at == 0).is_some());
    }
}
