//! Who is at the other end of a backend: one file per provider, behind one trait, so that what
//! differs between them (the wire a model speaks, where its nodes are, how a call is
//! addressed and signed, how its tokens are counted, what the traces call it) is answered in
//! one place and asked everywhere else. [`of`] gives a kind's provider; the snapshot resolves
//! it once per backend, and dispatch, the traces and the doors ask it instead of matching on
//! the kind.

pub mod anthropic;
pub mod azure;
pub mod bedrock;
pub mod gemini;
pub mod local;
pub mod openai;
pub mod vertex;

use std::sync::Arc;

use super::credentials::CloudCredentials;
use super::{Upstream, WireFormat};
use crate::config::{BackendConfig, BackendKind};
use crate::tokens::TokenCounter;

/// What a provider answers for its backends.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The wire `backend` (of this provider) speaks for its model.
    fn wire(&self, backend: &BackendConfig) -> WireFormat;

    /// `backend`'s configured nodes: each one's origin (its root address) and the base URL its
    /// wire's paths go below. One node at the backend's `base_url` unless the provider says
    /// otherwise.
    fn nodes(&self, backend: &BackendConfig) -> Vec<(String, String)> {
        backend.base_url().map(|url| (url.clone(), url)).into_iter().collect()
    }

    /// A call to `backend` at `to` (its node's base URL and the backend's key filled in), as
    /// this provider takes it: how the key is sent, a query on every URL, which credentials sign
    /// the call without a key (from `clouds`), what it serves as the client wrote it.
    fn upstream(&self, _backend: &BackendConfig, to: Upstream, _clouds: &CloudCredentials) -> Upstream {
        to
    }

    /// Whether it takes content `owned` by a provider (its own, as the client sent it).
    fn takes(&self, _owned: Owned) -> bool {
        false
    }

    /// The batch API it runs for lines at risk of missing their window, if any.
    fn batch(&self) -> Option<BatchWire> {
        None
    }

    /// The token counter of `backend`'s model when the config names none.
    fn counter(&self, backend: &BackendConfig) -> TokenCounter;

    /// How messages name it (`tool type ... runs inside {name}`).
    fn name(&self) -> &'static str;

    /// `gen_ai.provider.name` in traces: the OpenTelemetry conventions' name for a hosted API;
    /// the fleet's engines and other OpenAI-compatible servers have none, so they go by their
    /// kind as the config spells it.
    fn system(&self) -> &'static str;
}

/// The endpoints OpenAI's Batch API runs (and so a Spillway job on the OpenAI API may name).
pub const OPENAI_ENDPOINTS: [&str; 4] =
    ["/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"];

/// Which batch API a provider runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchWire {
    /// OpenAI's Files and Batch API.
    OpenAi,
    /// Anthropic's Message Batches.
    Anthropic,
}

impl BatchWire {
    /// Whether it runs a job on `endpoint`.
    pub fn serves(self, endpoint: &str) -> bool {
        match self {
            BatchWire::OpenAi => OPENAI_ENDPOINTS.contains(&endpoint),
            BatchWire::Anthropic => endpoint == "/v1/messages",
        }
    }
}

/// Content of a request that only one provider can take: tools that run inside it, thinking
/// it signed, reasoning it encrypted, state it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owned {
    /// Anthropic's server tools and the thinking it signed.
    Anthropics,
    /// OpenAI's built-in tools, its encrypted reasoning and the responses it stores.
    OpenAis,
}

impl Owned {
    /// The owner's name, as messages say it.
    pub fn owner(self) -> &'static str {
        of(match self {
            Owned::Anthropics => BackendKind::Anthropic,
            Owned::OpenAis => BackendKind::Openai,
        })
        .name()
    }
}

/// Providers are told apart by their trace name, which is theirs alone.
impl PartialEq for dyn Provider {
    fn eq(&self, other: &dyn Provider) -> bool {
        self.system() == other.system()
    }
}

/// The counter `backend`'s tokens are counted with: its loaded `tokenizer_file`, else its
/// explicit `tokenizer`, else its provider's for its model.
pub fn counter(backend: &BackendConfig) -> TokenCounter {
    if let Some(file) = &backend.tokenizer_loaded {
        return TokenCounter::File(Arc::clone(file));
    }
    match backend.tokenizer {
        Some(tokenizer) => TokenCounter::from(tokenizer),
        None => of(backend.kind()).counter(backend),
    }
}

