//! Anthropic's own token count (`POST /v1/messages/count_tokens`): exact, free, and the only
//! exact count there is for Claude models, whose tokenizer is not public.

use reqwest::header::{HeaderName, CONTENT_TYPE};
use serde_json::Value;

use super::{classify, native, request_body, API_VERSION};
use crate::adapter::{http, Call, Transport};
use crate::canonical::{ChatRequest, Dialect, ErrorClass, UpstreamError};

/// The input tokens of `req`, sent as `call`, as Anthropic counts them.
pub async fn count_tokens(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<u32, UpstreamError> {
    let url = format!("{}/v1/messages/count_tokens", call.upstream.base_url.trim_end_matches('/'));
    let client = req.native.as_ref().filter(|n| n.dialect == Dialect::AnthropicMessages);
    let version = client.and_then(|n| n.header("anthropic-version")).unwrap_or(API_VERSION);
    let mut headers = vec![
        (HeaderName::from_static("anthropic-version"), version.to_string()),
        (CONTENT_TYPE, "application/json".to_string()),
    ];
    if let Some(beta) = client.and_then(|n| n.header("anthropic-beta")) {
        headers.push((HeaderName::from_static("anthropic-beta"), beta.to_string()));
    }
    if let Some(key) = &call.upstream.api_key {
        headers.push((HeaderName::from_static("x-api-key"), key.clone()));
    }
    let mut body = match client {
        Some(client) => native::body(req, call, client, native::Speaker::Anthropic),
        None => request_body(req, call),
    };
    // The count route takes what a request is, not how to answer it.
    if let Some(body) = body.as_object_mut() {
        for field in ["max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata"] {
            body.remove(field);
        }
    }
    let answer = http::post(transport, &url, &headers, body.to_string().into_bytes(), classify).await?;
    let json = http::read_json(answer).await?;
    json.get("input_tokens").and_then(Value::as_u64).map(|n| n.min(u64::from(u32::MAX)) as u32).ok_or_else(
        || UpstreamError::new(ErrorClass::StreamBroken, None, "the count answer has no input_tokens"),
    )
}
