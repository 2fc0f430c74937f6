//! Secrets never leave: every text that comes from an upstream is cut of the credentials
//! Spillway holds, by one function ([`scrub`]), before anything returns, logs or records it.
//!
//! A provider that refuses a key often echoes it ("Incorrect API key provided: sk-…"), a proxy
//! may quote the request's headers back, AWS puts the canonical request (session token and all)
//! in a signature mismatch, and any of them may do so in an error body, an error event inside a
//! stream or an exception frame, whole or cut short. A [`Redactor`] holds secret values (the
//! provider keys, client keys and admin token the router has from its config); a
//! [`CallRedactor`] adds to them the credentials one call sent (its key; the AWS keys and
//! session token, the Google or Entra token and a service account's key lines its cloud
//! credentials handed out). Each occurrence of a secret, and of any [`ECHO_LEN`] characters of
//! one (a truncated echo), becomes [`MARKER`]; so does anything shaped like a well-known
//! provider key (`sk-…`, `sk-ant-…`, `sk-proj-…`, Google's `AIza…`, masked `*` echoes included)
//! or a SigV4 signature, even when it is not ours.
//!
//! [`super::send`], [`super::count_tokens`] and the batch API's results are the only ways
//! upstream text leaves the adapters, and each goes through a [`CallRedactor`]; a structural
//! test (`structure_tests.rs`) fails when another way out appears. This module must not do I/O,
//! classify, or change anything but texts: an error's class, status and `Retry-After` pass
//! through untouched. Secrets shorter than [`MIN_SECRET_LEN`] characters (after trimming) are
//! ignored, so that a short or empty value cannot turn every message into markers; a secret
//! echoed in another encoding (percent- or JSON-escaped) is not recognised.

mod call;
#[cfg(test)]
mod structure_tests;
#[cfg(test)]
mod tests;

pub use call::{CallRedactor, Resolved};

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, LazyLock, OnceLock};

use aho_corasick::{AhoCorasick, MatchKind};
use futures::StreamExt;
use regex::Regex;

use super::EventStream;
use crate::canonical::UpstreamError;

/// What a secret is replaced with.
pub const MARKER: &str = "[redacted]";

/// Secrets shorter than this (in characters, after trimming) are not matched.
pub const MIN_SECRET_LEN: usize = 8;

/// Any run of this many bytes of a secret (characters: secrets are ASCII in practice) is cut
/// wherever it appears, so that an echo cut short, or starting late, is cut too. A secret
/// shorter than this is matched whole.
pub const ECHO_LEN: usize = 12;

/// Well-known key shapes: OpenAI (`sk-`, `sk-proj-`), Anthropic (`sk-ant-`), Google (`AIza`),
/// each followed by 8 or more key characters (`*` counts: providers mask the middle of a key
/// they echo). Not preceded by a word character, so `task-…` or `disk-…` are left alone.
static KEY_SHAPE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:sk-ant-|sk-proj-|sk-|AIza)[A-Za-z0-9_\-*]{8,}")
        .expect("the key-shape pattern is a valid regex")
});

/// A SigV4 signature as an `Authorization` header carries it: good for replaying that request.
static SIGNATURE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bSignature=[0-9a-f]{64}\b").expect("the signature pattern is a valid regex")
});

/// Replaces known secrets, their echoes and key-shaped tokens in texts with [`MARKER`].
#[derive(Clone, Default)]
pub struct Redactor {
    /// Distinct secrets of at least [`MIN_SECRET_LEN`] characters.
    secrets: Vec<String>,
    /// Every piece of every secret that is cut ([`ECHO_LEN`] bytes, or the whole of a shorter
    /// secret), built on first use; `None` if it could not be built (then whole secrets only).
    echoes: OnceLock<Option<AhoCorasick>>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the values themselves.
        f.debug_struct("Redactor").field("secrets", &self.secrets.len()).finish()
    }
}

