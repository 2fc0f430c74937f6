//! Amazon Bedrock's Converse API, for the models Bedrock serves that are not Claude (Llama,
//! Mistral, Nova, ...): `POST {base}/model/{model}/converse`, or `/converse-stream`, whose
//! events come in event-stream frames ([`crate::adapter::transport::eventstream`]). The body is
//! typed ([`request::ConverseBody`]), the answer read by [`stream::ConverseStream`]; errors are
//! Bedrock's (`provider::bedrock::errors`).

pub mod request;
pub mod stream;

use reqwest::header::{ACCEPT, CONTENT_TYPE};

use request::ConverseBody;
use stream::{parse_response, ConverseStream};

use crate::adapter::provider::bedrock::errors::classify;
use crate::adapter::transport::{eventstream, http};
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{ChatRequest, UpstreamError};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let verb = if call.stream { "converse-stream" } else { "converse" };
    let base = call.upstream.base_url.trim_end_matches('/');
    let url = format!("{base}/model/{}/{verb}", crate::config::path_segment(call.model));
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    if call.stream {
        headers.push((ACCEPT, eventstream::CONTENT_TYPE.to_string()));
    }
    let body = serde_json::to_vec(&ConverseBody::of(req, call)).expect("a typed body serialises");
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = eventstream::unframed(http::post(transport, &url, &headers, body, classify).await?);
    Ok(http::answer_events(answer, call.stream, ConverseStream::default(), parse_response))
}

/// The body for `call` of `req`, as a JSON tree (the tests read it).
#[cfg(test)]
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> serde_json::Value {
    serde_json::to_value(ConverseBody::of(req, call)).expect("a body serialises")
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
