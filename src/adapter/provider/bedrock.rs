//! Amazon Bedrock: Claude in Anthropic's Messages body (InvokeModel), its other models through
//! Converse; calls signed with SigV4.

use super::Provider;
use crate::adapter::credentials::{CloudAuth, CloudCredentials};
use crate::adapter::{Upstream, WireFormat};
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

#[derive(Debug)]
pub struct Bedrock;

impl Provider for Bedrock {
    fn wire(&self, backend: &BackendConfig) -> WireFormat {
        if backend.speaks_claude() {
            WireFormat::Bedrock
        } else {
            WireFormat::BedrockConverse
        }
    }

    /// SigV4 for the backend's region signs a call without a Bedrock API key.
    fn upstream(&self, backend: &BackendConfig, to: Upstream, clouds: &CloudCredentials) -> Upstream {
        let cloud = CloudAuth::Aws {
            region: backend.region.clone().unwrap_or_default(),
            service: crate::adapter::bedrock::SIGNING_NAME,
            credentials: clouds.aws.clone(),
        };
        Upstream { cloud: Some(cloud), ..to }
    }

    fn system(&self) -> &'static str {
        "aws.bedrock"
    }

    fn counter(&self, backend: &BackendConfig) -> TokenCounter {
        if backend.speaks_claude() {
            TokenCounter::ClaudeEstimate
        } else {
            TokenCounter::LlamaEstimate
        }
    }

    fn name(&self) -> &'static str {
        "Amazon Bedrock"
    }
}
