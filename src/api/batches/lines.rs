//! The batch runner's way in: each line is decoded, served and answered by its endpoint's
//! dialect door ([`DialectDoor`]), in process, with no HTTP between: as the job's owner (the
//! key that created it, if it may still be used), at batch priority, kept on the fleet when
//! its task has a pool. The pipeline does what it does for a request from the network (the
//! key's task permission, limits and budgets, policy, plan, dispatch, the ledger's records and
//! the metrics); the line's answer is the dialect's whole body, or its error envelope with the
//! status the dialect gives it, and its backend is the one the answer committed to.
//!
//! What a network request gets from the HTTP layers and a line keeps: a share of the router's
//! concurrency (none left: 503, and the runner puts the line back), the body size limit, the
//! request id on its log lines, its server span when tracing is on. What it does not get:
//! authentication (its owner authenticated when the job was created) and the HTTP access log
//! line and refusal count (the runner counts each line's end in `spillway_batch_lines_ended_total`).

use std::time::SystemTime;

use axum::http::HeaderMap;
use futures::future::BoxFuture;
use futures::FutureExt;
use tracing::Instrument;

use super::super::chat::Chat;
use super::super::codes;
use super::super::completions::Completions;
use super::super::embeddings::Embeddings;
use super::super::error::{ApiError, ErrorCode};
use super::super::front::{self, Doors};
use super::super::messages::Messages;
use super::super::responses::Responses;
use super::super::whole::{self, DialectDoor};
use crate::batch::runner::{LineAnswer, LineCall, LineCaller};
use crate::config::Priority;
use crate::serve::{Arrival, NoHeaders};
use crate::trace::Tracing;

/// The dialect doors, for the batch runner.
#[derive(Clone)]
pub struct InProcess {
    doors: Doors,
    tracing: Tracing,
}

impl InProcess {
    pub(crate) fn new(doors: Doors, tracing: Tracing) -> InProcess {
        InProcess { doors, tracing }
    }
}

impl LineCaller for InProcess {
    fn call(&self, line: LineCall) -> BoxFuture<'static, LineAnswer> {
        let this = self.clone();
        let span =
            tracing::info_span!("batch_line", request_id = %line.request_id, endpoint = %line.endpoint);
        async move {
            match line.endpoint.as_str() {
                "/v1/chat/completions" => this.answer::<Chat>(line).await,
                "/v1/completions" => this.answer::<Completions>(line).await,
                "/v1/embeddings" => this.answer::<Embeddings>(line).await,
                "/v1/responses" => this.answer::<Responses>(line).await,
                "/v1/messages" => this.answer::<Messages>(line).await,
                other => {
                    let e = ApiError::new(codes::NOT_FOUND, format!("no batch endpoint {other}"));
                    refused::<Chat>(&e, None)
                }
            }
        }
        .instrument(span)
        .boxed()
    }
}

impl InProcess {
    /// One line through its dialect's door and the pipeline, with its server span.
    async fn answer<D: DialectDoor>(&self, line: LineCall) -> LineAnswer {
        let trace = self.tracing.request(&HeaderMap::new(), "POST", &line.endpoint);
        if let Some(span) = &trace {
            span.request_id(&line.request_id);
        }
        let answer = self.serve::<D>(line, trace.clone()).await;
        if let Some(span) = &trace {
            span.status(answer.status);
            span.end();
        }
        answer
    }

    async fn serve<D: DialectDoor>(
        &self,
        line: LineCall,
        trace: Option<crate::trace::RequestSpan>,
    ) -> LineAnswer {
        let arrived_at = SystemTime::now();
        let door = &self.doors.door;
        // A job's key that may no longer be used runs none of its lines.
        let principal = match &line.owner {
            Some(owner) => {
                match door.client_keys.named(owner, crate::batch::store::unix_millis(arrived_at)) {
                    Some(principal) => Some(principal),
                    None => {
                        let why = "the key that created this batch is revoked or expired";
                        return refused::<D>(&ApiError::new(ErrorCode::InvalidApiKey, why), None);
                    }
                }
            }
            None => None,
        };
        if line.body.len() > door.max_body_bytes {
            return refused::<D>(&super::super::body::too_large(door.max_body_bytes), None);
        }
        let admission = match front::admit(door) {
            Ok(admission) => admission,
            Err(e) => return refused::<D>(&e, None),
        };
        let mut request = match D::decode(&bytes::Bytes::copy_from_slice(line.body.as_bytes())) {
            Ok(request) => request,
            Err(e) => return refused::<D>(&e, None),
        };
        let arrival = Arrival {
            arrived_at,
            request_id: line.request_id,
            principal,
            headers: &NoHeaders,
            priority: Some(Priority::Batch),
            pin: None,
            owned: None,
            fleet_only: line.fleet_only,
            trace,
        };
        let served = match whole::serve::<D>(&self.doors.serving, arrival, &mut request).await {
            Ok(served) => served,
            Err(e) => return refused::<D>(&e, None),
        };
        let backend = served.committed.backend.clone();
        let answer = D::encode_whole(&request, served).await;
        drop(admission);
        match answer {
            Ok(body) => LineAnswer {
                status: 200,
                body: String::from_utf8_lossy(&body).into_owned(),
                backend: Some(backend),
            },
            // An upstream's failure after the answer began: the backend that committed.
            Err(e) => refused::<D>(&e, Some(backend)),
        }
    }
}

/// A line's error, in its dialect's envelope and with the status the dialect gives it.
fn refused<D: DialectDoor>(error: &ApiError, backend: Option<String>) -> LineAnswer {
    error.log();
    let (status, body) = D::envelope(error);
    LineAnswer { status, body: body.to_string(), backend }
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