impl Redactor {
    /// A redactor for these secret values. Empty and short values (see [`MIN_SECRET_LEN`]) are
    /// left out; key shapes are redacted regardless.
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
        secrets.sort();
        secrets.dedup();
        Redactor { secrets, echoes: OnceLock::new() }
    }

    /// How many secrets are matched.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Whether no secret is matched (key shapes still are).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` scrubbed of this redactor's secrets ([`scrub`]).
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        scrub(text, &[self])
    }

    /// The same error with its message scrubbed; class, status and `Retry-After` unchanged.
    pub fn scrub_error(&self, error: UpstreamError) -> UpstreamError {
        scrub_error(error, &[self])
    }

    /// The same events, with the message of an `Err` item (a stream broken mid-way) scrubbed.
    pub fn scrub_stream(self: Arc<Self>, events: EventStream) -> EventStream {
        Box::pin(events.map(move |item| item.map_err(|e| self.scrub_error(e))))
    }

    /// Where the pieces of this redactor's secrets are in `text`.
    fn find(&self, text: &str, cuts: &mut Vec<Range<usize>>) {
        match self.echoes.get_or_init(|| echoes(&self.secrets)) {
            Some(automaton) => cuts.extend(automaton.find_overlapping_iter(text).map(|m| m.range())),
            None => {
                for secret in &self.secrets {
                    cuts.extend(text.match_indices(secret.as_str()).map(|(at, s)| at..at + s.len()));
                }
            }
        }
    }
}

/// The automaton of every piece of `secrets` that is cut.
fn echoes(secrets: &[String]) -> Option<AhoCorasick> {
    let mut pieces: Vec<&[u8]> = secrets
        .iter()
        .flat_map(|s| match s.len() < ECHO_LEN {
            true => s.as_bytes().windows(s.len()),
            false => s.as_bytes().windows(ECHO_LEN),
        })
        .collect();
    pieces.sort_unstable();
    pieces.dedup();
    AhoCorasick::builder().match_kind(MatchKind::Standard).build(pieces).ok()
}

/// The one function every upstream text passes through: `text` with every secret of
/// `redactors`, every [`ECHO_LEN`] characters of one, every well-known key shape and every
/// SigV4 signature replaced by [`MARKER`]; borrowed when there was nothing to replace.
pub fn scrub<'a>(text: &'a str, redactors: &[&Redactor]) -> Cow<'a, str> {
    let mut cuts = Vec::new();
    for redactor in redactors {
        redactor.find(text, &mut cuts);
    }
    let mut out = cut(text, cuts);
    if KEY_SHAPE.is_match(&out) {
        out = Cow::Owned(KEY_SHAPE.replace_all(&out, MARKER).into_owned());
    }
    if SIGNATURE.is_match(&out) {
        out = Cow::Owned(SIGNATURE.replace_all(&out, format!("Signature={MARKER}")).into_owned());
    }
    out
}

/// `error` with its message [`scrub`]bed by `redactors`.
pub(crate) fn scrub_error(mut error: UpstreamError, redactors: &[&Redactor]) -> UpstreamError {
    if let Cow::Owned(clean) = scrub(&error.message, redactors) {
        error.message = clean;
    }
    error
}

/// `text` with each of `cuts` (overlapping, in any order) replaced by one [`MARKER`], widened
/// to whole characters.
fn cut(text: &str, mut cuts: Vec<Range<usize>>) -> Cow<'_, str> {
    if cuts.is_empty() {
        return Cow::Borrowed(text);
    }
    let widen = |mut end: usize| {
        end = end.min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        end
    };
    cuts.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut cuts = cuts.into_iter().peekable();
    while let Some(range) = cuts.next() {
        // Past the end of the cut before: a boundary, so widening back stops at or after it.
        let mut start = range.start.max(at);
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = widen(range.end);
        while let Some(next) = cuts.next_if(|next| next.start <= end) {
            end = widen(end.max(next.end));
        }
        out.push_str(&text[at..start]);
        out.push_str(MARKER);
        at = end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}
