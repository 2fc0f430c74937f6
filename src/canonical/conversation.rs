//! A request's conversation. An agent resends 50–400 KB of history every turn, and an upstream
//! that speaks the client's dialect gets it as written, so the chat door does not decode it:
//! it keeps the client's `messages` as written with the few facts routing reads (how many
//! messages, how much text, the first system and user text, the leading system prompt), found
//! in one scan that builds nothing. The messages are decoded on first use, by the decoder the
//! door hands over, only when something needs them (a translation to another wire, a tokenizer).

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::{Arc, LazyLock, OnceLock};

use bytes::Bytes;
use memchr::memmem;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Message, Role};

/// The messages of a request, decoded or as the client wrote them.
#[derive(Clone, Default)]
pub struct Conversation {
    decoded: OnceLock<Vec<Message>>,
    written: Option<Arc<Written>>,
}

/// A conversation as the client wrote it (in its body, already checked by the door that
/// scanned it), its facts, and how to decode it.
pub struct Written {
    json: Bytes,
    facts: Facts,
    /// The door's decoder of the conversation in `json` (which the door's scan found valid).
    decode: fn(&[u8]) -> Vec<Message>,
    /// The first system text, unescaped once: the affinity key and the prefix cache's preamble
    /// both read it, and an agent's is tens of kilobytes.
    first_system: OnceLock<String>,
}

/// What routing reads of a written conversation. Texts are spans of `json`: JSON strings as
/// written, quotes included; every message's content is a string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub count: usize,
    /// The bytes of every message's text, unescaped.
    pub text_bytes: usize,
    pub first_system: Option<Range<usize>>,
    pub first_user: Option<Range<usize>>,
    /// The system messages before the first other one.
    pub leading_system: Vec<Range<usize>>,
}

impl Conversation {
    /// A conversation as written, decoded only when its messages are read.
    pub fn written(written: Written) -> Conversation {
        Conversation { decoded: OnceLock::new(), written: Some(Arc::new(written)) }
    }

    /// Whether the messages are still only as written (nothing has decoded them).
    pub fn is_written(&self) -> bool {
        self.decoded.get().is_none() && self.written.is_some()
    }

    fn facts(&self) -> Option<(&Written, &Facts)> {
        self.written.as_deref().filter(|_| self.decoded.get().is_none()).map(|w| (w, &w.facts))
    }

    pub fn len(&self) -> usize {
        match self.facts() {
            Some((_, facts)) => facts.count,
            None => self.decoded().len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The images of every message (a written conversation has none: its contents are strings).
    pub fn images(&self) -> usize {
        match self.facts() {
            Some(_) => 0,
            None => self.decoded().iter().map(|m| m.images.len()).sum(),
        }
    }

    /// The bytes of every message's text.
    pub fn text_bytes(&self) -> usize {
        match self.facts() {
            Some((_, facts)) => facts.text_bytes,
            None => self.decoded().iter().map(|m| m.content.len()).sum(),
        }
    }

    /// The text of the first message of `role` (system or user).
    pub fn first_text(&self, role: Role) -> Option<Cow<'_, str>> {
        if let Some((written, facts)) = self.facts() {
            let span = match role {
                Role::System => &facts.first_system,
                Role::User => &facts.first_user,
                _ => return self.decoded_first(role),
            };
            return span.as_ref().map(|span| written.text(span));
        }
        self.decoded_first(role)
    }

    fn decoded_first(&self, role: Role) -> Option<Cow<'_, str>> {
        self.decoded().iter().find(|m| m.role == role).map(|m| Cow::Borrowed(m.content.as_str()))
    }

    /// Each system message before the first other one, in order.
    pub fn leading_system(&self, mut each: impl FnMut(&str)) {
        match self.facts() {
            Some((written, facts)) => facts.leading_system.iter().for_each(|span| each(&written.text(span))),
            None => {
                self.decoded().iter().take_while(|m| m.role == Role::System).for_each(|m| each(&m.content))
            }
        }
    }

