//! What the spans learn from a committed answer's stream, and when they hear it: usage and
//! finish reasons as the events pass, recorded on the serving call's span and the request's
//! when the stream ends, breaks or is dropped; the call's span ends then. The request's span
//! is ended by the API once the last byte is out, so both cover the whole stream, not only
//! the time to its headers.

use super::names::CANCELLED;
use super::span::{AttemptSpan, RequestSpan};
use crate::canonical::{ErrorClass, Event, Usage};

/// A committed request's spans while its answer streams.
pub struct Answer {
    request: RequestSpan,
    attempt: AttemptSpan,
    finish_reasons: Vec<&'static str>,
}

impl Answer {
    pub fn new(request: RequestSpan, attempt: AttemptSpan) -> Answer {
        Answer { request, attempt, finish_reasons: Vec::new() }
    }

    /// One event of the answer went by (only its finish reason is kept: never its text).
    pub fn observe(&mut self, event: &Event) {
        if let Event::Finish(reason) = event {
            self.finish_reasons.push(reason.as_str());
        }
    }

    /// The stream ended (`error`: it broke with one of that class) with `usage`.
    pub fn end(self, usage: &Usage, error: Option<ErrorClass>) {
        self.record(usage, error.map(ErrorClass::as_str));
    }

    /// The client went away before the end.
    pub(crate) fn cancel(self, usage: &Usage) {
        self.record(usage, Some(CANCELLED));
    }

    fn record(self, usage: &Usage, error: Option<&str>) {
        self.attempt.answered(usage, &self.finish_reasons, error);
        self.request.answered(usage, &self.finish_reasons, error);
        // Dropping the attempt ends its span.
    }
}
