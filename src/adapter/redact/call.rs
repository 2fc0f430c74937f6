//! One call's redactor: the router's secrets and the credentials that call sent (its key, and
//! what its cloud credentials handed out: AWS keys and session token, a Google or Entra token,
//! a service account's key lines), so that an upstream echoing any of them, in a whole error,
//! an error inside the stream or the stream's last error, is cut where the error leaves the
//! adapters.
//!
//! The call's own secrets are read when there is something to scrub, not when the call starts:
//! a token fetched during the call (its cloud credentials are read by the wire adapter) is
//! known by then. It holds no secret of its own beyond the call's key.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde_json::Value;

use super::{scrub, scrub_error, Redactor};
use crate::adapter::credentials::CloudAuth;
use crate::adapter::{Call, EventStream, Upstream};
use crate::canonical::UpstreamError;

/// The router's redactor and one call's credentials. No `Debug`: it holds the call's key.
#[derive(Clone)]
pub struct CallRedactor {
    router: Arc<Redactor>,
    key: Option<String>,
    cloud: Option<CloudAuth>,
}

/// A [`CallRedactor`] with the call's secrets read: what scrubs one error, or every string of
/// a batch's results.
pub struct Resolved<'r> {
    router: &'r Redactor,
    own: Arc<Redactor>,
}

/// Distinct sets of call secrets kept with their redactors (whose automata are built once).
const KEPT: usize = 16;

/// The last [`KEPT`] sets of call secrets and their redactors, newest last: every call to a
/// backend has the same set until a token rotates, and a service account's key lines make its
/// automaton worth keeping (building it costs about half a millisecond).
static KEPT_REDACTORS: Mutex<VecDeque<(Vec<String>, Arc<Redactor>)>> = Mutex::new(VecDeque::new());

/// The redactor of `secrets`, kept or made.
fn own(secrets: Vec<String>) -> Arc<Redactor> {
    let mut kept = KEPT_REDACTORS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = kept.iter().position(|(s, _)| *s == secrets) {
        let hit = kept.remove(at).map(|(_, redactor)| redactor).unwrap_or_default();
        kept.push_back((secrets, Arc::clone(&hit)));
        return hit;
    }
    let made = Arc::new(Redactor::new(&secrets));
    if kept.len() == KEPT {
        kept.pop_front();
    }
    kept.push_back((secrets, Arc::clone(&made)));
    made
}

impl CallRedactor {
    /// The redactor of `call`: its router's secrets, its key and cloud credentials.
    pub fn of(call: &Call<'_>) -> CallRedactor {
        CallRedactor::new(Arc::clone(&call.redactor), &call.upstream)
    }

    /// `router`'s secrets and the credentials `upstream` is called with.
    pub fn new(router: Arc<Redactor>, upstream: &Upstream) -> CallRedactor {
        CallRedactor { router, key: upstream.api_key.clone(), cloud: upstream.cloud.clone() }
    }

    /// The secrets as they are now.
    pub fn resolve(&self) -> Resolved<'_> {
        let mut secrets = self.cloud.as_ref().map(CloudAuth::secrets).unwrap_or_default();
        secrets.extend(self.key.iter().cloned());
        Resolved { router: &self.router, own: own(secrets) }
    }

    /// `error` with its message scrubbed.
    pub fn error(&self, error: UpstreamError) -> UpstreamError {
        self.resolve().error(error)
    }

    /// `events` with every error among them scrubbed.
    pub fn stream(self, events: EventStream) -> EventStream {
        Box::pin(events.map(move |item| item.map_err(|e| self.error(e))))
    }

    /// What a wire adapter answered, scrubbed: the error, or every error of the stream.
    pub(in crate::adapter) fn answer(
        self,
        answered: Result<EventStream, UpstreamError>,
    ) -> Result<EventStream, UpstreamError> {
        match answered {
            Ok(events) => Ok(self.stream(events)),
            Err(error) => Err(self.error(error)),
        }
    }
}

impl Resolved<'_> {
    /// `text` scrubbed of the router's and the call's secrets.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        scrub(text, &[self.router, &self.own])
    }

    /// `error` with its message scrubbed.
    pub fn error(&self, error: UpstreamError) -> UpstreamError {
        scrub_error(error, &[self.router, &self.own])
    }

    /// Every string in `value` (keys aside) scrubbed in place.
    pub fn json(&self, value: &mut Value) {
        match value {
            Value::String(text) => {
                if let Cow::Owned(clean) = self.text(text) {
                    *text = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| self.json(item)),
            Value::Object(fields) => fields.values_mut().for_each(|field| self.json(field)),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}