    /// The messages to change, decoded; the written form is dropped (through
    /// [`super::ChatRequest::messages_mut`], which drops the body as written too).
    pub(super) fn to_mut(&mut self) -> &mut Vec<Message> {
        self.decoded();
        self.written = None;
        self.decoded.get_mut().expect("decoded above")
    }

    fn decoded(&self) -> &Vec<Message> {
        self.decoded.get_or_init(|| match &self.written {
            Some(written) => (written.decode)(&written.json),
            None => Vec::new(),
        })
    }
}

impl Written {
    /// The conversation in `json` with the facts its door's scan found, decoded by `decode`.
    pub fn new(json: Bytes, facts: Facts, decode: fn(&[u8]) -> Vec<Message>) -> Written {
        Written { json, facts, decode, first_system: OnceLock::new() }
    }

    /// The text of a span of `json` (a JSON string the door's scan read as one).
    fn text(&self, span: &Range<usize>) -> Cow<'_, str> {
        let raw = self.json.get(span.clone()).unwrap_or_default();
        match raw.strip_prefix(b"\"").and_then(|r| r.strip_suffix(b"\"")) {
            Some(inner) if !inner.contains(&b'\\') => String::from_utf8_lossy(inner),
            _ if self.facts.first_system.as_ref() == Some(span) => {
                Cow::Borrowed(self.first_system.get_or_init(|| unescape(raw)))
            }
            _ => Cow::Owned(unescape(raw)),
        }
    }
}

fn unescape(raw: &[u8]) -> String {
    serde_json::from_slice(raw).unwrap_or_default()
}

impl Deref for Conversation {
    type Target = [Message];

    fn deref(&self) -> &[Message] {
        self.decoded()
    }
}

impl<'a> IntoIterator for &'a Conversation {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.decoded().iter()
    }
}

impl From<Vec<Message>> for Conversation {
    fn from(messages: Vec<Message>) -> Conversation {
        Conversation { decoded: OnceLock::from(messages), written: None }
    }
}

impl FromIterator<Message> for Conversation {
    fn from_iter<I: IntoIterator<Item = Message>>(messages: I) -> Conversation {
        Conversation::from(messages.into_iter().collect::<Vec<_>>())
    }
}

impl fmt::Debug for Conversation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Conversation {
    fn eq(&self, other: &Conversation) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<Message>> for Conversation {
    fn eq(&self, other: &Vec<Message>) -> bool {
        **self == **other
    }
}

impl Serialize for Conversation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.decoded().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Conversation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(deserializer).map(Conversation::from)
    }
}

/// The length of a JSON string's text (`raw`, quotes included, as the JSON reader took it),
/// unescaped; `None` if it is no string, or holds a lone surrogate half (which the reader lets
/// through and the decoder refuses).
pub fn unescaped_len(raw: &[u8]) -> Option<usize> {
    static PAIR: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\\\\"));
    static UNICODE: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\\u"));
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    // An agent's history is code, a newline escaped every few dozen bytes: where each backslash
    // starts an escape of two bytes for one (none is `\\` or `\u`, none is cut), counting them
    // is the whole reading, and a count the compiler vectorises.
    let backslashes = count(inner, b'\\');
    if backslashes == 0 {
        return Some(inner.len());
    }
    if inner.last() != Some(&b'\\') && PAIR.find(inner).is_none() && UNICODE.find(inner).is_none() {
        return Some(inner.len() - backslashes);
    }
    let mut len = inner.len();
    // Where the next escape may start: past the one just read (`\\` holds two backslashes).
    let mut next = 0;
    for at in memchr::memchr_iter(b'\\', inner) {
        if at < next {
            continue;
        }
        let escape = inner.get(at + 1..)?;
        let (written, text) = match escape.first()? {
            b'u' => match hex4(escape.get(1..5)?)? {
                // A surrogate pair is one character of four bytes; a lone half is no text.
                0xD800..0xDC00 => {
                    let low =
                        escape.get(5..7).filter(|b| *b == b"\\u").and_then(|_| hex4(escape.get(7..11)?))?;
                    if !(0xDC00..0xE000).contains(&low) {
                        return None;
                    }
                    (12, 4)
                }
                0xDC00..0xE000 => return None,
                0..0x80 => (6, 1),
                0x80..0x800 => (6, 2),
                _ => (6, 3),
            },
            _ => (2, 1),
        };
        len -= written - text;
        next = at + written;
    }
    Some(len)
}

