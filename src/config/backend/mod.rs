//! What a backend is: a pool of self-hosted nodes or a hosted API, its wire format, price, tokenizer and
//! capabilities, and, by kind, what only that kind has (`pool`: nodes, capacity, agent, pins,
//! discovery, GPU price; `hosted`: API address, quota, model version). The types; `written`
//! reads the YAML form into them (and gives their schema), `check` says what types cannot, and
//! `load` reads the one file a backend may name (`tokenizer_file`).

pub(super) mod check;
mod hosted;
mod pool;
pub(super) mod written;

use std::path::PathBuf;
use std::sync::Arc;

use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::Deserialize;

use super::yes;
use crate::tokens::FileTokenizer;
pub use crate::tokens::Tokenizer;

pub use hosted::*;
pub use pool::*;

/// The wire format and nature of a backend.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A pool of self-hosted nodes (vLLM, SGLang, llama.cpp, TensorRT-LLM, TGI; OpenAI-compatible
    /// wire format). Written `local`, or `vllm` (its older name).
    #[serde(alias = "vllm")]
    Local,
    /// OpenAI's API.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API.
    Gemini,
    /// Any other OpenAI-compatible endpoint, treated as hosted.
    OpenaiCompatible,
    /// Azure OpenAI: OpenAI's wire at a resource's own address, the key sent as `api-key`.
    AzureOpenai,
    /// Amazon Bedrock: Claude through InvokeModel, signed with SigV4 (or a Bedrock API key).
    Bedrock,
    /// Google Vertex AI: Claude through rawPredict, Gemini through generateContent, with a
    /// Google OAuth token.
    Vertex,
}

impl BackendKind {
    pub const ALL: [BackendKind; 8] = [
        BackendKind::Local,
        BackendKind::Openai,
        BackendKind::Anthropic,
        BackendKind::Gemini,
        BackendKind::OpenaiCompatible,
        BackendKind::AzureOpenai,
        BackendKind::Bedrock,
        BackendKind::Vertex,
    ];

    /// Self-hosted GPUs (the fleet) rather than a hosted API.
    pub fn is_local(self) -> bool {
        self == BackendKind::Local
    }

    /// What config may call this kind: its name, and for `local` its older name `vllm`.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            BackendKind::Local => &["local", "vllm"],
            BackendKind::Openai => &["openai"],
            BackendKind::Anthropic => &["anthropic"],
            BackendKind::Gemini => &["gemini"],
            BackendKind::OpenaiCompatible => &["openai_compatible"],
            BackendKind::AzureOpenai => &["azure_openai"],
            BackendKind::Bedrock => &["bedrock"],
            BackendKind::Vertex => &["vertex"],
        }
    }

    /// Whether `name` is one of [`BackendKind::names`].
    pub fn is_named(self, name: &str) -> bool {
        self.names().contains(&name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Local => "local",
            BackendKind::Openai => "openai",
            BackendKind::Anthropic => "anthropic",
            BackendKind::Gemini => "gemini",
            BackendKind::OpenaiCompatible => "openai_compatible",
            BackendKind::AzureOpenai => "azure_openai",
            BackendKind::Bedrock => "bedrock",
            BackendKind::Vertex => "vertex",
        }
    }

    /// The public API address used when `base_url` is not given.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            BackendKind::Openai => Some("https://api.openai.com/v1"),
            BackendKind::Anthropic => Some("https://api.anthropic.com"),
            BackendKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            // An Azure resource has its own address: `base_url` is required. The clouds' depend
            // on the region ([`BackendConfig::base_url`]).
            BackendKind::Local
            | BackendKind::OpenaiCompatible
            | BackendKind::AzureOpenai
            | BackendKind::Bedrock
            | BackendKind::Vertex => None,
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
    /// Input tokens written to the provider's prompt cache (Anthropic: 1.25 × input for its
    /// five-minute cache); defaults to `input_per_mtok`.
    #[serde(default)]
    #[schemars(with = "Option<crate::config::schema::DecimalSchema>")]
    pub cache_write_per_mtok: Option<Decimal>,
}

