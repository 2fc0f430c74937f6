//! Google Vertex AI: Claude (rawPredict, Anthropic's body) and Google's own models (Gemini's
//! wire), by the model's publisher; calls carry a Google access token.

use super::{Provider, Signer};
use crate::adapter::WireFormat;
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

pub struct Vertex;

impl Provider for Vertex {
    fn wire(&self, backend: &BackendConfig) -> WireFormat {
        if backend.speaks_claude() {
            WireFormat::VertexClaude
        } else {
            WireFormat::Gemini
        }
    }

    fn signer(&self) -> Signer {
        Signer::Google
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
