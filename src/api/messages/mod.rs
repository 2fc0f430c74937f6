//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages dialect, for
//! the coding agents that speak only it. The door reads and decodes the request (keeping the
//! client's body for backends that speak Messages themselves), hands it to the shared core
//! (`serve::serve`: task, key, plan, spill, dispatch, ledger, metrics), and answers as a
//! `message` object or Anthropic's event stream. Every error leaves in Anthropic's envelope.

mod answer;
mod blocks;
mod decode;
mod error;
mod stream;

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};

use super::error::ApiError;
use super::front::{self, Incoming};
use crate::serve::owned::{Owned, OwnersOnly};
use crate::serve::{self, Served};

pub use error::response as error_response;

pub async fn messages(incoming: Incoming) -> Response {
    handle(incoming).await.unwrap_or_else(|e| error::response(&e))
}

async fn handle(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, batch, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, batch.as_ref(), &headers, body).await?;
    let decoded = decode::decode(&received.body)?;
    let mut arrival = received.arrival(request_id, trace, &headers);
    arrival.owned = Some(OwnersOnly {
        owned: Owned::Anthropics,
        tools: decoded.server_tools(),
        content: decoded.carries_anthropics_own().then_some("thinking"),
    });
    let admission = received.admission;
    let mut estimated_input_tokens = 0;
    let Served { committed, headers: spillway_headers, cost, .. } =
        serve::serve(&state.serving, arrival, &decoded.model, |task| {
            let canonical = decoded.to_canonical(&headers, task.max_output_tokens)?;
            estimated_input_tokens = canonical.estimated_prompt_tokens();
            Ok(canonical)
        })
        .await?;
    let id = format!("msg_{:024x}", rand::random::<u128>() >> 32);
    let mut response = if decoded.wants_stream() {
        let head = stream::Head { id, model: decoded.model.clone(), estimated_input_tokens };
        stream::response(committed.events, committed.backend.clone(), head, admission)
    } else {
        let mut events = committed.events;
        let mut answer = answer::Answer::default();
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => answer.add(event),
                Err(e) => return Err(ApiError::from_upstream(&committed.backend, &e)),
            }
        }
        drop(admission);
        axum::Json(answer.into_json(&id, &decoded.model)).into_response()
    };
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
    let Incoming { state, batch, headers, body, .. } = incoming;
    let received = front::receive(&state, batch.as_ref(), &headers, body).await?;
    // A count takes a request without `max_tokens`; any placeholder will do.
    let mut body: serde_json::Map<String, Value> =
        super::wire::decode_json(&received.body, "a Messages request")?;
    body.entry("max_tokens").or_insert(json!(1));
    let decoded = decode::from_body(body)?;
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
