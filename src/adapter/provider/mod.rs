//! Who is at the other end of a backend: one file per provider, behind one trait, so that what
//! differs between them (the wire a model speaks, how a key is sent, which cloud credentials
//! sign a call, what the traces call it) is answered in one place and asked everywhere else.
//! [`of`] gives a kind's provider; dispatch and the traces ask it instead of matching on the
//! kind.

mod anthropic;
mod azure;
mod bedrock;
mod gemini;
mod local;
mod openai;
mod vertex;

use std::sync::Arc;

use super::{KeyHeader, WireFormat};
use crate::config::{BackendConfig, BackendKind};
use crate::tokens::TokenCounter;

/// Which credentials sign a provider's calls besides (or instead of) a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// The key alone (or none).
    Key,
    /// AWS SigV4 (Bedrock).
    Aws,
    /// A Google access token (Vertex AI).
    Google,
    /// An Entra token when no key is given (Azure OpenAI).
    Azure,
}

/// What a provider answers for its backends.
pub trait Provider: Send + Sync {
    /// The wire `backend` (of this provider) speaks for its model.
    fn wire(&self, backend: &BackendConfig) -> WireFormat;

    /// How a key goes on OpenAI's wire.
    fn key_header(&self) -> KeyHeader {
        KeyHeader::Bearer
    }

    /// Which credentials sign a call.
    fn signer(&self) -> Signer {
        Signer::Key
    }

    /// Whether it takes OpenAI's Responses requests as the client wrote them.
    fn serves_responses(&self) -> bool {
        false
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
    fn each_provider_says_its_wire_key_signer_and_name() {
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
            ("{name: b, kind: anthropic, model: claude-sonnet-5}", WireFormat::Anthropic, "anthropic"),
            ("{name: b, kind: gemini, model: gemini-3-pro}", WireFormat::Gemini, "gcp.gemini"),
            (
                "{name: b, kind: bedrock, model: anthropic.claude-sonnet-5, region: us-east-1}",
                WireFormat::Bedrock,
                "aws.bedrock",
            ),
            (
                "{name: b, kind: bedrock, model: meta.llama4-maverick, region: us-east-1}",
                WireFormat::BedrockConverse,
                "aws.bedrock",
            ),
            (
                "{name: b, kind: vertex, model: claude-sonnet-5, project: p, location: us-east5}",
                WireFormat::VertexClaude,
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
            let claude =
                matches!(wire, WireFormat::Anthropic | WireFormat::Bedrock | WireFormat::VertexClaude);
            assert_eq!(claude, b.speaks_claude(), "{yaml}");
        }
        assert_eq!(of(BackendKind::AzureOpenai).key_header(), KeyHeader::ApiKey);
        assert_eq!(of(BackendKind::Openai).key_header(), KeyHeader::Bearer);
        let signers: Vec<Signer> = BackendKind::ALL.iter().map(|&k| of(k).signer()).collect();
        assert_eq!(signers.iter().filter(|s| **s != Signer::Key).count(), 3, "{signers:?}");
        assert_eq!(of(BackendKind::Bedrock).signer(), Signer::Aws);
        assert_eq!(of(BackendKind::Vertex).signer(), Signer::Google);
        assert_eq!(of(BackendKind::AzureOpenai).signer(), Signer::Azure);
        let responses: Vec<BackendKind> =
            BackendKind::ALL.into_iter().filter(|&k| of(k).serves_responses()).collect();
        assert_eq!(responses, [BackendKind::Openai]);
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