/// One backend: a vLLM pool or a hosted API with one model. The keys every kind takes are its
/// fields; `kind` and the keys only some kinds take are in `spec`. In YAML they are the keys of
/// one mapping, and a key the backend's kind does not take is refused (`written`).
#[derive(Debug, Clone, JsonSchema, PartialEq)]
#[schemars(
    description = concat!(
        "One backend: a vLLM pool or a hosted API with one model. Its kind decides which other keys ",
        "it takes (a branch per kind)"
    ),
    transform = written::by_kind
)]
pub struct BackendConfig {
    /// Unique; tasks refer to it.
    pub name: String,
    /// Name of the environment variable that holds the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The provider's model name.
    pub model: String,
    /// Where the backend runs, for `policy`.
    #[serde(default)]
    pub region: Option<String>,
    /// What the provider does with the data (retention, training use, zero data retention,
    /// processing regions), for `policy`; unset keys are not declared.
    #[serde(default)]
    pub terms: super::DataTerms,
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
    pub tokenizer_loaded: Option<Arc<FileTokenizer>>,
    /// What requests this backend can serve; each unset key takes the kind's default.
    #[serde(default)]
    pub capabilities: CapabilitiesConfig,
    /// The vector space of this backend's embeddings (a name you choose, such as the
    /// embedding model's): only backends that declare one serve `/v1/embeddings`, and a task's
    /// backends must all declare the same, since vectors of different models cannot be
    /// compared. Kinds local, openai and openai_compatible only (`written` refuses it on the
    /// others, and puts it in those kinds' schema branches).
    #[serde(default)]
    #[schemars(skip)]
    pub embedding_space: Option<EmbeddingSpace>,
    /// Where Spillway places prompt-cache breakpoints (`cache_control`) in requests that carry
    /// none of the client's own. Kind anthropic only, where it is on by default (`written`
    /// sets it; it puts it in that kind's schema branch).
    #[serde(default)]
    #[schemars(skip)]
    pub prompt_cache: Option<crate::canonical::CachePlacement>,
    /// The kind, with the settings only it has.
    pub spec: BackendSpec,
}

/// A backend's kind with the settings only that kind has.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendSpec {
    /// A pool of self-hosted nodes.
    Local(PoolSpec),
    /// OpenAI's API.
    Openai(HostedSpec),
    /// Anthropic's Messages API.
    Anthropic(HostedSpec),
    /// Google's Gemini API.
    Gemini(HostedSpec),
    /// Any other OpenAI-compatible endpoint (or several), treated as hosted.
    OpenaiCompatible(CompatibleSpec),
    /// Azure OpenAI (the v1 API, or a legacy deployment).
    AzureOpenai(AzureSpec),
    /// Amazon Bedrock in the backend's `region`.
    Bedrock(HostedSpec),
    /// Google Vertex AI in a project and location.
    Vertex(VertexSpec),
}

impl BackendSpec {
    pub fn kind(&self) -> BackendKind {
        match self {
            BackendSpec::Local(_) => BackendKind::Local,
            BackendSpec::Openai(_) => BackendKind::Openai,
            BackendSpec::Anthropic(_) => BackendKind::Anthropic,
            BackendSpec::Gemini(_) => BackendKind::Gemini,
            BackendSpec::OpenaiCompatible(_) => BackendKind::OpenaiCompatible,
            BackendSpec::AzureOpenai(_) => BackendKind::AzureOpenai,
            BackendSpec::Bedrock(_) => BackendKind::Bedrock,
            BackendSpec::Vertex(_) => BackendKind::Vertex,
        }
    }
}

impl BackendConfig {
    pub fn kind(&self) -> BackendKind {
        self.spec.kind()
    }

    /// The pool settings of a `local` backend; `None` for a hosted one.
    pub fn pool(&self) -> Option<&PoolSpec> {
        match &self.spec {
            BackendSpec::Local(pool) => Some(pool),
            _ => None,
        }
    }

    /// The hosted settings (`base_url`, `quota`, `version`) of any kind but `local`.
    pub fn hosted(&self) -> Option<&HostedSpec> {
        match &self.spec {
            BackendSpec::Local(_) => None,
            BackendSpec::Openai(h)
            | BackendSpec::Anthropic(h)
            | BackendSpec::Gemini(h)
            | BackendSpec::Bedrock(h) => Some(h),
            BackendSpec::OpenaiCompatible(c) => Some(&c.hosted),
            BackendSpec::AzureOpenai(a) => Some(&a.hosted),
            BackendSpec::Vertex(v) => Some(&v.hosted),
        }
    }

    /// The hosted API's address: `base_url` as written, else the provider's public one (for
    /// Bedrock, the runtime endpoint of the backend's region; for Vertex, the location's).
    pub fn base_url(&self) -> Option<String> {
        if let Some(url) = self.hosted().and_then(|h| h.base_url.as_deref()) {
            return Some(url.trim_end_matches('/').to_string());
        }
        match &self.spec {
            BackendSpec::Bedrock(_) => {
                self.region.as_deref().map(|r| format!("https://bedrock-runtime.{r}.amazonaws.com"))
            }
            BackendSpec::Vertex(v) => Some(v.default_host()),
            _ => self.kind().default_base_url().map(str::to_string),
        }
    }

