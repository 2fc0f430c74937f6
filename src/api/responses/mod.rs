//! `POST /v1/responses`: OpenAI's Responses dialect, stateless. It decodes the request
//! (`decode.rs`, `items.rs`), hands it to the shared core (`serve::serve`: task, key, plan,
//! dispatch, ledger, metrics, shadow tap, all as for chat), and encodes the committed event
//! stream as a Response object (`object.rs`) or as Responses SSE events (`events.rs`). Its
//! decode and whole answer are a [`DialectDoor`], which batch lines go through too.
//!
//! Dispatch commits at the first output event, and `response.created` is written only after
//! that, so an upstream that fails before its first token is failed over like any other; a
//! failure after it ends the stream with `response.failed` and `error`, never another model's
//! text. The admission permit is held until the last byte of the answer is written.
//!
//! What leans on state OpenAI keeps (`store: true`, `previous_response_id`, `conversation`,
//! `item_reference` items) pins the request to the task's first backend when that is OpenAI
//! itself (`serve::Pinning`): the client's body goes there as written, and OpenAI's own events
//! come back as they came (`relay.rs`). For any other task it is refused, naming the field.
//!
//! `GET /v1/responses` upgraded to a WebSocket (Codex's first choice) carries the same requests
//! as messages, each served through this door (`socket.rs`).

mod decode;
mod events;
mod items;
mod object;
mod refuse;
mod relay;
mod socket;
mod toolset;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;

use super::error::ApiError;
use super::frames::{sse_frames, FrameWriter, Frames, Next};
use super::front::{self, Incoming};
use super::whole::{self, DialectDoor, WholeBody};
use crate::canonical::{ChatRequest, Event, EventStream};
use crate::config::TaskConfig;
use crate::serve::owned::{Owned, OwnersOnly};
use crate::serve::{self, Arrival, Headers, Pinning, Served};
use events::Encoder;
use object::Head;
use relay::Relay;
pub(crate) use socket::{upgrade, Sockets};

/// OpenAI's Responses.
pub(crate) struct Responses;

/// The canonical request of a Responses `body` that leans on no state kept at OpenAI.
pub(super) fn canonical(body: &bytes::Bytes, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
    let request = decode::decode(body)?;
    request.to_canonical(output_cap, &request.toolset()?, false)
}

/// A decoded Responses request, with its tools read and what pins it to OpenAI, if anything.
pub(crate) struct Prepared {
    request: decode::ResponsesRequest,
    toolset: Arc<toolset::Toolset>,
    /// State kept at OpenAI: the request is pinned there, or refused with this.
    pinned: Option<ApiError>,
}

impl DialectDoor for Responses {
    type Request = Prepared;

    fn decode(body: &bytes::Bytes) -> Result<Prepared, ApiError> {
        let request = decode::decode(body)?;
        let pinned = request.needs_openai_state();
        let toolset = Arc::new(request.toolset()?);
        Ok(Prepared { request, toolset, pinned })
    }

    fn model(prepared: &Prepared) -> &str {
        &prepared.request.model
    }

    /// State kept at OpenAI pins the request there (or is refused), with the body as sent;
    /// OpenAI gets the body as written, any other backend the tools and reasoning it can take.
    fn arrive(prepared: &Prepared, arrival: &mut Arrival<'_>) {
        if let Some(refusal) = &prepared.pinned {
            arrival.pin = Some(Pinning { owned: Owned::OpenAis, refusal: refusal.clone() });
        }
        arrival.owned = Some(OwnersOnly {
            owned: Owned::OpenAis,
            tools: prepared.toolset.dropped.clone(),
            content: prepared.request.carries_openais_own().then_some("reasoning"),
        });
    }

    fn to_canonical(
        prepared: &mut Prepared,
        _: &dyn Headers,
        task: &TaskConfig,
    ) -> Result<ChatRequest, ApiError> {
        let Prepared { request, toolset, pinned } = prepared;
        request.to_canonical(task.max_output_tokens, toolset, pinned.is_some())
    }

    fn refusal(error: ApiError) -> ApiError {
        decode::in_responses_terms(error)
    }

