//! The pipeline's side of headers, without HTTP: the request's as the door hands them over
//! ([`Headers`]: the priority a client asks for, the affinity's sources), and the values of the
//! `x-spillway-*` headers every answer carries (which backend served, its model, the attempts,
//! the first token's time, the spill reason, the prediction, its cost), which the door writes.

use super::error::ApiError;
use crate::config::Priority;
use crate::dispatch::Committed;
use crate::dispatch::CostCell;
use crate::route::Reason;

/// A request's headers, as its door read them.
pub trait Headers: Sync {
    /// The value of the header `name` (in any case), if the request has it.
    fn header(&self, name: &str) -> Option<&[u8]>;
}

/// A request that came with no headers (a batch line, run in process).
pub struct NoHeaders;

impl Headers for NoHeaders {
    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }
}

/// The values of an answer's `x-spillway-*` headers, by name.
pub type AnswerHeaders = Vec<(&'static str, String)>;

/// The priority the client asked for in `x-spillway-priority`, if any.
pub(super) fn priority(headers: &dyn Headers) -> Result<Option<Priority>, ApiError> {
    const NAME: &str = "x-spillway-priority";
    let Some(value) = headers.header(NAME) else { return Ok(None) };
    let text = std::str::from_utf8(value)
        .map_err(|_| ApiError::bad_request(format!("header {NAME} is not text")).param(NAME))?;
    Priority::parse(text).map(Some).ok_or_else(|| {
        let all: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
        ApiError::bad_request(format!("{NAME} `{text}` is not one of {}", all.join(", "))).param(NAME)
    })
}

/// The `x-spillway-*` headers of a committed answer.
pub(super) fn spillway_headers(c: &Committed) -> AnswerHeaders {
    let mut headers = vec![
        ("x-spillway-backend", c.backend.clone()),
        ("x-spillway-model", c.model.clone()),
        ("x-spillway-attempts", c.attempts.to_string()),
        ("x-spillway-ttft-ms", c.ttft.as_millis().to_string()),
    ];
    if let Some(spill) = c.spill {
        headers.push(("x-spillway-spill", spill.as_str().to_string()));
    }
    if let Some(predicted) = c.predicted_ttft_ms {
        headers.push(("x-spillway-predicted-ttft-ms", predicted.to_string()));
    }
    // A local node served without telemetry (its pool has no fresh scrape and nothing else
    // could take the request): there was no headroom to predict from.
    if matches!(c.reason, Reason::Unmeasured { .. }) {
        headers.push(("x-spillway-headroom", "unmeasured".to_string()));
    }
    headers
}

/// `x-spillway-queue` (`waited`: it took a local slot that freed; `spilled`: it left the queue
/// for its spill chain) and `x-spillway-queue-ms`, for a request that met a full pool whose
/// slot was predicted in time (`serve::wait`).
pub(super) fn add_queue_headers(
    headers: &mut AnswerHeaders,
    queued: Option<(&'static str, std::time::Duration)>,
) {
    if let Some((outcome, waited)) = queued {
        headers.push(("x-spillway-queue", outcome.to_string()));
        headers.push(("x-spillway-queue-ms", waited.as_millis().to_string()));
    }
}

/// `x-spillway-cost-usd`: the answer's cost, once its usage is in (a non-streamed answer, read
/// to its end). A stream's cost is known only at its end, after the headers were sent: it
/// comes in the final usage chunk instead, and its headers carry none.
pub fn cost_header(cost: &CostCell) -> Option<(&'static str, String)> {
    cost.get().map(|c| ("x-spillway-cost-usd", c.to_string()))
}
