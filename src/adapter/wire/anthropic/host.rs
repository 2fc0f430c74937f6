//! Who serves Claude's Messages wire, and how each differs from Anthropic's own API: where a
//! call goes, the headers it carries, the body it takes, how its errors read, and who signs
//! the thinking it writes. Anthropic, Amazon Bedrock and Vertex AI each implement [`ClaudeHost`]
//! in their provider file (`adapter::provider`); a node serving the Messages API itself is
//! [`Node`], here. The wire ([`super::send_to`], [`super::count_tokens`]) asks the host and
//! never names one.

use http::HeaderName;
use reqwest::header::AUTHORIZATION;
use serde::Serialize;

use crate::adapter::transport::http::Classify;

/// A host of Claude's Messages wire.
pub trait ClaudeHost: Send + Sync + std::fmt::Debug {
    /// The provider whose key signs the thinking this host writes ([`super::provenance`]):
    /// Claude, which also caches prompts where told to. A node signs none and caches every
    /// prefix on its own.
    fn signer(&self) -> Option<&'static str>;

    /// The URL of a call to `model` below `base`.
    fn url(&self, base: &str, model: &str, stream: bool) -> String;

    /// The headers of a call: the client's `anthropic-version` (`version`), the flags of its
    /// `anthropic-beta` this host takes (`betas`), and the backend's key, if one is configured
    /// (a cloud's own credentials sign the call instead: `Upstream::authenticate`).
    fn headers(&self, version: &str, betas: &[&str], key: Option<&str>) -> Vec<(HeaderName, String)>;

    /// The flags of a client's `anthropic-beta` header this host takes: all of them unless it
    /// says otherwise.
    fn betas<'h>(&self, flags: Vec<&'h str>) -> Vec<&'h str> {
        flags
    }

    /// The fields it takes beside the Messages body of a call to `model` with `betas`:
    /// Anthropic's own API takes the model and the stream flag there (a cloud wants the model
    /// in the URL and its own `anthropic_version` in the body).
    fn fields<'a>(&self, model: &'a str, stream: bool, _betas: &'a [&'a str]) -> HostFields<'a> {
        HostFields { model: Some(model), stream: Some(stream), ..HostFields::default() }
    }

    /// The URL of its token count route, and the fields it takes beside the body it counts
    /// (which carries nothing that says how to answer); `None`: it counts none.
    fn count<'a>(&self, base: &str, model: &'a str, betas: &'a [&'a str])
        -> Option<(String, HostFields<'a>)>;

    /// The count route's body around the JSON body it counts: that body itself, unless the
    /// host says otherwise.
    fn count_body(&self, counted: Vec<u8>) -> Vec<u8> {
        counted
    }

    /// How its error answers read.
    fn classify(&self) -> Classify {
        super::classify
    }

    /// The media type of its streamed answers.
    fn stream_type(&self) -> &'static str {
        "text/event-stream"
    }
}

/// The Anthropic betas the clouds take (Bedrock's documented `anthropic_beta` values, which
/// Vertex AI takes as well). Bedrock refuses a whole request for one flag it does not know, so
/// any other flag a client sends is dropped for a cloud: Claude Code sends several, such as
/// `claude-code-20250219`, `oauth-2025-04-20`, `fine-grained-tool-streaming-2025-05-14`,
/// `files-api-2025-04-14` and `prompt-caching-scope-2026-01-05`.
pub const CLOUD_BETAS: &[&str] = &[
    "computer-use-2024-10-22",
    "computer-use-2025-01-24",
    "computer-use-2025-11-24",
    "token-efficient-tools-2025-02-19",
    "interleaved-thinking-2025-05-14",
    "output-128k-2025-02-19",
    "dev-full-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "tool-search-tool-2025-10-19",
    "tool-examples-2025-10-29",
];

/// The flags among `flags` a cloud takes ([`CLOUD_BETAS`]).
pub fn cloud_betas(flags: Vec<&str>) -> Vec<&str> {
    flags.into_iter().filter(|flag| CLOUD_BETAS.contains(flag)).collect()
}

/// What a host takes beside the Messages body, written by serde with it. A member written here
/// is the host's: a client's member of the same name is not passed on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostFields<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anthropic_version: Option<&'static str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub anthropic_beta: &'a [&'a str],
    /// A count route's own cap (Bedrock counts the InvokeModel body it would run, which needs one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl HostFields<'_> {
    /// The members these fields write.
    pub(crate) fn written(&self) -> impl Iterator<Item = &'static str> {
        let written = [
            ("model", self.model.is_some()),
            ("stream", self.stream.is_some()),
            ("anthropic_version", self.anthropic_version.is_some()),
            ("anthropic_beta", !self.anthropic_beta.is_empty()),
            ("max_tokens", self.max_tokens.is_some()),
        ];
        written.into_iter().filter(|(_, on)| *on).map(|(name, _)| name)
    }
}

/// Hosts are told apart by who signs their thinking, which is theirs alone.
impl PartialEq for dyn ClaudeHost {
    fn eq(&self, other: &dyn ClaudeHost) -> bool {
        self.signer() == other.signer()
    }
}

impl Eq for dyn ClaudeHost {}

impl std::hash::Hash for dyn ClaudeHost {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.signer().hash(state)
    }
}

/// A self-hosted engine's own `/v1/messages` (vLLM, SGLang, llama.cpp): the generally
/// available API only, so it gets no betas ([`super::native`] drops their body fields too).
#[derive(Debug)]
pub struct Node;

impl ClaudeHost for Node {
    fn signer(&self) -> Option<&'static str> {
        None
    }

    /// A node's base URL already ends in `/v1`.
    fn url(&self, base: &str, _model: &str, _stream: bool) -> String {
        format!("{}/messages", base.trim_end_matches('/'))
    }

    /// Engines check the key as their OpenAI routes do (some also read `x-api-key` on their
    /// Messages route): both, to the same server.
    fn headers(&self, version: &str, _betas: &[&str], key: Option<&str>) -> Vec<(HeaderName, String)> {
        let mut headers = vec![(HeaderName::from_static("anthropic-version"), version.to_string())];
        if let Some(key) = key {
            headers.push((AUTHORIZATION, format!("Bearer {key}")));
            headers.push((HeaderName::from_static("x-api-key"), key.to_string()));
        }
        headers
    }

    fn betas<'h>(&self, _flags: Vec<&'h str>) -> Vec<&'h str> {
        Vec::new()
    }

    fn count<'a>(&self, _: &str, _: &'a str, _: &'a [&'a str]) -> Option<(String, HostFields<'a>)> {
        None
    }
}
