//! Anthropic's Messages API.

use super::BatchWire;
use super::{Owned, Provider};
use crate::adapter::WireFormat;
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

#[derive(Debug)]
pub struct Anthropic;

impl Provider for Anthropic {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::Anthropic
    }

    fn takes(&self, owned: Owned) -> bool {
        owned == Owned::Anthropics
    }

    fn batch(&self) -> Option<BatchWire> {
        Some(BatchWire::Anthropic)
    }

    fn system(&self) -> &'static str {
        "anthropic"
    }

    fn counter(&self, _: &BackendConfig) -> TokenCounter {
        TokenCounter::ClaudeEstimate
    }

    fn name(&self) -> &'static str {
        "Anthropic"
    }
}
