//! OpenAI's API, and any other server that speaks its wire (`openai_compatible`).

use super::BatchWire;
use super::{Owned, Provider};
use crate::adapter::credentials::CloudCredentials;
use crate::adapter::{Upstream, WireFormat};
use crate::config::{BackendConfig, BackendSpec};
use crate::tokens::TokenCounter;

/// OpenAI itself: it also takes Responses requests as the client wrote them.
#[derive(Debug)]
pub struct OpenAi;

impl Provider for OpenAi {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
    }

    fn upstream(&self, _: &BackendConfig, to: Upstream, _: &CloudCredentials) -> Upstream {
        Upstream { serves_responses: true, ..to }
    }

    fn takes(&self, owned: Owned) -> bool {
        owned == Owned::OpenAis
    }

    fn batch(&self) -> Option<BatchWire> {
        Some(BatchWire::OpenAi)
    }

    fn system(&self) -> &'static str {
        "openai"
    }

    fn counter(&self, _: &BackendConfig) -> TokenCounter {
        TokenCounter::O200kBase
    }

    fn name(&self) -> &'static str {
        "OpenAI"
    }
}

/// Another OpenAI-compatible endpoint, treated as hosted.
#[derive(Debug)]
pub struct Compatible;

impl Provider for Compatible {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
    }

    /// Its `endpoints` when it lists several servers (each a base URL), else its `base_url`.
    fn nodes(&self, backend: &BackendConfig) -> Vec<(String, String)> {
        match &backend.spec {
            BackendSpec::OpenaiCompatible(c) if !c.endpoints.is_empty() => c
                .endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_string())
                .map(|e| (e.clone(), e))
                .collect(),
            _ => backend.base_url().map(|url| (url.clone(), url)).into_iter().collect(),
        }
    }

    fn system(&self) -> &'static str {
        "openai_compatible"
    }

    fn counter(&self, _: &BackendConfig) -> TokenCounter {
        TokenCounter::O200kBase
    }

    fn name(&self) -> &'static str {
        "another server"
    }
}
