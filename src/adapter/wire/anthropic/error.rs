//! How Claude's hosts report errors: `{"type": "error", "error": {"type", "message"}}`, in an
//! answer's body or as a stream's `error` event, classified by the error's type.

use reqwest::header::HeaderMap;
use serde::Deserialize;

use crate::adapter::error::parse_retry_after;
use crate::adapter::transport::http;
use crate::adapter::wire::{ObjectOr, Scalar};
use crate::canonical::{ErrorClass, UpstreamError};

#[derive(Debug, Default, Deserialize)]
pub(in crate::adapter) struct ErrorObject {
    #[serde(default, rename = "type")]
    kind: Scalar,
    #[serde(default)]
    message: Scalar,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: Option<ObjectOr<ErrorObject>>,
}

/// Classify a non-2xx answer.
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let retry_after = parse_retry_after(headers);
    let parsed: Option<ErrorBody> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|b| b.error.as_ref()).and_then(ObjectOr::object);
    let class = error.map(|e| e.class(Some(status))).unwrap_or(ErrorClass::from_status(status));
    let message =
        error.and_then(|e| e.message.text()).map(str::to_string).unwrap_or_else(|| http::excerpt(body));
    UpstreamError::new(class, Some(status), message).with_retry_after(retry_after)
}

impl ErrorObject {
    fn class(&self, status: Option<u16>) -> ErrorClass {
        match self.kind.text().unwrap_or("") {
            "overloaded_error" => ErrorClass::Overloaded,
            "rate_limit_error" => ErrorClass::RateLimited,
            // Out of credit: this backend cannot serve now, like an exhausted quota.
            "billing_error" => ErrorClass::RateLimited,
            // An unavailable service (503) is overload whatever the body calls it.
            "api_error" if status == Some(503) => ErrorClass::Overloaded,
            "api_error" => ErrorClass::ServerError,
            "timeout_error" => ErrorClass::Timeout,
            "authentication_error" | "permission_error" => ErrorClass::Auth,
            "invalid_request_error" | "request_too_large" => {
                let message = self.message.text().unwrap_or("").to_ascii_lowercase();
                if message.contains("prompt is too long")
                    || message.contains("context limit")
                    || message.contains("context window")
                {
                    ErrorClass::ContextLength
                } else {
                    ErrorClass::InvalidRequest
                }
            }
            "not_found_error" => ErrorClass::InvalidRequest,
            _ => status.map(ErrorClass::from_status).unwrap_or(ErrorClass::ServerError),
        }
    }

    /// This error, arrived inside a 2xx stream or body.
    pub(in crate::adapter) fn in_band(&self) -> UpstreamError {
        UpstreamError::new(self.class(None), None, self.message.text().unwrap_or("upstream error"))
    }
}
