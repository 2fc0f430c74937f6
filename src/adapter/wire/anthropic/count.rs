//! Claude's own token count: exact, free, and the only exact count there is for Claude models,
//! whose tokenizer is not public. Each host serves it on its own route ([`ClaudeHost::count`]):
//! Anthropic at `POST /v1/messages/count_tokens`, Vertex AI at
//! `{publisher}/models/count-tokens:rawPredict` (the model named in the body), Bedrock at
//! `/model/{model}/count-tokens` (the InvokeModel body it would count, in base64). The counted
//! body is the one the request would be sent with, less what says how to answer.

use serde_json::Value;

use super::body::Purpose;
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
    let (mut headers, betas) = super::headers(call, req, host);
    let Some((url, fields)) = host.count(&call.upstream.base_url, call.model, &betas) else {
        return Err(UpstreamError::new(ErrorClass::InvalidRequest, None, "this host counts no tokens"));
    };
    // The count route takes what a request is, not how to answer it.
    let counted = super::body(call, req, host, fields, Purpose::Count);
    let body = host.count_body(serde_json::to_vec(&counted).expect("a typed body serialises"));
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, host.classify()).await?;
    let json = http::read_json(answer).await?;
    // Bedrock's answer is `{"inputTokens"}`, the others' `{"input_tokens"}`.
    let counted = json.get("input_tokens").or(json.get("inputTokens")).and_then(Value::as_u64);
    counted.map(|n| n.min(u64::from(u32::MAX)) as u32).ok_or_else(|| {
        UpstreamError::new(ErrorClass::StreamBroken, None, "the count answer has no input token count")
    })
}
