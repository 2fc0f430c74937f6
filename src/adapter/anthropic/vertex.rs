//! Google Vertex AI. Claude goes through `POST {base}/models/{model}:rawPredict` (or
//! `:streamRawPredict`, SSE) with Anthropic's Messages body less `model`, plus
//! `anthropic_version: "vertex-2023-10-16"` and the client's betas (those the clouds take) in
//! `anthropic-beta` ([`super::send_to`] with `Speaker::Vertex`); Gemini goes through
//! the Gemini adapter at the publisher's address. Both carry a Google OAuth token
//! ([`crate::adapter::credentials::google`]).
//!
//! Vertex answers errors in Google's envelope (`{"error": {"code", "message", "status"}}`, at
//! times inside an array), and Claude's own refusals either as Anthropic writes them or with
//! Anthropic's JSON as the envelope's `message`: each is read for its own words.

use http::HeaderMap;
use serde_json::Value;

use crate::canonical::UpstreamError;

/// The `:rawPredict` URL of `model` (`count-tokens` for the count route) below `base`.
pub fn predict_url(base: &str, model: &str, stream: bool) -> String {
    let verb = if stream { "streamRawPredict" } else { "rawPredict" };
    format!("{}/models/{model}:{verb}", base.trim_end_matches('/'))
}

/// Classify a non-2xx answer: Anthropic's shape as Anthropic's, else Google's envelope, whose
/// `message` may hold Anthropic's error JSON.
pub(in crate::adapter) fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    if parsed.as_ref().and_then(|b| b.get("type")).and_then(Value::as_str) == Some("error") {
        return super::classify(status, headers, body);
    }
    let mut error = crate::adapter::gemini::classify(status, headers, body);
    let inner: Option<Value> = serde_json::from_str(&error.message).ok();
    if let Some(words) = inner.as_ref().and_then(|v| v.pointer("/error/message")).and_then(Value::as_str) {
        error.message = words.to_string();
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::ErrorClass;

    #[test]
    fn each_shape_of_error_is_read_for_its_own_words() {
        let none = HeaderMap::new();
        let quota = r#"{"error": {"code": 429, "message": "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model", "status": "RESOURCE_EXHAUSTED"}}"#;
        let e = classify(429, &none, quota);
        assert_eq!(e.class, ErrorClass::RateLimited);
        assert!(e.message.starts_with("Quota exceeded"), "{e:?}");
        let listed = format!("[{quota}]");
        assert_eq!(classify(429, &none, &listed).class, ErrorClass::RateLimited);
        let anthropic =
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        assert_eq!(classify(529, &none, anthropic).class, ErrorClass::Overloaded);
        let wrapped = r#"{"error": {"code": 400, "message": "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens: Field required\"}}", "status": "INVALID_ARGUMENT"}}"#;
        let e = classify(400, &none, wrapped);
        assert_eq!((e.class, e.message.as_str()), (ErrorClass::InvalidRequest, "max_tokens: Field required"));
        assert_eq!(
            classify(401, &none, r#"{"error": {"code": 401, "message": "x", "status": "UNAUTHENTICATED"}}"#)
                .class,
            ErrorClass::Auth
        );
        assert_eq!(
            predict_url("https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/", "claude-sonnet-4-6", true),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-6:streamRawPredict"
        );
    }
}
