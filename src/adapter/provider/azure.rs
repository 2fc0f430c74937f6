//! Azure OpenAI: OpenAI's wire at a resource's own address, the key sent as `api-key`, or an
//! Entra token when there is no key.

use super::{Provider, Signer};
use crate::adapter::{KeyHeader, WireFormat};
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

pub struct Azure;

impl Provider for Azure {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
    }

    fn key_header(&self) -> KeyHeader {
        KeyHeader::ApiKey
    }

    fn signer(&self) -> Signer {
        Signer::Azure
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