    /// Whether this backend is Claude in Anthropic's own Messages body: Anthropic, Bedrock's
    /// Anthropic models (InvokeModel; its others speak Converse), and Vertex AI's.
    pub fn speaks_claude(&self) -> bool {
        match &self.spec {
            BackendSpec::Anthropic(_) => true,
            BackendSpec::Bedrock(_) => self.model.contains("anthropic") || self.model.contains("claude"),
            BackendSpec::Vertex(v) => v.publisher_of(&self.model) == Publisher::Anthropic,
            _ => false,
        }
    }

    /// Whether the nodes serve Anthropic Messages requests themselves (`messages: native`).
    pub fn serves_messages(&self) -> bool {
        match &self.spec {
            BackendSpec::Local(pool) => pool.messages == MessagesApi::Native,
            BackendSpec::OpenaiCompatible(c) => c.messages == MessagesApi::Native,
            _ => false,
        }
    }

    /// The breakpoints to place in this backend's requests, if it needs any and any are on.
    pub fn cache_placement(&self) -> Option<crate::canonical::CachePlacement> {
        self.prompt_cache.filter(|p| !p.is_off())
    }

    /// Whether prompt tokens read from the provider's cache count toward this backend's
    /// `quota.tpm`: as written, else as the provider counts them (Anthropic's input limits
    /// leave cache reads out; OpenAI and Gemini count every prompt token).
    pub fn quota_counts_cached(&self) -> bool {
        let written = self.hosted().and_then(|h| h.quota.as_ref()).and_then(|q| q.count_cached_tokens);
        written.unwrap_or(!self.speaks_claude())
    }

    /// How this backend's `quota.tpm` counts a request's tokens.
    pub fn quota_counting(&self) -> crate::canonical::QuotaCounting {
        let weight = self.hosted().and_then(|h| h.quota.as_ref()).and_then(|q| q.output_token_weight);
        crate::canonical::QuotaCounting {
            counts_cached: self.quota_counts_cached(),
            output_weight: weight.unwrap_or(1).max(1),
        }
    }

    /// The configured node addresses: a pool's, or an `openai_compatible` backend's several
    /// base URLs; none for the other kinds.
    pub fn endpoints(&self) -> &[String] {
        match &self.spec {
            BackendSpec::Local(pool) => &pool.endpoints,
            BackendSpec::OpenaiCompatible(c) => &c.endpoints,
            _ => &[],
        }
    }

    /// This backend's capabilities: what the config says, else its kind's default.
    pub fn capabilities(&self) -> Capabilities {
        let d = Capabilities::default_for(self.kind());
        let c = &self.capabilities;
        Capabilities {
            tools: c.tools.unwrap_or(d.tools),
            vision: c.vision.unwrap_or(d.vision),
            json_schema: c.json_schema.unwrap_or(d.json_schema),
            max_context: c.max_context.or(d.max_context),
        }
    }
}

/// The name of a vector space: embeddings of one space are interchangeable, of two are not.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(transparent)]
pub struct EmbeddingSpace(pub String);

impl EmbeddingSpace {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl BackendKind {
    /// Whether this kind serves Claude through Anthropic's own Messages body (Anthropic, and
    /// the clouds' Claude: Bedrock's InvokeModel, Vertex's rawPredict). Their quotas leave
    /// prompt-cache reads out of the input tokens they count.
    pub fn serves_claude_natively(self) -> bool {
        matches!(self, BackendKind::Anthropic | BackendKind::Bedrock | BackendKind::Vertex)
    }

    /// Whether this kind speaks OpenAI's wire, and so can serve legacy completions and
    /// embeddings as well as chat.
    pub fn speaks_openai(self) -> bool {
        matches!(
            self,
            BackendKind::Local
                | BackendKind::Openai
                | BackendKind::OpenaiCompatible
                | BackendKind::AzureOpenai
        )
    }
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
            // Azure serves OpenAI's models.
            BackendKind::Openai | BackendKind::AzureOpenai => (true, true, true, Some(128_000)),
            BackendKind::Anthropic | BackendKind::Bedrock | BackendKind::Vertex => {
                (true, true, true, Some(200_000))
            }
            BackendKind::Gemini => (true, true, true, Some(1_048_576)),
            BackendKind::Local => (false, false, true, None),
            BackendKind::OpenaiCompatible => (true, false, true, None),
        };
        Capabilities { tools, vision, json_schema, max_context }
    }
}

#[cfg(test)]
mod tests;
