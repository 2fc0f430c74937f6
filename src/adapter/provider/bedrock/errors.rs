//! Amazon Bedrock's errors, as both of its wires meet them: Claude through InvokeModel (its
//! host, `provider::bedrock`) and its other models through Converse ([`crate::adapter::wire::converse`]). A
//! request is signed with SigV4 for the backend's region, or carries a Bedrock API key as a
//! bearer token.
//!
//! Errors are classified by the exception's name (`x-amzn-errortype`, or an in-stream
//! exception's `:exception-type`), not by status alone.

use http::HeaderMap;
use serde_json::Value;

use crate::adapter::error::parse_retry_after;
use crate::canonical::{ErrorClass, UpstreamError};

/// SigV4's name for the Bedrock runtime.
pub const SIGNING_NAME: &str = "bedrock";

/// Classify a non-2xx answer by `x-amzn-errortype` (its name before any `:`), with the body's
/// `message` (or `Message`).
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let kind = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(':').next().unwrap_or(v).trim())
        .unwrap_or("");
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|b| b.get("message").or(b.get("Message")))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| crate::adapter::transport::http::excerpt(body));
    let class = class_of(kind, &message).unwrap_or(ErrorClass::from_status(status));
    UpstreamError::new(class, Some(status), message).with_retry_after(parse_retry_after(headers))
}

/// The error an exception inside a stream ends it with (its type is lowerCamel there).
pub(in crate::adapter) fn exception(kind: &str, message: &str) -> UpstreamError {
    let class = class_of(kind, message).unwrap_or(ErrorClass::ServerError);
    UpstreamError::new(class, None, format!("{kind}: {message}"))
}

/// The class of a Bedrock exception, by name (either case of its first letter).
fn class_of(kind: &str, message: &str) -> Option<ErrorClass> {
    let named = |name: &str| kind.eq_ignore_ascii_case(name);
    Some(if named("ThrottlingException") {
        ErrorClass::RateLimited
    } else if named("ModelNotReadyException") || named("ServiceUnavailableException") {
        ErrorClass::Overloaded
    } else if named("InternalServerException")
        || named("ModelErrorException")
        || named("ModelStreamErrorException")
    {
        ErrorClass::ServerError
    } else if named("ModelTimeoutException") {
        ErrorClass::Timeout
    } else if named("AccessDeniedException")
        || named("UnrecognizedClientException")
        || named("InvalidSignatureException")
        || named("IncompleteSignatureException")
        || named("ExpiredTokenException")
    {
        ErrorClass::Auth
    } else if named("ValidationException") {
        let message = message.to_ascii_lowercase();
        if message.contains("too long")
            || message.contains("context window")
            || message.contains("too many input tokens")
        {
            ErrorClass::ContextLength
        } else {
            ErrorClass::InvalidRequest
        }
    } else if named("ServiceQuotaExceededException") || named("ResourceNotFoundException") {
        // A quota that a wait does not lift (ask AWS for more), a model not in this region.
        ErrorClass::InvalidRequest
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classified(status: u16, kind: &str, body: &str) -> UpstreamError {
        let mut headers = HeaderMap::new();
        headers.insert("x-amzn-errortype", kind.parse().unwrap());
        classify(status, &headers, body)
    }

    #[test]
    fn errors_are_classified_by_name_not_by_status_alone() {
        let throttled = classified(
            429,
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            r#"{"message":"Too many requests, please wait before trying again."}"#,
        );
        assert_eq!(
            (throttled.class, throttled.message.as_str()),
            (ErrorClass::RateLimited, "Too many requests, please wait before trying again.")
        );
        assert_eq!(classified(429, "ModelNotReadyException", "{}").class, ErrorClass::Overloaded);
        assert_eq!(
            classified(400, "ServiceQuotaExceededException", r#"{"Message":"quota"}"#).class,
            ErrorClass::InvalidRequest
        );
        assert_eq!(
            classified(400, "ValidationException", r#"{"message":"prompt is too long: 300000 tokens"}"#)
                .class,
            ErrorClass::ContextLength
        );
        let invalid = classified(
            400,
            "ValidationException",
            r#"{"message":"messages.1.content.0: Invalid `signature` in `thinking` block"}"#,
        );
        assert_eq!(invalid.class, ErrorClass::InvalidRequest);
        assert!(!invalid.class.may_fail_over(), "a bad signature is not a reason to try elsewhere");
        assert_eq!(classified(403, "AccessDeniedException", "{}").class, ErrorClass::Auth);
        assert_eq!(classified(408, "ModelTimeoutException", "{}").class, ErrorClass::Timeout);
        assert_eq!(classified(424, "ModelErrorException", "{}").class, ErrorClass::ServerError);
        assert_eq!(classify(503, &HeaderMap::new(), "no body").class, ErrorClass::from_status(503));
        assert_eq!(exception("throttlingException", "slow down").class, ErrorClass::RateLimited);
        assert_eq!(exception("modelStreamErrorException", "x").class, ErrorClass::ServerError);
        assert_eq!(exception("validationException", "x").class, ErrorClass::InvalidRequest);
    }
}
