//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages dialect, for
//! the coding agents that speak only it. The door reads and decodes the request (keeping the
//! client's body for backends that speak Messages themselves), hands it to the shared core
//! (`serve::serve`: task, key, plan, spill, dispatch, ledger, metrics), and answers as a
//! `message` object or Anthropic's event stream. Every error leaves in Anthropic's envelope.
//! Its decode and whole answer are a [`DialectDoor`], which batch lines go through too.

mod answer;
mod blocks;
mod decode;
mod error;
mod stream;

use decode::Asked;

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::error::ApiError;
use super::front::{self, Incoming};
use super::whole::{self, DialectDoor, WholeBody};
use crate::canonical::ChatRequest;
use crate::config::TaskConfig;
use crate::serve::owned::{Owned, OwnersOnly};
use crate::serve::{self, Arrival, Headers, Served};

pub use error::response as error_response;

/// Anthropic's Messages.
pub(crate) struct Messages;

/// The canonical request of a Messages `body`, as the door reads it with no headers.
pub(super) fn canonical(body: &bytes::Bytes, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
    decode::decode(body, Asked::Answer)?.to_canonical(&axum::http::HeaderMap::new(), output_cap)
}

impl DialectDoor for Messages {
    type Request = decode::Decoded;

    fn decode(body: &bytes::Bytes) -> Result<decode::Decoded, ApiError> {
        decode::decode(body, Asked::Answer)
    }

    fn model(request: &decode::Decoded) -> &str {
        &request.model
    }

    /// Anthropic's server tools and thinking signatures reach only a provider that takes them.
    fn arrive(request: &decode::Decoded, arrival: &mut Arrival<'_>) {
        arrival.owned = Some(OwnersOnly {
            owned: Owned::Anthropics,
            tools: request.server_tools(),
            content: request.carries_anthropics_own().then_some("thinking"),
        });
    }

    fn to_canonical(
        request: &mut decode::Decoded,
        headers: &dyn Headers,
        task: &TaskConfig,
    ) -> Result<ChatRequest, ApiError> {
        request.to_canonical(headers, task.max_output_tokens)
    }

    /// The `message` object, under the model the client named.
    async fn encode_whole(request: &decode::Decoded, served: Served) -> WholeBody {
        let Served { committed, .. } = served;
        let mut answer = answer::Answer::default();
        whole::read_to_end(committed.events, &committed.backend, |event| answer.add(event)).await?;
        Ok(whole::to_body(&answer.into_json(&new_id(), &request.model)))
    }

    fn envelope(e: &ApiError) -> (u16, Value) {
        (error::status_and_type(e).0.as_u16(), error::body(e))
    }
}

fn new_id() -> String {
    format!("msg_{:024x}", rand::random::<u128>() >> 32)
}

pub async fn messages(incoming: Incoming) -> Response {
    handle(incoming).await.unwrap_or_else(|e| error::response(&e))
}

async fn handle(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, &headers, body).await?;
    let mut decoded = Messages::decode(&received.body)?;
    let arrival = received.arrival(request_id, trace, &headers);
    let admission = received.admission;
    let served = whole::serve::<Messages>(&state.serving, arrival, &mut decoded).await?;
    if !decoded.wants_stream() {
        return whole::respond_whole::<Messages>(&decoded, served, admission).await;
    }
    let Served { committed, headers: spillway_headers, cost, estimated_prompt_tokens, .. } = served;
    let head = stream::Head {
        id: new_id(),
        model: decoded.model.clone(),
        estimated_input_tokens: estimated_prompt_tokens,
    };
    let mut response = stream::response(committed.events, committed.backend.clone(), head, admission);
    front::add_headers(response.headers_mut(), spillway_headers.into_iter().chain(serve::cost_header(&cost)));
    Ok(response)
}

/// `POST /v1/messages/count_tokens`: the request's input tokens for the backend that would
/// serve it now (the plan's first choice). `x-spillway-token-count` says `exact` or
/// `estimate`, `x-spillway-backend` whose count it is.
pub async fn count_tokens(incoming: Incoming) -> Response {
    count(incoming).await.unwrap_or_else(|e| error::response(&e))
}

async fn count(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, headers, body, .. } = incoming;
    let received = front::receive(&state, &headers, body).await?;
    let decoded = decode::decode(&received.body, Asked::Count)?;
    let principal = received.principal.as_ref();
    let to_canonical = || decoded.to_canonical(&headers, None);
    let (counted, backend) =
        serve::count_tokens(&state.serving, principal, &decoded.model, to_canonical).await?;
    let mut response = axum::Json(json!({"input_tokens": counted.input_tokens})).into_response();
    let label = if counted.exact { "exact" } else { "estimate" };
    response.headers_mut().insert("x-spillway-token-count", HeaderValue::from_static(label));
    if let Ok(name) = HeaderValue::from_str(&backend) {
        response.headers_mut().insert("x-spillway-backend", name);
    }
    Ok(response)
}
