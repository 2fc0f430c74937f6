//! Google Vertex AI: Claude (rawPredict, Anthropic's body) and Google's own models (Gemini's
//! wire), by the model's publisher; calls carry a Google access token.
//!
//! Vertex answers errors in Google's envelope (`{"error": {"code", "message", "status"}}`, at
//! times inside an array), and Claude's own refusals either as Anthropic writes them or with
//! Anthropic's JSON as the envelope's `message`: each is read for its own words.

use http::{HeaderMap, HeaderName};
use serde_json::Value;

use super::Provider;
use crate::adapter::credentials::{CloudAuth, CloudCredentials};
use crate::adapter::transport::http::Classify;
use crate::adapter::wire::anthropic::host::cloud_betas;
use crate::adapter::wire::anthropic::{ClaudeHost, HostFields};
use crate::adapter::{Upstream, WireFormat};
use crate::canonical::UpstreamError;
use crate::config::{BackendConfig, BackendSpec};
use crate::tokens::TokenCounter;

/// The `anthropic_version` Vertex AI's rawPredict takes.
pub const VERTEX_VERSION: &str = "vertex-2023-10-16";

/// The `:rawPredict` URL of `model` (`count-tokens` for the count route) below `base`.
pub fn predict_url(base: &str, model: &str, stream: bool) -> String {
    let verb = if stream { "streamRawPredict" } else { "rawPredict" };
    format!("{}/models/{model}:{verb}", base.trim_end_matches('/'))
}

/// Classify a non-2xx answer: Anthropic's shape as Anthropic's, else Google's envelope, whose
/// `message` may hold Anthropic's error JSON.
fn classify(status: u16, headers: &HeaderMap, body: &str) -> UpstreamError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    if parsed.as_ref().and_then(|b| b.get("type")).and_then(Value::as_str) == Some("error") {
        return crate::adapter::wire::anthropic::classify(status, headers, body);
    }
    let mut error = crate::adapter::wire::gemini::classify(status, headers, body);
    let inner: Option<Value> = serde_json::from_str(&error.message).ok();
    if let Some(words) = inner.as_ref().and_then(|v| v.pointer("/error/message")).and_then(Value::as_str) {
        error.message = words.to_string();
    }
    error
}

#[derive(Debug)]
pub struct Vertex;

impl Provider for Vertex {
    fn wire(&self, backend: &BackendConfig) -> WireFormat {
        if backend.speaks_claude() {
            WireFormat::Claude(&Vertex)
        } else {
            WireFormat::Gemini
        }
    }

    /// Calls go below the model's publisher at the regional host.
    fn nodes(&self, backend: &BackendConfig) -> Vec<(String, String)> {
        let BackendSpec::Vertex(v) = &backend.spec else { return Vec::new() };
        backend
            .base_url()
            .map(|host| (host.clone(), v.calls_base(&host, &backend.model)))
            .into_iter()
            .collect()
    }

    /// A Google token (from the backend's `credentials_file`, else the default credentials)
    /// signs every call.
    fn upstream(&self, backend: &BackendConfig, to: Upstream, clouds: &CloudCredentials) -> Upstream {
        let file = match &backend.spec {
            BackendSpec::Vertex(v) => v.credentials_file.as_deref(),
            _ => None,
        };
        Upstream { cloud: Some(CloudAuth::Google(clouds.google.tokens(file))), ..to }
    }

    fn system(&self) -> &'static str {
        "gcp.vertex_ai"
    }

    fn counter(&self, backend: &BackendConfig) -> TokenCounter {
        if backend.speaks_claude() {
            TokenCounter::ClaudeEstimate
        } else {
            TokenCounter::GeminiEstimate
        }
    }

    fn name(&self) -> &'static str {
        "Vertex AI"
    }
}

/// Claude through rawPredict: Anthropic's body less `model` (the URL names it), with Vertex's
/// `anthropic_version`; the betas it takes in `anthropic-beta`.
impl ClaudeHost for Vertex {
    fn signer(&self) -> Option<&'static str> {
        Some("vertex")
    }

    fn url(&self, base: &str, model: &str, stream: bool) -> String {
        predict_url(base, model, stream)
    }

    fn headers(&self, _: &str, betas: &[&str], _: Option<&str>) -> Vec<(HeaderName, String)> {
        match betas.is_empty() {
            true => Vec::new(),
            false => vec![(HeaderName::from_static("anthropic-beta"), betas.join(","))],
        }
    }

    fn betas<'h>(&self, flags: Vec<&'h str>) -> Vec<&'h str> {
        cloud_betas(flags)
    }

    fn fields<'a>(&self, _: &'a str, stream: bool, _: &'a [&'a str]) -> HostFields<'a> {
        HostFields { stream: Some(stream), anthropic_version: Some(VERTEX_VERSION), ..HostFields::default() }
    }

    /// The count route names the model in the body.
    fn count<'a>(&self, base: &str, model: &'a str, _: &'a [&'a str]) -> Option<(String, HostFields<'a>)> {
        let url = format!("{}/models/count-tokens:rawPredict", base.trim_end_matches('/'));
        Some((
            url,
            HostFields {
                model: Some(model),
                anthropic_version: Some(VERTEX_VERSION),
                ..HostFields::default()
            },
        ))
    }

    fn classify(&self) -> Classify {
        classify
    }
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
