//! The pipeline's side of HTTP headers: the priority a client asks for, and the
//! `x-spillway-*` headers every answer carries (which backend served, its model, the attempts,
//! the first token's time, the spill reason, the prediction, its cost).

use axum::http::{HeaderMap, HeaderValue};

use super::error::ApiError;
use crate::config::Priority;
use crate::dispatch::Committed;
use crate::dispatch::CostCell;
use crate::route::Reason;

/// The priority the client asked for in `x-spillway-priority`, if any.
pub(super) fn priority(headers: &HeaderMap) -> Result<Option<Priority>, ApiError> {
    const NAME: &str = "x-spillway-priority";
    let Some(value) = headers.get(NAME) else { return Ok(None) };
    let text = value
        .to_str()
        .map_err(|_| ApiError::bad_request(format!("header {NAME} is not text")).param(NAME))?;
    Priority::parse(text).map(Some).ok_or_else(|| {
        let all: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
        ApiError::bad_request(format!("{NAME} `{text}` is not one of {}", all.join(", "))).param(NAME)
    })
}

/// The `x-spillway-*` headers of a committed answer.
pub(super) fn spillway_headers(c: &Committed) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&c.backend) {
        headers.insert("x-spillway-backend", v);
    }
    if let Ok(v) = HeaderValue::from_str(&c.model) {
        headers.insert("x-spillway-model", v);
    }
    headers.insert("x-spillway-attempts", HeaderValue::from(c.attempts));
    headers.insert("x-spillway-ttft-ms", HeaderValue::from(c.ttft.as_millis() as u64));
    if let Some(spill) = c.spill {
        headers.insert("x-spillway-spill", HeaderValue::from_static(spill.as_str()));
    }
    if let Some(predicted) = c.predicted_ttft_ms {
        headers.insert("x-spillway-predicted-ttft-ms", HeaderValue::from(predicted));
    }
    // A local node served without telemetry (its pool has no fresh scrape and nothing else
    // could take the request): there was no headroom to predict from.
    if matches!(c.reason, Reason::Unmeasured { .. }) {
        headers.insert("x-spillway-headroom", HeaderValue::from_static("unmeasured"));
    }
    headers
}

/// `x-spillway-queue` (`waited`: it took a local slot that freed; `spilled`: it left the queue
/// for its spill chain) and `x-spillway-queue-ms`, for a request that met a full pool whose
/// slot was predicted in time (`serve::wait`).
pub(super) fn add_queue_headers(
    headers: &mut HeaderMap,
    queued: Option<(&'static str, std::time::Duration)>,
) {
    if let Some((outcome, waited)) = queued {
        headers.insert("x-spillway-queue", HeaderValue::from_static(outcome));
        headers.insert("x-spillway-queue-ms", HeaderValue::from(waited.as_millis() as u64));
    }
}

/// `x-spillway-cost-usd`: the answer's cost, once its usage is in (a non-streamed answer, read
/// to its end). A stream's cost is known only at its end, after the headers were sent: it
/// comes in the final usage chunk instead, and its headers carry none.
pub fn add_cost_header(headers: &mut HeaderMap, cost: &CostCell) {
    if let Some(v) = cost.get().and_then(|c| HeaderValue::from_str(&c.to_string()).ok()) {
        headers.insert("x-spillway-cost-usd", v);
    }
}
