//! Errors in Anthropic's envelope, `{"type": "error", "error": {"type", "message"}}`, with
//! Anthropic's statuses, so the `anthropic` SDK raises the exception class a client expects
//! (`RateLimitError`, `OverloadedError` on 529, …) and agents that match on the wording of
//! an upstream error find it: a refusal passed on from an upstream keeps the upstream's own
//! message. The envelope has no `param`, so the field a refusal names leads the message.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::api::error::{ApiError, ErrorCode};
use crate::canonical::ErrorClass;

/// Anthropic's status for overload, which its SDKs retry with backoff.
const OVERLOADED: u16 = 529;

/// Anthropic's status and error `type` for an error.
pub(crate) fn status_and_type(e: &ApiError) -> (StatusCode, &'static str) {
    use ErrorCode::*;
    let overloaded = (StatusCode::from_u16(OVERLOADED).expect("529 is a status"), "overloaded_error");
    match e.code {
        Shed
        | RouterOverloaded
        | AllBackendsFailed
        | RetryBudgetExhausted
        | LimitStateUnavailable { .. }
        | Upstream(ErrorClass::Overloaded) => overloaded,
        UpstreamRateLimited | Upstream(ErrorClass::RateLimited) => {
            (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
        }
        Timeout | Upstream(ErrorClass::Timeout) => (StatusCode::GATEWAY_TIMEOUT, "timeout_error"),
        RequestTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "request_too_large"),
        OverLimit(_, limit) if limit.is_budget() => (StatusCode::PAYMENT_REQUIRED, "billing_error"),
        _ => {
            let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            match e.status {
                401 => (status, "authentication_error"),
                403 => (status, "permission_error"),
                404 => (status, "not_found_error"),
                413 => (status, "request_too_large"),
                429 => (status, "rate_limit_error"),
                400..=499 => (status, "invalid_request_error"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "api_error"),
            }
        }
    }
}

/// The message as an Anthropic client reads it: the upstream's own words for an upstream's
/// refusal, the field first for a refusal of ours.
fn message(e: &ApiError) -> String {
    if let Some(own) = &e.upstream_message {
        return own.clone();
    }
    match &e.param {
        Some(param) if !e.message.contains(param.as_str()) => format!("{param}: {}", e.message),
        _ => e.message.clone(),
    }
}

/// The envelope alone, as sent in-band (`event: error`) on a stream that already started.
/// A refusal by a key's limit or budget also names it in `code` (Anthropic's envelope has no
/// such member; its SDKs ignore it).
pub fn body(e: &ApiError) -> Value {
    let mut body = json!({"type": "error", "error": {"type": status_and_type(e).1, "message": message(e)}});
    if let (ErrorCode::OverLimit(..), Some(code)) = (e.code, e.code.as_str()) {
        body["error"]["code"] = json!(code);
    }
    body
}

/// The whole response, with `Retry-After` when known.
pub fn response(e: &ApiError) -> Response {
    e.log();
    let mut response = (status_and_type(e).0, axum::Json(body(e))).into_response();
    if let Some(secs) = e.retry_after_secs {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::UpstreamError;

    #[test]
    fn statuses_and_types_are_anthropics() {
        let cases = [
            (
                ApiError::new(ErrorCode::MissingField, "`max_tokens` is required").param("max_tokens"),
                400,
                "invalid_request_error",
            ),
            (ApiError::new(ErrorCode::InvalidApiKey, "invalid API key"), 401, "authentication_error"),
            (ApiError::new(ErrorCode::PermissionDenied, "no"), 403, "permission_error"),
            (ApiError::new(ErrorCode::ModelNotFound, "no task"), 404, "not_found_error"),
            (ApiError::new(ErrorCode::RequestTooLarge, "big"), 413, "request_too_large"),
            (ApiError::new(ErrorCode::UpstreamRateLimited, "slow down"), 429, "rate_limit_error"),
            (ApiError::new(ErrorCode::Shed, "full"), 529, "overloaded_error"),
            (ApiError::new(ErrorCode::AllBackendsFailed, "all failed"), 529, "overloaded_error"),
            (ApiError::new(ErrorCode::NoEligibleBackend, "policy"), 500, "api_error"),
            (ApiError::new(ErrorCode::Upstream(ErrorClass::ServerError), "boom"), 500, "api_error"),
        ];
        for (error, status, kind) in cases {
            assert_eq!(status_and_type(&error), (StatusCode::from_u16(status).unwrap(), kind), "{error:?}");
            assert_eq!(body(&error)["type"], "error");
        }
        let missing = ApiError::new(ErrorCode::MissingField, "`max_tokens` is required").param("max_tokens");
        assert_eq!(body(&missing)["error"]["message"], "`max_tokens` is required");
        let named = ApiError::new(ErrorCode::InvalidValue, "must be at least 1").param("max_tokens");
        assert_eq!(body(&named)["error"]["message"], "max_tokens: must be at least 1");
    }

    #[test]
    fn an_upstream_refusal_keeps_its_own_words() {
        let refusal = UpstreamError::new(
            ErrorClass::ContextLength,
            Some(400),
            "prompt is too long: 210000 tokens > 200000 maximum",
        );
        let error = ApiError::from_upstream("anthropic", &refusal);
        assert_eq!(status_and_type(&error), (StatusCode::BAD_REQUEST, "invalid_request_error"));
        assert_eq!(body(&error)["error"]["message"], "prompt is too long: 210000 tokens > 200000 maximum");
        let response = response(&ApiError::new(ErrorCode::Shed, "full").retry_after(3));
        assert_eq!(response.status().as_u16(), 529);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    }
}
