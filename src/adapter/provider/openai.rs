//! OpenAI's API, and any other server that speaks its wire (`openai_compatible`).

use super::Provider;
use crate::adapter::WireFormat;
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

/// OpenAI itself: it also takes Responses requests as the client wrote them.
pub struct OpenAi;

impl Provider for OpenAi {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
    }

    fn serves_responses(&self) -> bool {
        true
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
pub struct Compatible;

impl Provider for Compatible {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
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
