//! Gemini API (Google AI): `generateContent` and `streamGenerateContent?alt=sse`.
//!
//! `POST {base_url}/models/{model}:generateContent` (the base URL ends in `/v1beta`), key in
//! `x-goog-api-key` (Vertex AI's Gemini: a Google token instead). The body is typed
//! ([`request::GenerateContent`]), the answer read by [`stream::GeminiStream`].

pub mod error;
pub mod request;
pub mod stream;

use reqwest::header::{HeaderName, ACCEPT, CONTENT_TYPE};

pub(in crate::adapter) use error::classify;
use request::GenerateContent;
use stream::{parse_response, GeminiStream};

use crate::adapter::transport::http;
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{ChatRequest, UpstreamError};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let url = url(&call.upstream.base_url, call.model, call.stream);
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    if let Some(key) = &call.upstream.api_key {
        headers.push((HeaderName::from_static("x-goog-api-key"), key.clone()));
    }
    if call.stream {
        headers.push((ACCEPT, "text/event-stream".to_string()));
    }
    let body = serde_json::to_vec(&GenerateContent::of(req, call)).expect("a typed body serialises");
    // Vertex AI's Gemini: a Google token instead of the key.
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, classify).await?;
    Ok(http::answer_events(answer, call.stream, GeminiStream::new(), parse_response))
}

fn url(base_url: &str, model: &str, stream: bool) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
    format!("{}/models/{model}:{method}", base_url.trim_end_matches('/'))
}

/// The body for `call` of `req`, as a JSON tree (the tests read it).
#[cfg(test)]
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> serde_json::Value {
    serde_json::to_value(GenerateContent::of(req, call)).expect("a body serialises")
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
