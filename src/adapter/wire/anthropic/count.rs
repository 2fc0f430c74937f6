//! Claude's own token count: exact, free, and the only exact count there is for Claude models,
//! whose tokenizer is not public. Each host serves it on its own route ([`ClaudeHost::count`]):
//! Anthropic at `POST /v1/messages/count_tokens`, Vertex AI at
//! `{publisher}/models/count-tokens:rawPredict` (the model named in the body), Bedrock at
//! `/model/{model}/count-tokens` (the InvokeModel body it would count, in base64).

use serde_json::Value;

use super::host::ClaudeHost;
use crate::adapter::transport::http;
use crate::adapter::{Call, Transport};
use crate::canonical::{ChatRequest, ErrorClass, UpstreamError};

/// The input tokens of `req`, sent as `call`, as Claude at `host` counts them.
pub(in crate::adapter) async fn count_tokens(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
    host: &dyn ClaudeHost,
) -> Result<u32, UpstreamError> {
    let (mut headers, mut body) = super::prepared(call, req, host);
    // The count route takes what a request is, not how to answer it.
    for field in ["max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata"] {
        body.remove(field);
    }
    let Some((url, body)) = host.count(&call.upstream.base_url, call.model, body) else {
        return Err(UpstreamError::new(ErrorClass::InvalidRequest, None, "this host counts no tokens"));
    };
    let body = body.to_string().into_bytes();
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, host.classify()).await?;
    let json = http::read_json(answer).await?;
    // Bedrock's answer is `{"inputTokens"}`, the others' `{"input_tokens"}`.
    let counted = json.get("input_tokens").or(json.get("inputTokens")).and_then(Value::as_u64);
    counted.map(|n| n.min(u64::from(u32::MAX)) as u32).ok_or_else(|| {
        UpstreamError::new(ErrorClass::StreamBroken, None, "the count answer has no input token count")
    })
}
