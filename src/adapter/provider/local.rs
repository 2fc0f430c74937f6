//! The fleet's own engines (vLLM, SGLang, llama.cpp, TensorRT-LLM, TGI): OpenAI's wire.

use super::Provider;
use crate::adapter::WireFormat;
use crate::config::{BackendConfig, BackendSpec};
use crate::tokens::TokenCounter;

#[derive(Debug)]
pub struct Local;

impl Provider for Local {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::OpenAi
    }

    /// The nodes are listed as bare addresses; their OpenAI API lives under `/v1`.
    fn nodes(&self, backend: &BackendConfig) -> Vec<(String, String)> {
        let BackendSpec::Local(pool) = &backend.spec else { return Vec::new() };
        pool.endpoints
            .iter()
            .map(|e| e.trim_end_matches('/'))
            .map(|e| (e.to_string(), format!("{e}/v1")))
            .collect()
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
