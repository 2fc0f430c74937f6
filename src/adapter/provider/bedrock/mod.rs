//! Amazon Bedrock: Claude in Anthropic's Messages body (InvokeModel), its other models through
//! Converse; calls signed with SigV4.

pub mod errors;

use base64::Engine;
use http::HeaderName;
use serde::Serialize;

use super::Provider;
use crate::adapter::credentials::{CloudAuth, CloudCredentials};
use crate::adapter::transport::{eventstream, http::Classify};
use crate::adapter::wire::anthropic::host::cloud_betas;
use crate::adapter::wire::anthropic::{ClaudeHost, HostFields};
use crate::adapter::{Upstream, WireFormat};
use crate::config::BackendConfig;
use crate::tokens::TokenCounter;

/// The `anthropic_version` InvokeModel takes.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The InvokeModel URL of `model` below `base` (the runtime endpoint): the model id, profile id
/// or ARN percent-encoded as one path segment.
pub fn invoke_url(base: &str, model: &str, stream: bool) -> String {
    let verb = if stream { "invoke-with-response-stream" } else { "invoke" };
    format!("{}/model/{}/{verb}", base.trim_end_matches('/'), crate::config::path_segment(model))
}

#[derive(Debug)]
pub struct Bedrock;

impl Provider for Bedrock {
    fn wire(&self, backend: &BackendConfig) -> WireFormat {
        if backend.speaks_claude() {
            WireFormat::Claude(&Bedrock)
        } else {
            WireFormat::BedrockConverse
        }
    }

    /// SigV4 for the backend's region signs a call without a Bedrock API key.
    fn upstream(&self, backend: &BackendConfig, to: Upstream, clouds: &CloudCredentials) -> Upstream {
        let cloud = CloudAuth::Aws {
            region: backend.region.clone().unwrap_or_default(),
            service: errors::SIGNING_NAME,
            credentials: clouds.aws.clone(),
        };
        Upstream { cloud: Some(cloud), ..to }
    }

    fn system(&self) -> &'static str {
        "aws.bedrock"
    }

    fn counter(&self, backend: &BackendConfig) -> TokenCounter {
        if backend.speaks_claude() {
            TokenCounter::ClaudeEstimate
        } else {
            TokenCounter::LlamaEstimate
        }
    }

    fn name(&self) -> &'static str {
        "Amazon Bedrock"
    }
}

/// Claude through InvokeModel: Anthropic's body less `model` and `stream` (the URL says both),
/// with Bedrock's `anthropic_version` and the betas it takes in the body; the answer streams in
/// AWS event-stream frames.
impl ClaudeHost for Bedrock {
    fn signer(&self) -> Option<&'static str> {
        Some("bedrock")
    }

    fn url(&self, base: &str, model: &str, stream: bool) -> String {
        invoke_url(base, model, stream)
    }

    fn headers(&self, _: &str, _: &[&str], _: Option<&str>) -> Vec<(HeaderName, String)> {
        Vec::new()
    }

    fn betas<'h>(&self, flags: Vec<&'h str>) -> Vec<&'h str> {
        cloud_betas(flags)
    }

    fn fields<'a>(&self, _: &'a str, _: bool, betas: &'a [&'a str]) -> HostFields<'a> {
        HostFields {
            anthropic_version: Some(ANTHROPIC_VERSION),
            anthropic_beta: betas,
            ..HostFields::default()
        }
    }

    /// The InvokeModel body it would count, with a `max_tokens` ([`Bedrock::count_body`]).
    fn count<'a>(
        &self,
        base: &str,
        model: &'a str,
        betas: &'a [&'a str],
    ) -> Option<(String, HostFields<'a>)> {
        let url = format!(
            "{}/model/{}/count-tokens",
            base.trim_end_matches('/'),
            crate::config::path_segment(model)
        );
        Some((url, HostFields { max_tokens: Some(1), ..self.fields(model, false, betas) }))
    }

    /// `{"input": {"invokeModel": {"body": <the counted body in base64>}}}`.
    fn count_body(&self, counted: Vec<u8>) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Input {
            invoke_model: InvokeModel,
        }
        #[derive(Serialize)]
        struct InvokeModel {
            body: String,
        }
        #[derive(Serialize)]
        struct CountBody {
            input: Input,
        }
        let body = base64::engine::general_purpose::STANDARD.encode(counted);
        serde_json::to_vec(&CountBody { input: Input { invoke_model: InvokeModel { body } } })
            .expect("a typed body serialises")
    }

    fn classify(&self) -> Classify {
        errors::classify
    }

    fn stream_type(&self) -> &'static str {
        eventstream::CONTENT_TYPE
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_model_id_is_one_path_segment() {
        assert_eq!(
            super::invoke_url("https://bedrock-runtime.us-east-1.amazonaws.com/", "arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude-sonnet-4-6-v1:0", true),
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.anthropic.claude-sonnet-4-6-v1%3A0/invoke-with-response-stream"
        );
    }
}
