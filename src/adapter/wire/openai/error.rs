//! How OpenAI-format upstreams report errors: OpenAI's `{"error": {message, type, code}}`, vLLM's
//! older top-level `{"object": "error", message, type, code}`, Azure's status written as a
//! string `code`; and an error or an abort inside a 2xx answer. Read into typed fields, each
//! kept only when it has the type the classifier reads.

use reqwest::header::HeaderMap;
use serde::Deserialize;

use crate::adapter::error::parse_retry_after;
use crate::adapter::transport::http;
use crate::adapter::wire::{ObjectOr, Scalar};
use crate::canonical::{ErrorClass, FinishReason, UpstreamError};

/// An error object's members, whatever else it holds.
#[derive(Debug, Default, Deserialize)]
pub(in crate::adapter) struct ErrorObject {
    #[serde(default)]
    message: Scalar,
    #[serde(default, rename = "type")]
    kind: Scalar,
    #[serde(default)]
    code: Scalar,
    #[serde(default)]
    status: Scalar,
}

/// An `error` member: an object, or something else (which is not an error object).
pub(in crate::adapter) type ErrorMember = ObjectOr<ErrorObject>;

/// An error body, whichever of the two shapes it has: the object under `error`, or the body.
#[derive(Debug, Deserialize)]
pub(in crate::adapter) struct ErrorBody {
    #[serde(default)]
    error: Option<ErrorMember>,
    #[serde(flatten)]
    top: ErrorObject,
}

impl ErrorBody {
    pub(in crate::adapter) fn object(&self) -> &ErrorObject {
        self.error.as_ref().and_then(ObjectOr::object).unwrap_or(&self.top)
    }
}

/// Classify a non-2xx answer.
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let retry_after = parse_retry_after(headers);
    let parsed: Option<ErrorBody> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().map(ErrorBody::object);
    let class = error.map(|e| e.class(Some(status))).unwrap_or(ErrorClass::from_status(status));
    let message =
        error.and_then(|e| e.message.text()).map(str::to_string).unwrap_or_else(|| http::excerpt(body));
    UpstreamError::new(class, Some(status), message).with_retry_after(retry_after)
}

impl ErrorObject {
    /// The class of this error; `status` is the HTTP status when there was one (a mid-stream
    /// error has none: then a numeric `code` stands in for it).
    fn class(&self, status: Option<u16>) -> ErrorClass {
        let code = self.code.text().unwrap_or("");
        let kind = self.kind.text().unwrap_or("");
        let message = self.message.text().unwrap_or("").to_ascii_lowercase();
        let status = status
            .or_else(|| self.code.number().map(|c| c as u16))
            // Azure writes the status as a string `code`.
            .or_else(|| code.parse().ok())
            .or_else(|| self.status.number().map(|c| c as u16));
        if code == "context_length_exceeded"
            || (status.is_none_or(|s| (400..500).contains(&s))
                && (message.contains("maximum context length")
                    || message.contains("context length exceeded")
                    || message.contains("context window")))
        {
            return ErrorClass::ContextLength;
        }
        if matches!(code, "content_filter" | "content_policy_violation")
            || matches!(kind, "content_filter" | "content_policy_violation")
        {
            return ErrorClass::ContentPolicy;
        }
        match status {
            Some(status) => ErrorClass::from_status(status),
            None => match (kind, code) {
                ("insufficient_quota" | "rate_limit_error" | "tokens" | "requests", _)
                | (_, "rate_limit_exceeded" | "insufficient_quota") => ErrorClass::RateLimited,
                ("invalid_request_error" | "BadRequestError", _) => ErrorClass::InvalidRequest,
                ("authentication_error" | "permission_error", _) => ErrorClass::Auth,
                _ => ErrorClass::ServerError,
            },
        }
    }

    /// Its `code`, when it is text.
    pub(in crate::adapter) fn code(&self) -> Option<&str> {
        self.code.text()
    }

    /// Its `message`, when it is text.
    pub(in crate::adapter) fn message(&self) -> Option<&str> {
        self.message.text()
    }

    /// This error, arrived inside a 2xx stream or body.
    pub(in crate::adapter) fn in_band(&self) -> UpstreamError {
        let message = self.message.text().unwrap_or("upstream error");
        UpstreamError::new(self.class(None), None, message)
    }
}

pub(in crate::adapter) fn finish_reason(reason: &str) -> Result<FinishReason, UpstreamError> {
    Ok(match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        // vLLM reports an engine-side abort as a finish reason: the answer is not complete.
        "abort" | "error" => {
            return Err(UpstreamError::new(
                ErrorClass::StreamBroken,
                None,
                format!("upstream ended the answer with finish_reason {reason:?}"),
            ))
        }
        _ => FinishReason::Stop,
    })
}
