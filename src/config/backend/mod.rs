//! What a backend is: a vLLM pool or a hosted API, its wire format, price, capacity, pins,
//! discovery, quota, tokenizer and capabilities. Types only; checks live in `validate`, and
//! `load` reads the one file a backend may name (`tokenizer_file`).

use std::path::PathBuf;
use std::sync::Arc;

use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::yes;

/// The wire format and nature of a backend.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A pool of self-hosted vLLM nodes (OpenAI-compatible wire format).
    Vllm,
    /// OpenAI's API.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API.
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
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input (prompt) tokens.
    #[schemars(with = "crate::config::schema::DecimalSchema")]
    pub input_per_mtok: Decimal,
    /// Defaults to `input_per_mtok` when the provider has no cache discount.
    #[serde(default)]
    #[schemars(with = "Option<crate::config::schema::DecimalSchema>")]
    pub cached_input_per_mtok: Option<Decimal>,
    /// Output tokens.
    #[schemars(with = "crate::config::schema::DecimalSchema")]
    pub output_per_mtok: Decimal,
}

/// One backend: a vLLM pool or a hosted API with one model.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Unique; tasks refer to it.
    pub name: String,
    /// What it is: a vLLM pool or a hosted API, and its wire format.
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
    /// The provider's model name.
    pub model: String,
    /// Where the backend runs, for `policy`.
    #[serde(default)]
    pub region: Option<String>,
    /// Prices per million tokens (cost strategy, ledger, break-even).
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
    /// How this backend's tokens are counted (quotas, capacity plan, context check).
    #[serde(default)]
    pub tokenizer: Option<Tokenizer>,
    /// A HuggingFace `tokenizer.json` of this backend's model, for exact counts (self-hosted
    /// models). Relative paths are read from the config file's directory. Loaded once when
    /// the config is loaded (never downloaded); it replaces `tokenizer`.
    #[serde(default)]
    pub tokenizer_file: Option<PathBuf>,
    /// The tokenizer loaded from `tokenizer_file` (set by `load`).
    #[serde(skip)]
    pub tokenizer_loaded: Option<Arc<crate::tokens::FileTokenizer>>,
    /// What requests this backend can serve; each unset key takes the kind's default.
    #[serde(default)]
    pub capabilities: CapabilitiesConfig,
    /// vLLM pools: GPUs per node, for GPU-hour costing (default 1).
    #[serde(default = "default_gpu_count")]
    pub gpu_count: u32,
    /// vLLM pools: price of one GPU hour in US dollars. A pod's `spillway.dev/gpu-hourly-usd`
    /// annotation overrides it for that node. Unset and unannotated: the node is unpriced.
    #[serde(default)]
    #[schemars(with = "Option<crate::config::schema::DecimalSchema>")]
    pub gpu_hourly_usd: Option<Decimal>,
    /// Hosted backends: a version tag for the model behind `model` (e.g. a dated snapshot).
    /// With the model name it is the fingerprint the evaluation gate passes or fails; change
    /// it when the provider changes the model, and the gate runs again.
    #[serde(default)]
    pub version: Option<String>,
}

/// `capabilities:` as written; each unset key takes its kind's default.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct CapabilitiesConfig {
    /// Function calling (`tools` in the request).
    #[serde(default)]
    pub tools: Option<bool>,
    /// Image inputs (`image_url` content parts).
    #[serde(default)]
    pub vision: Option<bool>,
    /// Constrained JSON output for `response_format: json_schema`.
    #[serde(default)]
    pub json_schema: Option<bool>,
    /// The model's context window in its own tokens: prompt + `max_tokens` must fit.
    #[serde(default)]
    pub max_context: Option<u32>,
}

/// What a backend can serve, with the kind's defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub tools: bool,
    pub vision: bool,
    pub json_schema: bool,
    /// `None`: not known, not checked (the upstream's own refusal still says so).
    pub max_context: Option<u32>,
}

impl Capabilities {
    /// Defaults by kind. Hosted APIs: tools, vision and JSON schemas, with the context window
    /// of the provider's smallest current flagship family (OpenAI 128,000 as GPT-4o; Anthropic
    /// 200,000; Gemini 1,048,576); set `max_context` for the model you run. vLLM pools:
    /// JSON schemas (guided decoding) only, no known window: vLLM serves tools only with
    /// `--enable-auto-tool-choice` and images only for multimodal models, so say so in the
    /// config. Other OpenAI-compatible endpoints: tools and JSON schemas, no vision.
    pub fn default_for(kind: BackendKind) -> Capabilities {
        let (tools, vision, json_schema, max_context) = match kind {
            BackendKind::Openai => (true, true, true, Some(128_000)),
            BackendKind::Anthropic => (true, true, true, Some(200_000)),
            BackendKind::Gemini => (true, true, true, Some(1_048_576)),
            BackendKind::Vllm => (false, false, true, None),
            BackendKind::OpenaiCompatible => (true, false, true, None),
        };
        Capabilities { tools, vision, json_schema, max_context }
    }
}

