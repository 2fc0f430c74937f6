//! Who serves Claude's Messages wire, and how each differs from Anthropic's own API: where a
//! call goes, the headers it carries, the body it takes, how its errors read, and who signs
//! the thinking it writes. Anthropic, Amazon Bedrock and Vertex AI each implement [`ClaudeHost`]
//! in their provider file (`adapter::provider`); a node serving the Messages API itself is
//! [`Node`], here. The wire ([`super::send_to`], [`super::count_tokens`]) asks the host and
//! never names one.

use http::HeaderName;
use reqwest::header::AUTHORIZATION;
use serde_json::{Map, Value};

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

    /// Anthropic's body made the one this host takes (a cloud wants the model in the URL and
    /// its own `anthropic_version` in the body).
    fn fit(&self, _body: &mut Map<String, Value>, _betas: &[&str]) {}

    /// The URL and body of its token count route, from the body of the request it counts (as
    /// [`ClaudeHost::fit`] left it, less what says how to answer); `None`: it counts none.
    fn count(&self, base: &str, model: &str, body: Map<String, Value>) -> Option<(String, Value)>;

    /// How its error answers read.
    fn classify(&self) -> Classify {
        super::classify
    }

    /// The media type of its streamed answers.
    fn stream_type(&self) -> &'static str {
        "text/event-stream"
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

    fn count(&self, _: &str, _: &str, _: Map<String, Value>) -> Option<(String, Value)> {
        None
    }
}
