//! Adapters: the canonical request in, a stream of canonical events (or a classified error) out.
//!
//! One folder per wire format (`wire/`): vLLM, OpenAI and any OpenAI-compatible endpoint share
//! `wire::openai` (chat, and the completions, embeddings and Responses only they serve);
//! Claude's Messages, Gemini and Bedrock's Converse have their own. Who runs the upstream, and so
//! how a call is addressed and signed, is the provider's (`provider/`). Adapters never retry and
//! never choose a backend: dispatch does that. They only translate and classify.

mod call;
pub mod credentials;
pub mod error;
pub mod provider;
pub mod redact;
pub mod transport;
pub mod wire;

pub use call::{system_turn, Call};
use redact::CallRedactor;
pub use transport::Transport;
pub use wire::anthropic::ClaudeHost;
use wire::{anthropic, converse, gemini, openai};

pub use crate::canonical::EventStream;
use crate::canonical::{ChatRequest, Dialect, ErrorClass, Operation, UpstreamError};

/// The wire format a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireFormat {
    OpenAi,
    /// Claude's Messages API, at one of its hosts (Anthropic, a cloud).
    Claude(&'static dyn ClaudeHost),
    Gemini,
    /// Amazon Bedrock's Converse API (its models other than Claude).
    BedrockConverse,
}

impl WireFormat {
    /// Whether the upstream counts a request's tokens itself, exactly ([`count_tokens`]):
    /// Claude's count route, the only exact count there is for Claude models.
    pub fn counts_tokens(self) -> bool {
        matches!(self, WireFormat::Claude(_))
    }
}

/// Where and as whom one call goes: resolved from config by dispatch for one target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Upstream {
    /// Base URL without a trailing slash, e.g. `http://10.0.0.5:8000/v1` for OpenAI-compatible
    /// servers, `https://api.anthropic.com` for Anthropic, and
    /// `https://generativelanguage.googleapis.com/v1beta` for Gemini.
    pub base_url: String,
    /// The secret itself (already read from the environment), if the upstream needs one.
    pub api_key: Option<String>,
    /// An OpenAI-format server that also serves Anthropic Messages at `{base_url}/messages`:
    /// a request that came in that dialect goes there as the client wrote it.
    pub serves_messages: bool,
    /// OpenAI itself, which serves the Responses API at `{base_url}/responses` and keeps the
    /// responses it stores: a request pinned there for that state goes as the client wrote it.
    pub serves_responses: bool,
    /// How an OpenAI-format upstream takes the key.
    pub key_header: KeyHeader,
    /// A query every call's URL carries (Azure's `api-version=...`), without the `?`.
    pub query: Option<String>,
    /// How a cloud upstream without an API key learns who calls (a SigV4 signature, a Google
    /// token).
    pub cloud: Option<credentials::CloudAuth>,
}

/// How an OpenAI-format upstream takes its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyHeader {
    /// `Authorization: Bearer KEY` (OpenAI, vLLM, most compatible servers).
    #[default]
    Bearer,
    /// `api-key: KEY` (Azure OpenAI).
    ApiKey,
}

impl Upstream {
    /// The URL of `path` (e.g. `chat/completions`) below the base URL, with the upstream's query.
    pub fn url(&self, path: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        match &self.query {
            Some(q) => format!("{base}/{path}?{q}"),
            None => format!("{base}/{path}"),
        }
    }

    /// Add the headers with which a cloud upstream learns who calls: a Bedrock API key as a
    /// bearer token, else the cloud's own credentials (which sign `url`, `headers` and `body`
    /// as they are now). Other keys go in each wire's own header.
    pub(in crate::adapter) async fn authenticate(
        &self,
        url: &str,
        headers: &mut Vec<(::http::HeaderName, String)>,
        body: &[u8],
    ) -> Result<(), UpstreamError> {
        match (&self.cloud, &self.api_key) {
            (Some(credentials::CloudAuth::Aws { .. }), Some(key)) => {
                headers.push((reqwest::header::AUTHORIZATION, format!("Bearer {key}")))
            }
            (Some(cloud), None) => {
                let added = cloud.headers(url, headers, body).await?;
                headers.extend(added);
            }
            _ => {}
        }
        Ok(())
    }

    /// The header that carries the key to an OpenAI-format upstream, if it has one.
    pub fn openai_key(&self) -> Option<(reqwest::header::HeaderName, String)> {
        let key = self.api_key.as_ref()?;
        Some(match self.key_header {
            KeyHeader::Bearer => (reqwest::header::AUTHORIZATION, format!("Bearer {key}")),
            KeyHeader::ApiKey => (reqwest::header::HeaderName::from_static("api-key"), key.clone()),
        })
    }
}

/// Make `call` for `req`. Resolves once the upstream has answered with a status: `Ok` holds
/// the event stream (for a non-streaming request it yields every event of the whole answer),
/// `Err` the classified failure. Timeouts are the caller's business (dispatch wraps this in its
/// deadlines). Every error, at once or in the stream, is cut of the router's secrets and the
/// call's credentials ([`CallRedactor`]) before it leaves.
pub async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    CallRedactor::of(call).answer(answer(transport, call, req).await)
}

/// `req`'s input tokens as `call`'s upstream counts them (a wire that
/// [`WireFormat::counts_tokens`]), its error cut as [`send`]'s are.
pub async fn count_tokens(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<u32, UpstreamError> {
    let WireFormat::Claude(host) = call.format else {
        let why = format!("a {:?} backend counts no tokens itself", call.format);
        return Err(UpstreamError::new(ErrorClass::InvalidRequest, None, why));
    };
    anthropic::count_tokens(transport, call, req, host).await.map_err(|e| CallRedactor::of(call).error(e))
}

/// The wire adapter's answer to `call`, its errors as the upstream wrote them.
async fn answer(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let dialect = req.native.as_ref().map(|n| n.dialect);
    let upstream = &call.upstream;
    match (&req.operation, call.format) {
        (Operation::Chat, WireFormat::OpenAi)
            if upstream.serves_messages && dialect == Some(Dialect::AnthropicMessages) =>
        {
            anthropic::send_to(transport, call, req, &anthropic::host::Node).await
        }
        (Operation::Chat, WireFormat::OpenAi)
            if upstream.serves_responses && dialect == Some(Dialect::OpenAiResponses) =>
        {
            openai::responses::send(transport, call, req).await
        }
        (Operation::Chat, WireFormat::OpenAi) => openai::chat::send(transport, call, req).await,
        (Operation::Chat, WireFormat::Claude(host)) => anthropic::send_to(transport, call, req, host).await,
        (Operation::Chat, WireFormat::BedrockConverse) => converse::send(transport, call, req).await,
        (Operation::Chat, WireFormat::Gemini) => gemini::send(transport, call, req).await,
        (Operation::Completion(c), WireFormat::OpenAi) => {
            openai::completions::send(transport, call, req, c).await
        }
        (Operation::Embedding(e), WireFormat::OpenAi) => openai::embeddings::send(transport, call, e).await,
        // The capability filter keeps these from being planned; said plainly if one is.
        (operation, _) => Err(UpstreamError::new(
            ErrorClass::InvalidRequest,
            None,
            format!("a {:?} backend serves no {}", call.format, operation.describe()),
        )),
    }
}

#[cfg(test)]
mod fixture_tests;