impl BackendConfig {
    /// This backend's capabilities: what the config says, else its kind's default.
    pub fn capabilities(&self) -> Capabilities {
        let d = Capabilities::default_for(self.kind);
        let c = &self.capabilities;
        Capabilities {
            tools: c.tools.unwrap_or(d.tools),
            vision: c.vision.unwrap_or(d.vision),
            json_schema: c.json_schema.unwrap_or(d.json_schema),
            max_context: c.max_context.or(d.max_context),
        }
    }
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
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum AgentAddress {
    /// Beside vLLM in the same pod (or at the endpoint's host for static endpoints).
    #[default]
    Pod,
    /// On the Kubernetes node's IP (`status.hostIP`).
    Host,
}

/// Pinned metadata of a vLLM pool. Unset fields are not checked.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
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
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Discovery {
    /// Ready pods matching a label selector in a namespace.
    pub kubernetes: KubernetesDiscovery,
}

/// Ready pods matching a label selector in a namespace.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesDiscovery {
    /// The namespace watched.
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

/// What Kubernetes discovery watches.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum KubeResource {
    /// Ready pods matching the selector.
    #[default]
    Pods,
    /// EndpointSlices matching the selector (their ready endpoints).
    Endpointslices,
}

/// Per-minute limits of a hosted backend.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
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
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_file, parse};

    const TASKS: &str = "tasks: [{name: t, backends: [b], slo: {ttft_ms: 500}}]\n";

    fn backend(yaml: &str) -> Result<BackendConfig, Vec<crate::config::Problem>> {
        parse(&format!("backends:\n  - {yaml}\n{TASKS}")).map(|c| c.backends[0].clone())
    }

    #[test]
    fn capabilities_default_by_kind_and_the_config_overrides_each_key() {
        let b = backend("{name: b, kind: anthropic, model: m}").unwrap();
        assert_eq!(
            b.capabilities(),
            Capabilities { tools: true, vision: true, json_schema: true, max_context: Some(200_000) }
        );
        let b = backend("{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m}").unwrap();
        assert_eq!(
            b.capabilities(),
            Capabilities { tools: false, vision: false, json_schema: true, max_context: None }
        );
        let b = backend(
            "{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m, \
             capabilities: {tools: true, max_context: 8192}}",
        )
        .unwrap();
        assert_eq!(
            b.capabilities(),
            Capabilities { tools: true, vision: false, json_schema: true, max_context: Some(8192) }
        );
        let b = backend("{name: b, kind: openai, model: m, capabilities: {vision: false}}").unwrap();
        assert_eq!(b.capabilities().max_context, Some(128_000));
        assert!(!b.capabilities().vision && b.capabilities().tools);
    }

    #[test]
    fn unknown_capabilities_and_bad_values_are_named() {
        let problems =
            backend("{name: b, kind: openai, model: m, capabilities: {streaming: true}}").unwrap_err();
        assert_eq!(problems[0].path, "backends[0].capabilities.streaming", "{problems:?}");
        assert!(problems[0].message.contains("unknown field `streaming`"), "{problems:?}");
        assert!(problems[0].message.contains("max_context"), "{problems:?}");
        let problems =
            backend("{name: b, kind: openai, model: m, capabilities: {max_context: 0}}").unwrap_err();
        assert_eq!(problems[0].path, "backends[0].capabilities.max_context", "{problems:?}");
        let problems =
            backend("{name: b, kind: openai, model: m, capabilities: {tools: maybe}}").unwrap_err();
        assert_eq!(problems[0].path, "backends[0].capabilities.tools", "{problems:?}");
    }

    #[test]
    fn a_tokenizer_file_is_read_relative_to_the_config_file_and_counts_exactly() {
        let dir = std::env::temp_dir().join(format!("spillway-tok-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(dir.join("models")).unwrap();
        let fixture =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/tokenizer.json");
        std::fs::copy(&fixture, dir.join("models/tokenizer.json")).unwrap();
        let yaml = format!(
            "backends:\n  - {{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m, \
             tokenizer_file: models/tokenizer.json}}\n{TASKS}"
        );
        std::fs::write(dir.join("spillway.yaml"), &yaml).unwrap();
        let config = load_file(&dir.join("spillway.yaml")).unwrap_or_else(|p| panic!("{p:?}"));
        let b = &config.backends[0];
        assert_eq!(b.tokenizer_file.as_deref(), Some(dir.join("models/tokenizer.json").as_path()));
        let counter = crate::tokens::counter_for(b);
        assert_eq!(counter.name(), "tokenizer_file");
        assert_eq!(counter.count_text("hello world"), 9);

        // Parsed without a file, the same relative path is looked up from the working
        // directory, where it is not: the problem names the key and the path.
        let problems = parse(&yaml).unwrap_err();
        assert_eq!(problems[0].path, "backends[0].tokenizer_file", "{problems:?}");
        assert!(problems[0].message.contains("models/tokenizer.json"), "{problems:?}");
        // Both ways of counting at once is a mistake.
        let both = yaml.replace("tokenizer_file:", "tokenizer: llama_estimate, tokenizer_file:");
        std::fs::write(dir.join("both.yaml"), both).unwrap();
        let problems = load_file(&dir.join("both.yaml")).unwrap_err();
        assert!(problems.iter().any(|p| p.path == "backends[0].tokenizer"), "{problems:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
