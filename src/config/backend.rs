//! What a backend is: a vLLM pool or a hosted API, its wire format, price, capacity, pins,
//! discovery, quota and tokenizer. Types only; checks live in `validate`.

use rust_decimal::Decimal;
use serde::Deserialize;

use super::yes;

/// The wire format and nature of a backend.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A pool of self-hosted vLLM nodes (OpenAI-compatible wire format).
    Vllm,
    Openai,
    Anthropic,
    Gemini,
    /// Any other OpenAI-compatible endpoint, treated as hosted.
    OpenaiCompatible,
}

impl BackendKind {
    /// Self-hosted GPUs (the fleet) rather than a hosted API.
    pub fn is_local(self) -> bool {
        self == BackendKind::Vllm
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Vllm => "vllm",
            BackendKind::Openai => "openai",
            BackendKind::Anthropic => "anthropic",
            BackendKind::Gemini => "gemini",
            BackendKind::OpenaiCompatible => "openai_compatible",
        }
    }

    /// The public API address used when `base_url` is not given.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            BackendKind::Openai => Some("https://api.openai.com/v1"),
            BackendKind::Anthropic => Some("https://api.anthropic.com"),
            BackendKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            BackendKind::Vllm | BackendKind::OpenaiCompatible => None,
        }
    }
}

/// Prices per million tokens, in US dollars.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: Decimal,
    /// Defaults to `input_per_mtok` when the provider has no cache discount.
    #[serde(default)]
    pub cached_input_per_mtok: Option<Decimal>,
    pub output_per_mtok: Decimal,
}

/// One backend: a vLLM pool or a hosted API with one model.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    pub name: String,
    pub kind: BackendKind,
    /// Node addresses of a vLLM pool (or of a multi-node OpenAI-compatible backend), without `/v1`.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// API base URL of a hosted backend; defaults to the provider's public API.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the environment variable that holds the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    pub model: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub price: Option<Price>,
    /// Most requests the router keeps in flight on one node (or endpoint); beyond it the node
    /// counts as full and the request moves on. Unset: no limit.
    #[serde(default)]
    pub max_inflight_per_node: Option<u32>,
    /// Ask the upstream for a streamed answer even when the client did not (default true), so
    /// that the first-token deadline and failover work the same for both.
    #[serde(default = "yes")]
    pub stream_upstream: bool,
    /// vLLM pools: port of the NVML agent beside each node (`spillway agent`), if one runs.
    #[serde(default)]
    pub agent_port: Option<u16>,
    /// vLLM pools: where the agent listens: on the node's own address (`pod`, a sidecar; the
    /// default) or on the address of the machine it runs on (`host`, a DaemonSet with a
    /// `hostPort`; needs discovery by pods).
    #[serde(default)]
    pub agent_address: AgentAddress,
    /// vLLM pools: share of capacity kept free in normal operation, released when a hosted
    /// backend fails so its traffic can come home.
    #[serde(default = "default_reserve")]
    pub reserve: f64,
    /// vLLM pools: sequences one node runs at once (vLLM's `--max-num-seqs`), its capacity.
    #[serde(default = "default_max_running")]
    pub max_running: u32,
    /// vLLM pools: what every node must report; a node that differs is quarantined.
    #[serde(default)]
    pub pin: Option<Pin>,
    /// vLLM pools: find nodes in Kubernetes instead of (or besides) `endpoints`.
    #[serde(default)]
    pub discovery: Option<Discovery>,
    /// Hosted backends: per-minute limits, counted with this backend's tokenizer.
    #[serde(default)]
    pub quota: Option<Quota>,
    /// How this backend's tokens are counted (quotas, capacity plan).
    #[serde(default)]
    pub tokenizer: Option<Tokenizer>,
    /// vLLM pools: GPUs per node, for GPU-hour costing (default 1).
    #[serde(default = "default_gpu_count")]
    pub gpu_count: u32,
    /// vLLM pools: price of one GPU hour in US dollars. A pod's `spillway.dev/gpu-hourly-usd`
    /// annotation overrides it for that node. Unset and unannotated: the node is unpriced.
    #[serde(default)]
    pub gpu_hourly_usd: Option<Decimal>,
}

fn default_gpu_count() -> u32 {
    1
}

fn default_reserve() -> f64 {
    0.2
}

fn default_max_running() -> u32 {
    256
}

/// Where a pool's NVML agent listens.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum AgentAddress {
    /// Beside vLLM in the same pod (or at the endpoint's host for static endpoints).
    #[default]
    Pod,
    /// On the Kubernetes node's IP (`status.hostIP`).
    Host,
}

/// Pinned metadata of a vLLM pool. Unset fields are not checked.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// Weights digest (`spillway.dev/weights-digest`), e.g. `sha256:…`.
    #[serde(default)]
    pub weights: Option<String>,
    /// Quantisation (`spillway.dev/quantization`, or the KV `cache_dtype`), e.g. `fp8`.
    #[serde(default)]
    pub quantization: Option<String>,
    /// Serving engine version (`spillway.dev/engine-version`, or vLLM's `/version`).
    #[serde(default)]
    pub engine: Option<String>,
}

/// Where a pool's nodes come from besides `endpoints`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Discovery {
    pub kubernetes: KubernetesDiscovery,
}

/// Ready pods matching a label selector in a namespace.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesDiscovery {
    pub namespace: String,
    /// Label selector, e.g. `app=vllm,pool=llama-8b`.
    pub selector: String,
    /// Port of vLLM's HTTP server on each pod.
    #[serde(default = "default_vllm_port")]
    pub port: u16,
    /// Watch `pods` (default) or `endpointslices`.
    #[serde(default)]
    pub resource: KubeResource,
}

fn default_vllm_port() -> u16 {
    8000
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum KubeResource {
    #[default]
    Pods,
    Endpointslices,
}

/// Per-minute limits of a hosted backend.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Requests per minute.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens (input + output cap) per minute, in this backend's tokens.
    #[serde(default)]
    pub tpm: Option<u64>,
}

/// A backend's token counter.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// OpenAI's o200k_base (GPT-4o and later), exact.
    O200kBase,
    /// OpenAI's cl100k_base (GPT-4, GPT-3.5), exact.
    Cl100kBase,
    /// Claude models: calibrated estimate (no public tokenizer).
    ClaudeEstimate,
    /// Gemini models: calibrated estimate.
    GeminiEstimate,
    /// Llama 3 family (vLLM pools): calibrated estimate.
    LlamaEstimate,
}
