//! Upstream errors, classified once where they are born.
//!
//! An adapter turns every failure (HTTP status, provider error body, timeout, broken connection)
//! into an [`UpstreamError`] whose [`ErrorClass`] decides, as data, whether dispatch may try
//! another backend. Nothing downstream inspects messages or strings to decide that.

use std::time::Duration;

/// What kind of failure this was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 429: the provider's rate limit or quota.
    RateLimited,
    /// 529, 503: the provider is overloaded or unavailable.
    Overloaded,
    /// Any other 5xx.
    ServerError,
    /// No answer (or no first token) in time.
    Timeout,
    /// A fleet node that is up (its readings fresh) had no first token by the task's deadline:
    /// too slow for this request's SLO, not down. Dispatch fails over; the node's breaker does
    /// not count it, and its prefill speed is bounded by it (`NodeCounters::late`).
    Late,
    /// Could not connect, or the connection broke.
    Connect,
    /// The stream broke or was malformed after it started.
    StreamBroken,
    /// 400, 404, 422: the request itself is wrong.
    InvalidRequest,
    /// 401, 403: our credentials were refused.
    Auth,
    /// The provider refused the content.
    ContentPolicy,
    /// The prompt does not fit the model's context window.
    ContextLength,
    /// The answer broke the request's response format (not JSON, or not valid against its
    /// schema). Found by dispatch before anything reached the client, so another backend may
    /// still answer; it counts against this one.
    InvalidOutput,
}

impl ErrorClass {
    /// May dispatch try another backend for this request (before the first token)?
    pub fn may_fail_over(self) -> bool {
        matches!(
            self,
            ErrorClass::RateLimited
                | ErrorClass::Overloaded
                | ErrorClass::ServerError
                | ErrorClass::Timeout
                | ErrorClass::Late
                | ErrorClass::Connect
                | ErrorClass::StreamBroken
                | ErrorClass::InvalidOutput
        )
    }

    /// Does this failure count against the backend's health (breakers, availability)?
    /// Client mistakes do not.
    pub(crate) fn counts_against_backend(self) -> bool {
        self.may_fail_over() && self != ErrorClass::Late
    }

    /// A short stable label, used in logs, metrics and error codes.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::ServerError => "server_error",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Late => "late",
            ErrorClass::Connect => "connect",
            ErrorClass::StreamBroken => "stream_broken",
            ErrorClass::InvalidRequest => "invalid_request",
            ErrorClass::Auth => "auth",
            ErrorClass::ContentPolicy => "content_policy",
            ErrorClass::ContextLength => "context_length",
            ErrorClass::InvalidOutput => "invalid_output",
        }
    }

    /// The class an HTTP status implies when the body says nothing more specific.
    pub(crate) fn from_status(status: u16) -> ErrorClass {
        match status {
            429 => ErrorClass::RateLimited,
            503 | 529 => ErrorClass::Overloaded,
            408 | 504 => ErrorClass::Timeout,
            401 | 403 => ErrorClass::Auth,
            500..=599 => ErrorClass::ServerError,
            _ => ErrorClass::InvalidRequest,
        }
    }
}

/// A failure of one upstream call, with everything dispatch and the client need to know.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{class:?} (status {status:?}): {message}")]
pub struct UpstreamError {
    pub class: ErrorClass,
    /// The upstream HTTP status, when there was one.
    pub status: Option<u16>,
    /// The upstream's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    /// The upstream's own reason, passed on to the client for errors that are not failed over.
    pub message: String,
}

impl UpstreamError {
    pub fn new(class: ErrorClass, status: Option<u16>, message: impl Into<String>) -> Self {
        UpstreamError { class, status, retry_after: None, message: message.into() }
    }

    pub(crate) fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_classes() {
        assert_eq!(ErrorClass::from_status(429), ErrorClass::RateLimited);
        assert_eq!(ErrorClass::from_status(529), ErrorClass::Overloaded);
        assert_eq!(ErrorClass::from_status(503), ErrorClass::Overloaded);
        assert_eq!(ErrorClass::from_status(500), ErrorClass::ServerError);
        assert_eq!(ErrorClass::from_status(401), ErrorClass::Auth);
        assert_eq!(ErrorClass::from_status(422), ErrorClass::InvalidRequest);
        assert!(ErrorClass::from_status(502).may_fail_over());
        assert!(!ErrorClass::from_status(400).may_fail_over());
        assert!(!ErrorClass::ContextLength.may_fail_over());
        assert!(!ErrorClass::ContentPolicy.may_fail_over());
        assert!(ErrorClass::InvalidOutput.may_fail_over());
        assert!(ErrorClass::InvalidOutput.counts_against_backend());
        assert_eq!(ErrorClass::InvalidOutput.as_str(), "invalid_output");
    }
}
