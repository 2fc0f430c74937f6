//! Azure OpenAI: OpenAI's wire at a resource's own address, the key sent as `api-key`, or an
//! Entra token when there is no key.

use super::Provider;
use crate::adapter::credentials::{CloudAuth, CloudCredentials};
use crate::adapter::{KeyHeader, Upstream, WireFormat};
use crate::config::{BackendConfig, BackendSpec};
use crate::tokens::TokenCounter;

#[derive(Debug)]
pub struct Azure;

impl Provider for Azure {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
    }

    /// Calls go below the deployment's address (or the v1 API's) at the resource's origin.
    fn nodes(&self, backend: &BackendConfig) -> Vec<(String, String)> {
        let BackendSpec::AzureOpenai(a) = &backend.spec else { return Vec::new() };
        match (&a.hosted.base_url, a.calls_base()) {
            (Some(origin), Some(calls)) => vec![(origin.trim_end_matches('/').to_string(), calls)],
            _ => Vec::new(),
        }
    }

    /// The key goes in `api-key`, every URL carries the `api-version` written, and without a
    /// key an Entra token signs the call.
    fn upstream(&self, backend: &BackendConfig, to: Upstream, clouds: &CloudCredentials) -> Upstream {
        let BackendSpec::AzureOpenai(a) = &backend.spec else { return to };
        Upstream {
            key_header: KeyHeader::ApiKey,
            query: a.query(),
            cloud: Some(CloudAuth::Azure(clouds.azure.clone())),
            ..to
        }
    }

    fn system(&self) -> &'static str {
        "azure.ai.openai"
    }

    fn counter(&self, _: &BackendConfig) -> TokenCounter {
        TokenCounter::O200kBase
    }

    fn name(&self) -> &'static str {
        "Azure OpenAI"
    }
}
