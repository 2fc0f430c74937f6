//! Claude's own token count: exact, free, and the only exact count there is for Claude models,
//! whose tokenizer is not public. Anthropic serves it at `POST /v1/messages/count_tokens`,
//! Vertex AI at `{publisher}/models/count-tokens:rawPredict` (the model named in the body),
//! Bedrock at `/model/{model}/count-tokens` (the InvokeModel body it would count, in base64).

use base64::Engine;
use reqwest::header::{HeaderName, CONTENT_TYPE};
use serde_json::Value;

use super::native::{self, Speaker};
use super::{classify, request_body, API_VERSION};
use crate::adapter::transport::http;
use crate::adapter::{Call, Transport};
use crate::canonical::{ChatRequest, Dialect, ErrorClass, UpstreamError};

/// The input tokens of `req`, sent as `call`, as Claude at `speaker` (Anthropic, Bedrock or
/// Vertex AI) counts them.
pub(in crate::adapter) async fn count_tokens(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
    speaker: Speaker,
) -> Result<u32, UpstreamError> {
    let base = call.upstream.base_url.trim_end_matches('/');
    let client = req.native.as_ref().filter(|n| n.dialect == Dialect::AnthropicMessages);
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    let betas = client.and_then(|n| n.header("anthropic-beta")).map(|h| native::betas_for(speaker, h));
    let betas = betas.filter(|b| !b.is_empty());
    if let (Some(betas), false) = (&betas, speaker == Speaker::Bedrock) {
        headers.push((HeaderName::from_static("anthropic-beta"), betas.join(",")));
    }
    let mut body = match client {
        Some(client) => native::body(req, call, client, speaker),
        None => request_body(req, call),
    };
    // The count route takes what a request is, not how to answer it.
    if let Some(body) = body.as_object_mut() {
        for field in ["max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata"] {
            body.remove(field);
        }
        if let Some(version) = speaker.body_version() {
            body.insert("anthropic_version".into(), version.into());
        }
    }
    let (url, classify): (String, http::Classify) = match speaker {
        Speaker::Vertex => (format!("{base}/models/count-tokens:rawPredict"), super::vertex::classify),
        Speaker::Bedrock => {
            // The InvokeModel body it would count: no model, the betas inside, a `max_tokens`.
            if let Some(invoke) = body.as_object_mut() {
                invoke.remove("model");
                invoke.insert("max_tokens".into(), 1.into());
                if let Some(betas) = &betas {
                    invoke.insert("anthropic_beta".into(), serde_json::json!(betas));
                }
            }
            let encoded = base64::engine::general_purpose::STANDARD.encode(body.to_string());
            body = serde_json::json!({"input": {"invokeModel": {"body": encoded}}});
            let model = crate::config::path_segment(call.model);
            (format!("{base}/model/{model}/count-tokens"), crate::adapter::bedrock::classify)
        }
        _ => {
            let version = client.and_then(|n| n.header("anthropic-version")).unwrap_or(API_VERSION);
            headers.push((HeaderName::from_static("anthropic-version"), version.to_string()));
            if let Some(key) = &call.upstream.api_key {
                headers.push((HeaderName::from_static("x-api-key"), key.clone()));
            }
            (format!("{base}/v1/messages/count_tokens"), classify)
        }
    };
    let body = body.to_string().into_bytes();
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, classify).await?;
    let json = http::read_json(answer).await?;
    // Bedrock's answer is `{"inputTokens"}`, the others' `{"input_tokens"}`.
    let counted = json.get("input_tokens").or(json.get("inputTokens")).and_then(Value::as_u64);
    counted.map(|n| n.min(u64::from(u32::MAX)) as u32).ok_or_else(|| {
        UpstreamError::new(ErrorClass::StreamBroken, None, "the count answer has no input token count")
    })
}
