//! Google's Gemini API.

use super::Provider;
use crate::adapter::WireFormat;
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

#[derive(Debug)]
pub struct Gemini;

impl Provider for Gemini {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::Gemini
    }

    fn system(&self) -> &'static str {
        "gcp.gemini"
    }

    fn counter(&self, _: &BackendConfig) -> TokenCounter {
        TokenCounter::GeminiEstimate
    }

    fn name(&self) -> &'static str {
        "Gemini"
    }
}
