//! Anthropic's Message Batches: `POST /v1/messages/batches` (`requests`: `custom_id` and
//! `params`, a Messages request), `GET …/{id}`, `GET /v1/messages/batches` (`after_id`,
//! `limit`), `POST …/{id}/cancel`, `GET …/{id}/results` (JSONL, one result per request, in
//! order). A job runs within 24 hours; every error is in Anthropic's envelope.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::jobs::{self, Shown};
use super::{caller, new_id, now_ms, store_error, Batches};
use crate::api::codes;
use crate::api::error::{ApiError, ErrorCode};
use crate::api::messages::error_response;
use crate::batch::job::{Counts, Dialect, LineState, Status};
use crate::batch::lines;
use crate::batch::store::rfc3339;
use crate::batch::store::{self, JobRow};

/// How long an Anthropic batch may run.
const WINDOW_MS: i64 = 24 * 3_600_000;

/// The `message_batch` object.
fn object(job: &JobRow, counts: &Counts) -> Value {
    let ended = [Status::Completed, Status::Expired, Status::Cancelled, Status::Failed]
        .into_iter()
        .find_map(|s| job.entered(s));
    json!({
        "id": job.id, "type": "message_batch", "processing_status": job.status.processing_status(),
        "request_counts": {
            "processing": counts.open(), "succeeded": counts.succeeded, "errored": counts.errored,
            "canceled": counts.canceled, "expired": counts.expired,
        },
        "ended_at": ended.map(rfc3339), "created_at": rfc3339(job.created_ms),
        "expires_at": rfc3339(job.expires_ms()), "archived_at": null,
        "cancel_initiated_at": job.entered(Status::Cancelling).map(rfc3339),
        "results_url": job.status.ended().then(|| format!("/v1/messages/batches/{}/results", job.id)),
    })
}

fn respond(result: Result<Json<Value>, ApiError>) -> Response {
    result.map_or_else(|e| error_response(&e), IntoResponse::into_response)
}

pub(super) async fn create(
    State(state): State<Batches>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let created = async {
        let who = caller(&state, &headers)?;
        let asked: Value = crate::api::wire::decode_json(&body, "a message batch")?;
        let Some(requests) = asked.get("requests").and_then(Value::as_array) else {
            return Err(ApiError::new(ErrorCode::MissingField, "requests: field required").param("requests"));
        };
        let max_lines = state.doors.serving.snapshot.load().config.batch.max_lines as usize;
        let lines = lines::anthropic(requests, max_lines).map_err(|(param, why)| {
            ApiError::new(ErrorCode::InvalidValue, format!("{param}: {why}")).param(param)
        })?;
        let job = JobRow {
            id: new_id(Dialect::Anthropic.id_prefix()),
            dialect: Dialect::Anthropic,
            endpoint: "/v1/messages".into(),
            input_file_id: None,
            output_file_id: None,
            error_file_id: None,
            status: Status::Validating,
            owner: who.owner.clone(),
            metadata: None,
            errors: None,
            window_ms: WINDOW_MS,
            created_ms: now_ms(),
            at_ms: [None; 7],
            total: lines.len() as i64,
            plan: None,
        };
        store::create_job(who.store, &job, &lines).await.map_err(store_error)?;
        tracing::info!(batch = %job.id, lines = job.total, "message batch created");
        Ok(Json(object(&job, &Counts { queued: lines.len() as u64, ..Counts::default() })))
    };
    respond(created.await)
}

/// How Anthropic shows a job.
const SHOWN: Shown = Shown { dialect: Dialect::Anthropic, object, after: "after_id" };

pub(super) async fn show(
    State(state): State<Batches>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    respond(jobs::show(&state, &headers, &id, &SHOWN).await.map(Json))
}

pub(super) async fn cancel(
    State(state): State<Batches>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    respond(jobs::cancel(&state, &headers, &id, &SHOWN).await.map(Json))
}

pub(super) async fn list(
    State(state): State<Batches>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    respond(jobs::page(&state, &headers, &params, &SHOWN).await.map(Json))
}

/// `GET …/{id}/results`: once the batch has ended, one line per request in order.
pub(super) async fn results(
    State(state): State<Batches>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let text = async {
        let who = caller(&state, &headers)?;
        let (job, _) = jobs::owned(&who, Dialect::Anthropic, &id).await?;
        if !job.status.ended() {
            let why = format!("batch `{id}` is still processing; its results are ready when it has ended");
            return Err(ApiError::new(codes::NOT_FOUND, why));
        }
        let states = [LineState::Succeeded, LineState::Errored, LineState::Canceled, LineState::Expired];
        let lines = store::ended(who.store, &job.id, &states).await.map_err(store_error)?;
        let mut text = String::new();
        for line in lines {
            let body = line.result.as_deref().and_then(|r| serde_json::from_str::<Value>(r).ok());
            let result = match line.state {
                LineState::Succeeded => json!({"type": "succeeded", "message": body}),
                LineState::Errored => json!({"type": "errored", "error": body}),
                LineState::Canceled => json!({"type": "canceled"}),
                _ => json!({"type": "expired"}),
            };
            text.push_str(&json!({"custom_id": line.custom_id, "result": result}).to_string());
            text.push('\n');
        }
        Ok(text)
    };
    match text.await {
        Ok(text) => ([(header::CONTENT_TYPE, "application/x-jsonl")], text).into_response(),
        Err(e) => error_response(&e),
    }
}
