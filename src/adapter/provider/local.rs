//! The fleet's own engines (vLLM, SGLang, llama.cpp, TensorRT-LLM, TGI): OpenAI's wire.

use super::Provider;
use crate::adapter::WireFormat;
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

pub struct Local;

impl Provider for Local {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
    }

    fn system(&self) -> &'static str {
        "local"
    }

    fn counter(&self, _: &BackendConfig) -> TokenCounter {
        TokenCounter::LlamaEstimate
    }

    fn name(&self) -> &'static str {
        "another server"
    }
}
