//! Anthropic's Messages API.

use http::HeaderName;

use super::{BatchWire, Owned, Provider};
use crate::adapter::wire::anthropic::{ClaudeHost, HostFields};
use crate::adapter::WireFormat;
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

#[derive(Debug)]
pub struct Anthropic;

impl Provider for Anthropic {
    fn wire(&self, _: &BackendConfig) -> WireFormat {
        WireFormat::Claude(&Anthropic)
    }

    fn takes(&self, owned: Owned) -> bool {
        owned == Owned::Anthropics
    }

    fn batch(&self) -> Option<BatchWire> {
        Some(BatchWire::Anthropic)
    }

    fn system(&self) -> &'static str {
        "anthropic"
    }

    fn counter(&self, _: &BackendConfig) -> TokenCounter {
        TokenCounter::ClaudeEstimate
    }

    fn name(&self) -> &'static str {
        "Anthropic"
    }
}

/// Anthropic's own API: the client's version and every beta in headers, the key in `x-api-key`.
impl ClaudeHost for Anthropic {
    fn signer(&self) -> Option<&'static str> {
        Some("anthropic")
    }

    fn url(&self, base: &str, _model: &str, _stream: bool) -> String {
        format!("{}/v1/messages", base.trim_end_matches('/'))
    }

    fn headers(&self, version: &str, betas: &[&str], key: Option<&str>) -> Vec<(HeaderName, String)> {
        let mut headers = vec![(HeaderName::from_static("anthropic-version"), version.to_string())];
        if !betas.is_empty() {
            headers.push((HeaderName::from_static("anthropic-beta"), betas.join(",")));
        }
        if let Some(key) = key {
            headers.push((HeaderName::from_static("x-api-key"), key.to_string()));
        }
        headers
    }

    fn count<'a>(&self, base: &str, model: &'a str, _: &'a [&'a str]) -> Option<(String, HostFields<'a>)> {
        let url = format!("{}/v1/messages/count_tokens", base.trim_end_matches('/'));
        Some((url, HostFields { model: Some(model), ..HostFields::default() }))
    }
}