    /// The Response object: the backend's own when it was relayed, else the encoder's.
    async fn encode_whole(prepared: &Prepared, served: Served) -> WholeBody {
        let Served { committed, task, .. } = served;
        let mut encoder = Encoder::new(head(prepared, task), false);
        let mut relayed = None;
        whole::read_to_end(committed.events, &committed.backend, |event| match event {
            Event::Native(native) => {
                relayed = relay::final_response(&native, encoder.model()).or(relayed.take())
            }
            event => encoder.add(&event),
        })
        .await?;
        Ok(whole::to_body(&relayed.unwrap_or_else(|| encoder.finish())))
    }

    fn envelope(error: &ApiError) -> (u16, serde_json::Value) {
        (error.status, error.body())
    }
}

/// The answer's head: its id, when it was created (now, after commit: OpenAI's `created_at`),
/// the task as its model, and what it echoes of the request.
fn head(prepared: &Prepared, task: String) -> Head {
    let created_at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let echo = object::echo(&prepared.request);
    Head { id: new_response_id(), created_at, model: task, echo, tools: Arc::clone(&prepared.toolset) }
}

pub async fn responses(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, &headers, body).await?;
    let mut prepared = Responses::decode(&received.body)?;
    let arrival = received.arrival(request_id, trace, &headers);
    let admission = received.admission;
    let served = whole::serve::<Responses>(&state.serving, arrival, &mut prepared).await?;
    if !prepared.request.wants_stream() {
        return whole::respond_whole::<Responses>(&prepared, served, admission).await;
    }
    let Served { committed, task, headers: spillway_headers, cost, .. } = served;
    let encoder = Encoder::new(head(&prepared, task), true);
    let body = Body::from_stream(sse_body(committed.events, committed.backend, encoder, admission));
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    front::add_headers(response.headers_mut(), spillway_headers.into_iter().chain(serve::cost_header(&cost)));
    Ok(response)
}

/// A `generate: false` request (the WebSocket mode's warm-up): checked as a request is, and
/// answered as a streamed response with no output, from no backend.
fn warmed(body: &bytes::Bytes) -> Result<Vec<u8>, ApiError> {
    let request = decode::decode(body)?;
    let tools = Arc::new(request.toolset()?);
    let created_at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let echo = object::echo(&request);
    let head = Head { id: new_response_id(), created_at, model: request.model.clone(), echo, tools };
    let mut encoder = Encoder::new(head, true);
    encoder.start();
    encoder.finish();
    Ok(encoder.take_frames())
}

fn new_response_id() -> String {
    format!("resp_{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>())
}

/// The SSE body: the opening events (the encoder's, unless the first event is relayed), then
/// the events as they come; `hold` lives as long as the body. A relayed answer is written by
/// [`Relay`] (its canonical events are not written), any other by the encoder.
fn sse_body<H: Send + Unpin + 'static>(
    events: EventStream,
    backend: String,
    encoder: Encoder,
    hold: H,
) -> Frames {
    sse_frames(events, ResponsesFrames { backend, encoder, relay: None }, hold)
}

/// A streamed Response's events, as [`sse_frames`] feeds them.
struct ResponsesFrames {
    backend: String,
    encoder: Encoder,
    relay: Option<Relay>,
}

impl FrameWriter for ResponsesFrames {
    fn open(&mut self, first: &Next) {
        match first {
            Some(Ok(Event::Native(_))) => self.relay = Some(Relay::new(self.encoder.model().to_string())),
            _ => self.encoder.start(),
        }
    }

    fn write(&mut self, next: Next) -> bool {
        match (next, &mut self.relay) {
            (Some(Ok(Event::Native(event))), Some(relay)) => relay.event(&event),
            (Some(Ok(_)), Some(_)) => {}
            (Some(Ok(event)), None) => self.encoder.add(&event),
            (Some(Err(e)), relay) => {
                let error = ApiError::from_upstream(&self.backend, &e);
                match relay {
                    Some(relay) => relay.fail(&error),
                    None => self.encoder.fail(&error),
                }
                return true;
            }
            (None, relay) => {
                if relay.is_none() {
                    self.encoder.finish();
                }
                return true;
            }
        }
        false
    }

    fn pending(&self) -> usize {
        self.relay.as_ref().map_or(self.encoder.pending(), Relay::pending)
    }

    fn take(&mut self) -> Vec<u8> {
        match &mut self.relay {
            Some(relay) => relay.take_frames(),
            None => self.encoder.take_frames(),
        }
    }
}
