//! How Gemini reports errors: `{"error": {code, message, status, details}}` (possibly wrapped
//! in a one-element array), classified by its `google.rpc` status name before its HTTP status,
//! with the wait a `RetryInfo` detail asks for.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::Deserialize;

use crate::adapter::error::parse_retry_after;
use crate::adapter::transport::http;
use crate::adapter::wire::{ObjectOr, Scalar};
use crate::canonical::{ErrorClass, UpstreamError};

#[derive(Debug, Default, Deserialize)]
pub(in crate::adapter) struct ErrorObject {
    #[serde(default)]
    message: Scalar,
    #[serde(default)]
    status: Scalar,
    #[serde(default)]
    code: Scalar,
    #[serde(default)]
    details: Option<ObjectOr<Vec<ObjectOr<Detail>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    #[serde(default)]
    retry_delay: Scalar,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: Option<ObjectOr<ErrorObject>>,
}

/// An error body, or a list of them (of which the first counts).
#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorBodies {
    One(ErrorBody),
    Listed(Vec<ErrorBody>),
}

/// Classify a non-2xx answer.
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let parsed: Option<ErrorBodies> = serde_json::from_str(body).ok();
    let error = parsed
        .as_ref()
        .and_then(|b| match b {
            ErrorBodies::One(b) => b.error.as_ref(),
            ErrorBodies::Listed(bodies) => bodies.first()?.error.as_ref(),
        })
        .and_then(ObjectOr::object);
    let class = error.map(|e| e.class(Some(status))).unwrap_or(ErrorClass::from_status(status));
    let message =
        error.and_then(|e| e.message.text()).map(str::to_string).unwrap_or_else(|| http::excerpt(body));
    let retry_after = parse_retry_after(headers).or_else(|| error.and_then(ErrorObject::retry_delay));
    UpstreamError::new(class, Some(status), message).with_retry_after(retry_after)
}

impl ErrorObject {
    fn class(&self, status: Option<u16>) -> ErrorClass {
        let message = self.message.text().unwrap_or("").to_ascii_lowercase();
        match self.status.text().unwrap_or("") {
            "RESOURCE_EXHAUSTED" => ErrorClass::RateLimited,
            "UNAVAILABLE" => ErrorClass::Overloaded,
            "INTERNAL" | "UNKNOWN" => ErrorClass::ServerError,
            "DEADLINE_EXCEEDED" => ErrorClass::Timeout,
            "PERMISSION_DENIED" | "UNAUTHENTICATED" => ErrorClass::Auth,
            "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => {
                if message.contains("exceeds the maximum number of tokens")
                    || message.contains("input token count")
                    || message.contains("token limit")
                    || message.contains("too long")
                {
                    ErrorClass::ContextLength
                } else {
                    ErrorClass::InvalidRequest
                }
            }
            "NOT_FOUND" => ErrorClass::InvalidRequest,
            _ => status
                .or_else(|| self.code.number().map(|c| c as u16))
                .map(ErrorClass::from_status)
                .unwrap_or(ErrorClass::ServerError),
        }
    }

    /// This error, arrived inside a 2xx stream or body.
    pub(in crate::adapter) fn in_band(&self) -> UpstreamError {
        UpstreamError::new(self.class(None), None, self.message.text().unwrap_or("upstream error"))
    }

    /// `google.rpc.RetryInfo.retryDelay` ("17s", "0.5s") from the details.
    fn retry_delay(&self) -> Option<Duration> {
        let details = self.details.as_ref()?.object()?;
        details.iter().filter_map(ObjectOr::object).find_map(|detail| {
            let delay = detail.retry_delay.text()?.strip_suffix('s')?;
            delay.parse::<f64>().ok().filter(|s| *s >= 0.0).map(Duration::from_secs_f64)
        })
    }
}