/// How many of `bytes` are `byte`: summed in byte-wide lanes over blocks short enough not to
/// overflow one, which the compiler turns into vector compares (a plain filtered count stays a
/// loop of one byte at a time).
fn count(bytes: &[u8], byte: u8) -> usize {
    bytes.chunks(255).map(|block| block.iter().fold(0u8, |n, &b| n + u8::from(b == byte)) as usize).sum()
}

fn hex4(digits: &[u8]) -> Option<u32> {
    std::str::from_utf8(digits).ok().and_then(|d| u32::from_str_radix(d, 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unescaped_length_counts_each_escape_as_its_character() {
        for text in ["", "plain", "a\nb\t\"q\"\\", "é ü ✓", "\u{1F600} and \u{7}", "</script>"] {
            let raw = serde_json::to_vec(text).unwrap();
            assert_eq!(unescaped_len(&raw), Some(text.len()), "{text:?}");
        }
        assert_eq!(unescaped_len(br#""\u00e9\ud83d\ude00\/""#), Some("é😀/".len()));
        assert_eq!(unescaped_len(b"\"cut\\"), None);
        // A lone surrogate half is refused, as the decoder refuses it.
        assert_eq!(unescaped_len(br#""\ud83d""#), None);
        assert_eq!(unescaped_len(br#""\ude00 x""#), None);
        assert_eq!(unescaped_len(br#""\ud83d\u0041""#), None);
    }

    proptest::proptest! {
        #[test]
        fn an_unescaped_length_is_the_texts_length_however_it_is_escaped(
            text in "(\\PC|[\\\\\"\n\t/\u{7}\u{e9}\u{1F600}]){0,40}",
            unicode in proptest::bool::ANY,
        ) {
            let raw = serde_json::to_string(&text).unwrap();
            proptest::prop_assert_eq!(unescaped_len(raw.as_bytes()), Some(text.len()));
            // Every character written as `\uXXXX` (a pair for one past the first plane).
            if unicode {
                let escaped: String = text.encode_utf16().map(|unit| format!("\\u{unit:04x}")).collect();
                proptest::prop_assert_eq!(unescaped_len(format!("\"{escaped}\"").as_bytes()), Some(text.len()));
            }
        }
    }

    fn decode(json: &[u8]) -> Vec<Message> {
        serde_json::from_slice(json).unwrap()
    }

    #[test]
    fn a_written_conversation_answers_from_its_facts_until_it_is_read() {
        let json = br#"[{"role":"system","content":"be \"brief\""},{"role":"user","content":"hi"}]"#;
        let span = |text: &str| {
            let at = std::str::from_utf8(json).unwrap().find(text).unwrap();
            at..at + text.len()
        };
        let system = span(r#""be \"brief\"""#);
        let facts = Facts {
            count: 2,
            text_bytes: 12,
            first_system: Some(system.clone()),
            first_user: Some(span(r#""hi""#)),
            leading_system: [system].to_vec(),
        };
        let conversation = Conversation::written(Written::new(Bytes::from_static(json), facts, decode));
        assert!(conversation.is_written());
        assert_eq!(conversation.len(), 2);
        assert_eq!(conversation.first_text(Role::System).as_deref(), Some("be \"brief\""));
        assert_eq!(conversation.first_text(Role::User).as_deref(), Some("hi"));
        let mut leading = Vec::new();
        conversation.leading_system(|text| leading.push(text.to_string()));
        assert_eq!(leading, ["be \"brief\""]);
        assert!(conversation.is_written(), "no fact decodes the messages");
        assert_eq!(conversation[1].content, "hi");
        assert!(!conversation.is_written());
        let decoded = Conversation::from(decode(json));
        assert_eq!(conversation, decoded);
        assert_eq!(conversation.text_bytes(), decoded.text_bytes());
        let mut changed = conversation.clone();
        changed.to_mut().push(Message::new(Role::User, "more"));
        assert_eq!(changed.len(), 3);
    }
}
