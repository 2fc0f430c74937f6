//! Each dialect's door as functions that speak no HTTP (a [`DialectDoor`]): `decode` (the body's
//! bytes → the request, its `model`, what it tells the pipeline beside its canonical form, and
//! the canonical request once the task is known), `encode_whole` (the pipeline's answer → the
//! whole answer's JSON body in the dialect) and `envelope` (a refusal's status and body in the
//! dialect). A door's HTTP route wraps them (receive, stream, headers; [`respond_whole`]); the
//! batch runner calls the same functions in process (`batches::lines`), so a line is decoded,
//! served and worded exactly as a request from the network is, with no HTTP round trip.
//!
//! The answers written from canonical parts are gathered by one accumulator
//! ([`WholeAnswer`], through [`whole_answer`]); Messages and Responses read the same events
//! with [`read_to_end`] into their own encoders, which keep the order of blocks and items.
//! Nothing here routes, retries or prices.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use super::error::ApiError;
use crate::canonical::{ChatRequest, Event, EventStream, WholeAnswer};
use crate::config::TaskConfig;
use crate::serve::{self, Arrival, Headers, Served, Serving};

/// One client dialect's door, without HTTP.
pub(crate) trait DialectDoor {
    /// A decoded request, with what its door derived from it before the pipeline.
    type Request: Send + Sync;

    /// The request in a body, or why it is refused.
    fn decode(body: &Bytes) -> Result<Self::Request, ApiError>;

    /// The task (or alias, or model) its `model` names.
    fn model(request: &Self::Request) -> &str;

    /// What the request tells the pipeline beside its canonical form (content only one
    /// provider takes, state that pins it to one backend).
    fn arrive(_request: &Self::Request, _arrival: &mut Arrival<'_>) {}

    /// The canonical request, once its task is known. It may move out of `request` what no
    /// later step reads (a chat request's conversation and tools).
    fn to_canonical(
        request: &mut Self::Request,
        headers: &dyn Headers,
        task: &TaskConfig,
    ) -> Result<ChatRequest, ApiError>;

    /// A refusal of the pipeline's, in the dialect's terms.
    fn refusal(error: ApiError) -> ApiError {
        error
    }

    /// The whole answer's JSON body, read to the end of the committed events.
    fn encode_whole(request: &Self::Request, served: Served) -> impl Future<Output = WholeBody> + Send;

    /// An error's status and body, in the dialect's envelope.
    fn envelope(error: &ApiError) -> (u16, Value);
}

/// A whole answer's JSON body, or the error that ended it.
pub(crate) type WholeBody = Result<Vec<u8>, ApiError>;

/// A decoded request through the pipeline.
pub(crate) async fn serve<D: DialectDoor>(
    serving: &Serving,
    mut arrival: Arrival<'_>,
    request: &mut D::Request,
) -> Result<Served, ApiError> {
    D::arrive(request, &mut arrival);
    let headers = arrival.headers;
    let model = D::model(request).to_owned();
    serve::serve(serving, arrival, &model, |task| D::to_canonical(request, headers, task))
        .await
        .map_err(D::refusal)
}

/// Read a committed answer to its end, each event to `add`; an upstream's failure on the way
/// is the answer's error.
pub(crate) async fn read_to_end(
    mut events: EventStream,
    backend: &str,
    mut add: impl FnMut(Event) + Send,
) -> Result<(), ApiError> {
    while let Some(item) = events.next().await {
        match item {
            Ok(event) => add(event),
            Err(e) => return Err(ApiError::from_upstream(backend, &e)),
        }
    }
    Ok(())
}

/// A committed answer gathered whole.
pub(crate) async fn whole_answer(events: EventStream, backend: &str) -> Result<WholeAnswer, ApiError> {
    let mut whole = WholeAnswer::default();
    read_to_end(events, backend, |event| whole.take(event)).await?;
    Ok(whole)
}

/// The whole answer as an HTTP response, with the pipeline's `x-spillway-*` headers and its
/// cost; `admission` is held until the answer has been read.
pub(crate) async fn respond_whole<D: DialectDoor>(
    request: &D::Request,
    mut served: Served,
    admission: OwnedSemaphorePermit,
) -> Result<Response, ApiError> {
    let headers = std::mem::take(&mut served.headers);
    let cost = Arc::clone(&served.cost);
    let body = D::encode_whole(request, served).await?;
    drop(admission);
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    super::front::add_headers(response.headers_mut(), headers.into_iter().chain(serve::cost_header(&cost)));
    Ok(response)
}

/// A JSON value as a body.
pub(crate) fn to_body(json: &Value) -> Vec<u8> {
    serde_json::to_vec(json).expect("a JSON value serialises")
}
