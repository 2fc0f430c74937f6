//! OpenAI Chat Completions: `POST {base_url}/chat/completions` (the base URL already ends in
//! `/v1`), the key as the upstream takes it, the body typed ([`ChatBody`]) and the answer read
//! by [`OpenAiStream`] or, whole, by [`parse_response`].

use super::error::classify;
use super::request::{written_body, ChatBody};
use super::stream::{parse_response, OpenAiStream};
use crate::adapter::transport::http;
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{ChatRequest, UpstreamError};
use reqwest::header::{ACCEPT, CONTENT_TYPE};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let upstream = &call.upstream;
    let url = upstream.url("chat/completions");
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(upstream.openai_key());
    if call.stream {
        headers.push((ACCEPT, "text/event-stream".to_string()));
    }
    // `prompt_cache_key` goes to OpenAI itself only (the upstream that serves Responses).
    let cache_key = upstream.serves_responses;
    let written = req.written.as_ref().and_then(|w| written_body(w, req, call, cache_key));
    let body = written.unwrap_or_else(|| {
        serde_json::to_vec(&ChatBody::of(req, call, cache_key)).expect("a typed body serialises")
    });
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, classify).await?;
    Ok(http::answer_events(
        answer,
        call.stream,
        OpenAiStream::new(req.relaying(req.native.is_none())),
        parse_response,
    ))
}

/// The Chat Completions request body for `call` of `req`, as a JSON tree (the tests read it).
#[cfg(test)]
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> serde_json::Value {
    serde_json::to_value(ChatBody::of(req, call, call.upstream.serves_responses)).expect("a body serialises")
}

#[cfg(test)]
#[path = "chat_tests.rs"]
mod tests;
