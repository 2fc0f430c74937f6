//! Secrets never leave: scrub every upstream error text of the keys Spillway holds.
//!
//! A provider that refuses a key often echoes it ("Incorrect API key provided: sk-…"), a proxy
//! may quote the request's headers back, and a transport error can name the URL it failed on.
//! Such a text becomes an [`UpstreamError`] message, and from there it would reach the client's
//! error body, a log line, a canary or gate result on `/admin`. A [`Redactor`] holds the secret
//! values (provider API keys, client keys, the admin token) and replaces each occurrence of one
//! with [`MARKER`]; it also replaces anything shaped like a well-known provider key (`sk-…`,
//! `sk-ant-…`, `sk-proj-…`, Google's `AIza…`, masked `*` echoes included), even when it is not
//! ours. [`send_scrubbed`] is the one way the request path (dispatch, and through it canaries)
//! and calls made beside it (gate, judge, shadow) reach an adapter, so an error is scrubbed
//! where it is born, before anything records, logs or returns it.
//!
//! It must not do I/O, classify, or change anything but message texts: an error's class,
//! status and `Retry-After` pass through untouched. Exact matching ignores secrets shorter
//! than [`MIN_SECRET_LEN`] characters (after trimming), so that a short or empty value cannot
//! turn every message into markers; such a value is no secret worth the name, and config
//! validation is the place to refuse it. Keys echoed in part (masked in the middle) are caught
//! only when they have a known key shape; a secret echoed in another encoding (percent- or
//! JSON-escaped) is not recognised by exact matching.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, LazyLock};

use futures::StreamExt;
use regex::Regex;

use super::{Call, EventStream, Transport};
use crate::canonical::{ChatRequest, UpstreamError};

/// What a secret is replaced with.
pub const MARKER: &str = "[redacted]";

/// Secrets shorter than this (in characters, after trimming) are not matched exactly.
pub const MIN_SECRET_LEN: usize = 8;

/// Well-known key shapes: OpenAI (`sk-`, `sk-proj-`), Anthropic (`sk-ant-`), Google (`AIza`),
/// each followed by 8 or more key characters (`*` counts: providers mask the middle of a key
/// they echo). Not preceded by a word character, so `task-…` or `disk-…` are left alone.
static KEY_SHAPE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:sk-ant-|sk-proj-|sk-|AIza)[A-Za-z0-9_\-*]{8,}")
        .expect("the key-shape pattern is a valid regex")
});

/// Replaces known secrets and key-shaped tokens in texts with [`MARKER`].
#[derive(Clone, Default)]
pub struct Redactor {
    /// Distinct secrets of at least [`MIN_SECRET_LEN`] characters, longest first (so that a
    /// secret containing another is replaced whole).
    secrets: Vec<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the values themselves.
        f.debug_struct("Redactor").field("secrets", &self.secrets.len()).finish()
    }
}

impl Redactor {
    /// A redactor for these secret values. Empty and short values (see [`MIN_SECRET_LEN`]) are
    /// left out of exact matching; key shapes are redacted regardless.
    pub fn new<I, S>(secrets: I) -> Redactor
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(|s| s.as_ref().trim().to_string())
            .filter(|s| s.chars().count() >= MIN_SECRET_LEN)
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { secrets }
    }

    /// How many secrets are matched exactly.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Whether no secret is matched exactly (key shapes still are).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret and key-shaped token replaced by [`MARKER`]; borrowed when
    /// there was nothing to replace.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MARKER));
            }
        }
        if KEY_SHAPE.is_match(&out) {
            out = Cow::Owned(KEY_SHAPE.replace_all(&out, MARKER).into_owned());
        }
        out
    }

    /// The same error with its message scrubbed; class, status and `Retry-After` unchanged.
    pub fn scrub_error(&self, mut error: UpstreamError) -> UpstreamError {
        if let Cow::Owned(clean) = self.scrub(&error.message) {
            error.message = clean;
        }
        error
    }

    /// The same events, with the message of an `Err` item (a stream broken mid-way) scrubbed.
    pub fn scrub_stream(self: Arc<Self>, events: EventStream) -> EventStream {
        Box::pin(events.map(move |item| item.map_err(|e| self.scrub_error(e))))
    }
}