/// The provider of backends of `kind`.
pub fn of(kind: BackendKind) -> &'static dyn Provider {
    match kind {
        BackendKind::Local => &local::Local,
        BackendKind::Openai => &openai::OpenAi,
        BackendKind::OpenaiCompatible => &openai::Compatible,
        BackendKind::AzureOpenai => &azure::Azure,
        BackendKind::Anthropic => &anthropic::Anthropic,
        BackendKind::Gemini => &gemini::Gemini,
        BackendKind::Bedrock => &bedrock::Bedrock,
        BackendKind::Vertex => &vertex::Vertex,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(yaml: &str) -> BackendConfig {
        let text =
            format!("backends:\n  - {yaml}\ntasks: [{{name: t, backends: [b], slo: {{ttft_ms: 500}}}}]\n");
        crate::config::parse(&text).unwrap_or_else(|p| panic!("{p:?}")).backends[0].clone()
    }

    #[test]
    fn each_provider_says_its_wire_and_name() {
        let cases = [
            (
                "{name: b, kind: local, endpoints: ['http://10.0.0.5:8000'], model: m}",
                WireFormat::OpenAi,
                "local",
            ),
            ("{name: b, kind: openai, model: gpt-5.6}", WireFormat::OpenAi, "openai"),
            (
                "{name: b, kind: openai_compatible, base_url: 'http://x/v1', model: m}",
                WireFormat::OpenAi,
                "openai_compatible",
            ),
            (
                "{name: b, kind: anthropic, model: claude-sonnet-5}",
                WireFormat::Claude(&anthropic::Anthropic),
                "anthropic",
            ),
            ("{name: b, kind: gemini, model: gemini-3-pro}", WireFormat::Gemini, "gcp.gemini"),
            (
                "{name: b, kind: bedrock, model: anthropic.claude-sonnet-5, region: us-east-1}",
                WireFormat::Claude(&bedrock::Bedrock),
                "aws.bedrock",
            ),
            (
                "{name: b, kind: bedrock, model: meta.llama4-maverick, region: us-east-1}",
                WireFormat::BedrockConverse,
                "aws.bedrock",
            ),
            (
                "{name: b, kind: vertex, model: claude-sonnet-5, project: p, location: us-east5}",
                WireFormat::Claude(&vertex::Vertex),
                "gcp.vertex_ai",
            ),
            (
                "{name: b, kind: vertex, model: gemini-3-pro, project: p, location: us-east5}",
                WireFormat::Gemini,
                "gcp.vertex_ai",
            ),
        ];
        for (yaml, wire, system) in cases {
            let b = backend(yaml);
            let provider = of(b.kind());
            assert_eq!((provider.wire(&b), provider.system()), (wire, system), "{yaml}");
            // The wire says Claude exactly when the config's one answer does.
            let claude = matches!(wire, WireFormat::Claude(_));
            assert_eq!(claude, b.speaks_claude(), "{yaml}");
        }
    }

    #[test]
    fn each_claude_host_gets_the_betas_it_takes_where_it_takes_them() {
        use crate::adapter::wire::anthropic::host::Node;
        use crate::adapter::ClaudeHost;
        let header =
            "claude-code-20250219, interleaved-thinking-2025-05-14,oauth-2025-04-20,context-1m-2025-08-07";
        let flags = || header.split(',').map(str::trim).collect::<Vec<_>>();
        assert_eq!(anthropic::Anthropic.betas(flags()).len(), 4);
        let clouds: [&dyn ClaudeHost; 2] = [&bedrock::Bedrock, &vertex::Vertex];
        for cloud in clouds {
            assert_eq!(cloud.betas(flags()), ["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"]);
        }
        assert!(Node.betas(flags()).is_empty());
        // Anthropic and Vertex AI take them in `anthropic-beta`, Bedrock in the body.
        let named = |host: &dyn ClaudeHost| {
            let headers = host.headers("2023-06-01", &["b1", "b2"], Some("k"));
            headers.into_iter().map(|(name, value)| format!("{name}: {value}")).collect::<Vec<_>>()
        };
        assert_eq!(
            named(&anthropic::Anthropic),
            ["anthropic-version: 2023-06-01", "anthropic-beta: b1,b2", "x-api-key: k"]
        );
        assert_eq!(named(&vertex::Vertex), ["anthropic-beta: b1,b2"]);
        assert!(named(&bedrock::Bedrock).is_empty(), "SigV4 or a bearer key, added as the call is signed");
        assert_eq!(
            named(&Node),
            ["anthropic-version: 2023-06-01", "authorization: Bearer k", "x-api-key: k"]
        );
        // Beside the body (here its `messages`), in place of Anthropic's `model` and `stream`.
        let body = |host: &dyn ClaudeHost| {
            let mut body = serde_json::to_value(host.fields("m", true, &["b1"])).unwrap();
            body["messages"] = serde_json::json!([]);
            body
        };
        assert_eq!(
            body(&bedrock::Bedrock),
            serde_json::json!({"messages": [], "anthropic_version": "bedrock-2023-05-31", "anthropic_beta": ["b1"]})
        );
        assert_eq!(
            body(&vertex::Vertex),
            serde_json::json!({"stream": true, "messages": [], "anthropic_version": "vertex-2023-10-16"})
        );
    }

    #[test]
    fn each_provider_addresses_and_signs_its_calls_its_own_way() {
        use crate::adapter::credentials::CloudAuth;
        use crate::adapter::KeyHeader;
        let clouds = CloudCredentials::new(reqwest::Client::new());
        let call = |yaml: &str| {
            let b = backend(yaml);
            of(b.kind()).upstream(
                &b,
                Upstream { base_url: "http://u".into(), ..Upstream::default() },
                &clouds,
            )
        };
        let plain = Upstream { base_url: "http://u".into(), ..Upstream::default() };
        for yaml in [
            "{name: b, kind: anthropic, model: m}",
            "{name: b, kind: gemini, model: m}",
            "{name: b, kind: openai_compatible, base_url: 'http://x/v1', model: m}",
            "{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m}",
        ] {
            assert_eq!(call(yaml), plain, "{yaml}");
        }
        assert_eq!(
            call("{name: b, kind: openai, model: m}"),
            Upstream { serves_responses: true, ..plain.clone() }
        );
        let azure = call("{name: b, kind: azure_openai, model: m, base_url: 'https://r.openai.azure.com', deployment: d, api_version: 2024-10-21}");
        assert_eq!(
            (azure.key_header, azure.query.as_deref()),
            (KeyHeader::ApiKey, Some("api-version=2024-10-21"))
        );
        assert!(matches!(azure.cloud, Some(CloudAuth::Azure(_))), "{azure:?}");
        let bedrock = call("{name: b, kind: bedrock, model: meta.llama4, region: eu-west-3}");
        assert!(
            matches!(&bedrock.cloud, Some(CloudAuth::Aws { region, .. }) if region == "eu-west-3"),
            "{bedrock:?}"
        );
        let vertex = call("{name: b, kind: vertex, model: claude-sonnet-5, project: p, location: us-east5}");
        assert!(matches!(vertex.cloud, Some(CloudAuth::Google(_))), "{vertex:?}");
        let batches: Vec<(BackendKind, BatchWire)> =
            BackendKind::ALL.into_iter().filter_map(|k| Some((k, of(k).batch()?))).collect();
        assert_eq!(
            batches,
            [(BackendKind::Openai, BatchWire::OpenAi), (BackendKind::Anthropic, BatchWire::Anthropic)]
        );
    }

    #[test]
    fn each_provider_lists_its_nodes_below_its_own_base() {
        let nodes = |yaml: &str| {
            let b = backend(yaml);
            of(b.kind()).nodes(&b)
        };
        let pair = |origin: &str, base: &str| vec![(origin.to_string(), base.to_string())];
        assert_eq!(
            nodes("{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000/'], model: m}"),
            pair("http://10.0.0.5:8000", "http://10.0.0.5:8000/v1")
        );
        assert_eq!(
            nodes("{name: b, kind: openai, model: m}"),
            pair("https://api.openai.com/v1", "https://api.openai.com/v1")
        );
        assert_eq!(
            nodes("{name: b, kind: openai_compatible, endpoints: ['http://a/v1/', 'http://b/v1'], model: m}")
                .len(),
            2
        );
        assert_eq!(
            nodes("{name: b, kind: azure_openai, model: m, base_url: 'https://r.openai.azure.com/', deployment: d, api_version: v1}"),
            pair("https://r.openai.azure.com", "https://r.openai.azure.com/openai/deployments/d")
        );
        let vertex = nodes("{name: b, kind: vertex, model: claude-sonnet-5, project: p, location: us-east5}");
        assert!(vertex[0].1.ends_with("/projects/p/locations/us-east5/publishers/anthropic"), "{vertex:?}");
    }

    #[test]
    fn the_provider_picks_the_counter_and_an_explicit_tokenizer_wins() {
        let counted = |yaml: &str| counter(&backend(yaml));
        assert_eq!(counted("{name: b, kind: openai, model: m}"), TokenCounter::O200kBase);
        assert_eq!(
            counted("{name: b, kind: openai_compatible, base_url: 'http://x/v1', model: m}"),
            TokenCounter::O200kBase
        );
        assert_eq!(counted("{name: b, kind: anthropic, model: m}"), TokenCounter::ClaudeEstimate);
        assert_eq!(counted("{name: b, kind: gemini, model: m}"), TokenCounter::GeminiEstimate);
        let local = "{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m";
        assert_eq!(counted(&format!("{local}}}")), TokenCounter::LlamaEstimate);
        assert_eq!(counted(&format!("{local}, tokenizer: cl100k_base}}")), TokenCounter::Cl100kBase);
        assert_eq!(
            counted("{name: b, kind: anthropic, model: m, tokenizer: o200k_base}"),
            TokenCounter::O200kBase
        );
        // Claude on the clouds is counted as Claude, by the one answer to "is it Claude"
        // (`speaks_claude`): a Vertex backend whose publisher is written, whatever its model.
        let vertex =
            "{name: b, kind: vertex, model: m, project: p, location: us-east5, publisher: anthropic}";
        assert_eq!(counted(vertex), TokenCounter::ClaudeEstimate);
        let gemini = "{name: b, kind: vertex, model: gemini-3-pro, project: p, location: us-east5}";
        assert_eq!(counted(gemini), TokenCounter::GeminiEstimate);
        let bedrock = "{name: b, kind: bedrock, model: anthropic.claude-sonnet-5, region: us-east-1}";
        assert_eq!(counted(bedrock), TokenCounter::ClaudeEstimate);
        assert_eq!(
            counted("{name: b, kind: bedrock, model: meta.llama4, region: us-east-1}"),
            TokenCounter::LlamaEstimate
        );
    }
}
