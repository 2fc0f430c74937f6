//! Which serving engine a node runs: the name config and admin pages use, and the metric-name
//! prefixes that tell its pages apart. Vocabulary shared by config, telemetry and the simulator.

use serde::{Deserialize, Serialize};

/// A serving engine whose `/metrics` page Spillway can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Vllm,
    Sglang,
    Llamacpp,
    Trtllm,
    Tgi,
}

impl Engine {
    /// Every engine, in the order `fleet::engines::detect` tries them.
    pub const ALL: [Engine; 5] =
        [Engine::Vllm, Engine::Sglang, Engine::Llamacpp, Engine::Trtllm, Engine::Tgi];

    /// The name used in config and on admin pages.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::Llamacpp => "llamacpp",
            Engine::Trtllm => "trtllm",
            Engine::Tgi => "tgi",
        }
    }

    /// The engine of a [`Engine::name`], if it is one.
    pub(crate) fn from_name(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Metric-name prefixes that only this engine's pages carry (TensorRT-LLM: `trtllm-serve`'s
    /// own, and Triton's TensorRT-LLM backend's).
    pub fn prefixes(self) -> &'static [&'static str] {
        match self {
            Engine::Vllm => &["vllm:"],
            Engine::Sglang => &["sglang:", "sglang_"],
            Engine::Llamacpp => &["llamacpp:"],
            Engine::Trtllm => &["trtllm_", "nv_trt_llm_"],
            Engine::Tgi => &["tgi_"],
        }
    }

    /// Does the metric `name` belong to this engine's pages?
    pub fn owns(self, name: &str) -> bool {
        self.prefixes().iter().any(|p| name.starts_with(p))
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