/// [`super::send`], with the error it resolves to and every error its stream yields scrubbed by
/// `redactor`. Every caller outside the adapters goes through here.
pub async fn send_scrubbed(
    redactor: Arc<Redactor>,
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    match super::send(transport, call, req).await {
        Ok(events) => Ok(redactor.scrub_stream(events)),
        Err(error) => Err(redactor.scrub_error(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{ErrorClass, Event};
    use std::time::Duration;

    const PROVIDER: &str = "prov-0123456789abcdef";
    const CLIENT: &str = "ck-PLANTED-client-key-4242";

    fn redactor() -> Redactor {
        Redactor::new([PROVIDER, CLIENT, "", "short", "  "])
    }

    #[test]
    fn every_occurrence_of_each_secret_is_replaced() {
        let text = format!("Incorrect API key provided: {PROVIDER}. Seen {PROVIDER} and {CLIENT} twice");
        let clean = redactor().scrub(&text).into_owned();
        assert_eq!(clean, "Incorrect API key provided: [redacted]. Seen [redacted] and [redacted] twice");
    }

    #[test]
    fn short_and_empty_secrets_are_not_matched_exactly() {
        let r = redactor();
        assert_eq!(r.len(), 2, "only the two long secrets are kept");
        let text = "a short message with no secret in it";
        assert!(matches!(r.scrub(text), Cow::Borrowed(_)), "nothing to replace: borrowed");
        assert_eq!(r.scrub(text), text);
        assert!(Redactor::new(["1234567"]).is_empty());
        assert_eq!(Redactor::new(["12345678"]).len(), 1);
    }

    #[test]
    fn a_secret_containing_another_is_replaced_whole() {
        let r = Redactor::new(["abcdefgh", "abcdefgh-longer-one"]);
        assert_eq!(r.scrub("x abcdefgh-longer-one y abcdefgh"), "x [redacted] y [redacted]");
    }

    #[test]
    fn well_known_key_shapes_are_redacted_even_when_not_ours() {
        let r = Redactor::default();
        for (text, want) in [
            ("key sk-abcdefgh1234 refused", "key [redacted] refused"),
            ("key sk-proj-AbCd_EfGh-1234 refused", "key [redacted] refused"),
            ("key sk-ant-api03-xyzXYZ0123 refused", "key [redacted] refused"),
            ("key AIzaSyA1b2C3d4E5f6G7h8 refused", "key [redacted] refused"),
            (
                "Incorrect API key provided: sk-abc12***********************wxyz. You can find it",
                "Incorrect API key provided: [redacted]. You can find it",
            ),
        ] {
            assert_eq!(r.scrub(text), want, "{text}");
        }
    }

    #[test]
    fn ordinary_words_are_not_mistaken_for_keys() {
        let r = Redactor::default();
        for text in [
            "the task-scheduler-queue is full",
            "disk-pressure-eviction on the node",
            "sk-short",
            "model gemini-2.5-flash is overloaded",
            "Missing bearer authentication header",
        ] {
            assert_eq!(r.scrub(text), text);
        }
    }

    #[test]
    fn only_the_message_of_an_error_changes() {
        let e = UpstreamError::new(ErrorClass::Auth, Some(401), format!("bad key {PROVIDER}"))
            .with_retry_after(Some(Duration::from_secs(3)));
        let clean = redactor().scrub_error(e.clone());
        assert_eq!(clean.message, "bad key [redacted]");
        assert_eq!((clean.class, clean.status, clean.retry_after), (e.class, e.status, e.retry_after));
    }

    #[tokio::test]
    async fn a_stream_broken_mid_way_is_scrubbed() {
        let items = vec![
            Ok(Event::TextDelta(format!("the model may say {PROVIDER}"))),
            Err(UpstreamError::new(ErrorClass::StreamBroken, None, format!("echo {CLIENT}"))),
        ];
        let stream: EventStream = Box::pin(futures::stream::iter(items));
        let got: Vec<_> = Arc::new(redactor()).scrub_stream(stream).collect().await;
        assert_eq!(got.len(), 2);
        // Answers are the model's and are passed on as they are; only error texts are scrubbed.
        assert!(matches!(&got[0], Ok(Event::TextDelta(t)) if t.contains(PROVIDER)));
        assert!(matches!(&got[1], Err(e) if e.message == "echo [redacted]"));
    }

    #[test]
    fn debug_never_shows_the_values() {
        let shown = format!("{:?}", redactor());
        assert!(!shown.contains(PROVIDER) && !shown.contains(CLIENT), "{shown}");
    }
}
