//! Amazon Bedrock: Claude in Anthropic's Messages body (InvokeModel), its other models through
//! Converse; calls signed with SigV4.

use super::{Provider, Signer};
use crate::adapter::WireFormat;
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

pub struct Bedrock;

impl Provider for Bedrock {
    fn wire(&self, backend: &BackendConfig) -> WireFormat {
        if backend.speaks_claude() {
            WireFormat::Bedrock
        } else {
            WireFormat::BedrockConverse
        }
    }

    fn signer(&self) -> Signer {
        Signer::Aws
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
