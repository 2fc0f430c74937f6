//! Google Vertex AI: Claude (rawPredict, Anthropic's body) and Google's own models (Gemini's
//! wire), by the model's publisher; calls carry a Google access token.

use super::Provider;
use crate::adapter::credentials::{CloudAuth, CloudCredentials};
use crate::adapter::{Upstream, WireFormat};
use crate::config::{BackendConfig, BackendSpec};
use crate::tokens::TokenCounter;

#[derive(Debug)]
pub struct Vertex;

impl Provider for Vertex {
    fn wire(&self, backend: &BackendConfig) -> WireFormat {
        if backend.speaks_claude() {
            WireFormat::VertexClaude
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
