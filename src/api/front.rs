//! What every dialect's front door does before it decodes: [`receive`] authenticates the
//! client, reads the body and takes an admission permit. The door then decodes its wire format
//! and hands the request to the pipeline (`crate::serve`), and encodes the committed event
//! stream back into its wire format.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderValue};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::{ApiError, ErrorCode};
use super::request_id::RequestId;
use super::AppState;
use crate::canonical::Principal;
use crate::serve::Arrival;
use crate::serve::Serving;
use crate::trace::RequestSpan;

/// What a front door checks before it decodes: who may send, how many at once, how big and
/// how slow a body may be.
#[derive(Clone)]
pub struct Door {
    /// The client keys (neither kind configured: no auth).
    pub client_keys: Arc<crate::keys::KeyBoard>,
    /// Admission control: the global concurrency limit.
    pub limiter: Arc<Semaphore>,
    pub max_body_bytes: usize,
    /// How long a request body may take to arrive.
    pub body_read_timeout: std::time::Duration,
}

/// What a dialect's door reads of the router: the pipeline and the front door's checks, never
/// the operator's state.
#[derive(Clone)]
pub(crate) struct Doors {
    pub serving: Arc<Serving>,
    pub door: Door,
}

impl axum::extract::FromRef<AppState> for Doors {
    fn from_ref(state: &AppState) -> Doors {
        Doors { serving: Arc::clone(&state.serving), door: state.door.clone() }
    }
}

/// A request received by a front door: who sent it, its body, and its share of the router's
/// concurrency (held until the answer has been written).
pub(crate) struct Received {
    pub arrived_at: SystemTime,
    pub principal: Option<Principal>,
    pub body: Bytes,
    pub admission: OwnedSemaphorePermit,
}

impl Received {
    /// What the core needs to know of the request's arrival.
    pub(crate) fn arrival<'a>(
        &self,
        request_id: String,
        trace: Option<RequestSpan>,
        headers: &'a HeaderMap,
    ) -> Arrival<'a> {
        Arrival {
            arrived_at: self.arrived_at,
            request_id,
            principal: self.principal.clone(),
            headers,
            priority: None,
            pin: None,
            owned: None,
            fleet_only: false,
            trace,
        }
    }
}

/// What a front door's route is handed: what doors read, the request's id (set by the
/// request-id layer), its server span (set by the trace layer, when tracing is on) and the
/// request itself, unread.
pub(crate) struct Incoming {
    pub state: Doors,
    pub request_id: String,
    pub trace: Option<RequestSpan>,
    pub headers: HeaderMap,
    pub body: Body,
}

impl FromRequest<AppState> for Incoming {
    type Rejection = Infallible;

    async fn from_request(request: Request, state: &AppState) -> Result<Incoming, Infallible> {
        let (parts, body) = request.into_parts();
        let request_id =
            parts.extensions.get::<RequestId>().map_or_else(String::new, |RequestId(id)| id.clone());
        let trace = parts.extensions.get::<RequestSpan>().cloned();
        let state = axum::extract::FromRef::from_ref(state);
        Ok(Incoming { state, request_id, trace, headers: parts.headers, body })
    }
}

/// Authenticate, read the JSON body, then take an admission permit: only once the body is in,
/// so a slow sender never holds a permit.
pub(crate) async fn receive(state: &Doors, headers: &HeaderMap, body: Body) -> Result<Received, ApiError> {
    let door = &state.door;
    let arrived_at = SystemTime::now();
    let principal = super::authenticate(&door.client_keys, headers)?;
    let body = super::body::read_json(headers, body, door.max_body_bytes, door.body_read_timeout).await?;
    let admission = admit(door)?;
    Ok(Received { arrived_at, principal, body, admission })
}

/// A share of the router's concurrency (the global limit), or the refusal when none is left.
pub(crate) fn admit(door: &Door) -> Result<OwnedSemaphorePermit, ApiError> {
    Arc::clone(&door.limiter).try_acquire_owned().map_err(|_| {
        ApiError::new(ErrorCode::RouterOverloaded, "Spillway is at its concurrency limit; retry shortly")
            .retry_after(1)
    })
}

/// A request's headers, as the pipeline reads them.
impl crate::serve::Headers for HeaderMap {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(|v| v.as_bytes())
    }
}

/// Write the pipeline's answer headers (`x-spillway-*`) on a response.
pub(crate) fn add_headers(headers: &mut HeaderMap, values: impl IntoIterator<Item = (&'static str, String)>) {
    for (name, value) in values {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}
