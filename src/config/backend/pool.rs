//! What only a pool of self-hosted nodes has: its nodes and their serving engine, capacity and
//! reserve, the NVML agent beside each node, the metadata every node must report, Kubernetes
//! discovery and the price of a GPU hour.

use std::borrow::Cow;

use rust_decimal::Decimal;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize};

use crate::canonical::Engine;

/// The settings of a `local` backend beside the keys every kind takes.
#[derive(Debug, Clone, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// Node addresses of the pool, without `/v1`.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// The serving engine of the pool's nodes, whose metrics tell their headroom: `vllm`,
    /// `sglang`, `llamacpp`, `trtllm`, `tgi`, or `auto` (the default): each node's engine is told
    /// from the metric names of its first good scrape, so a pool may mix engines.
    #[serde(default)]
    pub engine: EngineSetting,
    /// Port of the NVML agent beside each node (`spillway agent`), if one runs.
    #[serde(default)]
    pub agent_port: Option<u16>,
    /// Where the agent listens: on the node's own address (`pod`, a sidecar; the default) or on
    /// the address of the machine it runs on (`host`, a DaemonSet with a `hostPort`; needs
    /// discovery by pods).
    #[serde(default)]
    pub agent_address: AgentAddress,
    /// Share of capacity kept free in normal operation, released when a hosted backend fails
    /// so its traffic can come home.
    #[serde(default = "default_reserve")]
    pub reserve: f64,
    /// Sequences one node runs at once (vLLM's `--max-num-seqs`), its capacity. A node that
    /// reports a smaller limit of its own (llama.cpp's slots, TensorRT-LLM's active requests) is
    /// held to that.
    #[serde(default = "default_max_running")]
    pub max_running: u32,
    /// What every node must report; a node that differs is quarantined.
    #[serde(default)]
    pub pin: Option<Pin>,
    /// Find nodes in Kubernetes instead of (or besides) `endpoints`.
    #[serde(default)]
    pub discovery: Option<Discovery>,
    /// GPUs per node, for GPU-hour costing (default 1).
    #[serde(default = "default_gpu_count")]
    pub gpu_count: u32,
    /// Price of one GPU hour in US dollars. A pod's `spillway.dev/gpu-hourly-usd` annotation
    /// overrides it for that node. Unset and unannotated: the node is unpriced.
    #[serde(default)]
    #[schemars(with = "Option<crate::config::schema::DecimalSchema>")]
    pub gpu_hourly_usd: Option<Decimal>,
    /// How Anthropic Messages requests reach the nodes: `translate` (the default) turns them
    /// into chat completions and back; `native` sends them as the client wrote them to the
    /// node's own `/v1/messages` (vLLM, SGLang and llama.cpp serve it).
    #[serde(default)]
    pub messages: MessagesApi,
}

/// Which engine a pool's nodes run: one named, or told per node from its metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EngineSetting {
    /// Each node's engine is detected from its first good scrape.
    #[default]
    Auto,
    /// Every node runs this engine.
    Is(Engine),
}

impl EngineSetting {
    /// The engine named, if one is.
    pub fn fixed(self) -> Option<Engine> {
        match self {
            EngineSetting::Auto => None,
            EngineSetting::Is(e) => Some(e),
        }
    }

    pub fn as_str(self) -> &'static str {
        self.fixed().map_or("auto", Engine::name)
    }
}

impl<'de> Deserialize<'de> for EngineSetting {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = Cow::<str>::deserialize(d)?;
        if name == "auto" {
            return Ok(EngineSetting::Auto);
        }
        Engine::from_name(&name).map(EngineSetting::Is).ok_or_else(|| {
            let all: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
            serde::de::Error::custom(format!("unknown engine `{name}`, expected auto, {}", all.join(", ")))
        })
    }
}

impl JsonSchema for EngineSetting {
    fn schema_name() -> Cow<'static, str> {
        "EngineSetting".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let mut names = vec!["auto"];
        names.extend(Engine::ALL.iter().map(|e| e.name()));
        json_schema!({ "type": "string", "enum": names })
    }
}

/// Whether a self-hosted backend's nodes serve the Anthropic Messages API themselves.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MessagesApi {
    #[default]
    Translate,
    Native,
}

/// A pool with no nodes and every setting at its default.
impl Default for PoolSpec {
    fn default() -> Self {
        PoolSpec {
            endpoints: Vec::new(),
            engine: EngineSetting::default(),
            agent_port: None,
            agent_address: AgentAddress::default(),
            reserve: default_reserve(),
            max_running: default_max_running(),
            pin: None,
            discovery: None,
            gpu_count: default_gpu_count(),
            gpu_hourly_usd: None,
            messages: MessagesApi::default(),
        }
    }
}

pub(super) fn default_gpu_count() -> u32 {
    1
}

pub(super) fn default_reserve() -> f64 {
    0.2
}

pub(super) fn default_max_running() -> u32 {
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

/// Pinned metadata of a pool. Unset fields are not checked.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Default)]
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
    /// Port of the serving engine's HTTP server on each pod.
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
