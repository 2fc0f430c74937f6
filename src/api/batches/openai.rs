//! OpenAI's Batch API: `POST /v1/batches` (`input_file_id`, `endpoint`, `completion_window`,
//! `metadata`), `GET /v1/batches/{id}`, `GET /v1/batches` (`after`, `limit`), `POST
//! /v1/batches/{id}/cancel`. A file whose lines do not pass OpenAI's checks makes a job that has
//! `failed` with `errors`, each naming its line; any other starts `validating` and is run.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::jobs::{self, Shown};
use super::{caller, files, new_id, now_ms, store_error, Batches};
use crate::api::error::{ApiError, ErrorCode};
use crate::batch::job::{Counts, Dialect, Status};
use crate::batch::lines::{self, ENDPOINTS};
use crate::batch::store::{self, JobRow};

#[derive(Deserialize)]
pub(super) struct Create {
    input_file_id: String,
    endpoint: String,
    completion_window: String,
    #[serde(default)]
    metadata: Option<HashMap<String, String>>,
}

/// A completion window: `24h` as OpenAI takes it, or any whole number of hours, minutes or
/// seconds (`2h`, `30m`, `90s`), in milliseconds.
pub(super) fn window_ms(text: &str) -> Option<i64> {
    let (n, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: i64 = n.parse().ok().filter(|n| *n > 0)?;
    let unit = match unit {
        "h" => 3_600_000,
        "m" => 60_000,
        "s" => 1_000,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// The Batch object.
pub(super) fn object(job: &JobRow, counts: &Counts) -> Value {
    let secs = |status: Status| job.entered(status).map(|ms| ms / 1000);
    json!({
        "id": job.id, "object": "batch", "endpoint": job.endpoint,
        "errors": job.errors.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok()),
        "input_file_id": job.input_file_id, "completion_window": window_text(job.window_ms),
        "status": job.status.as_str(), "output_file_id": job.output_file_id, "error_file_id": job.error_file_id,
        "created_at": job.created_ms / 1000, "in_progress_at": secs(Status::InProgress),
        "expires_at": job.expires_ms() / 1000, "finalizing_at": secs(Status::Finalizing),
        "completed_at": secs(Status::Completed), "failed_at": secs(Status::Failed),
        "expired_at": secs(Status::Expired), "cancelling_at": secs(Status::Cancelling),
        "cancelled_at": secs(Status::Cancelled),
        "request_counts": {"total": job.total, "completed": counts.succeeded, "failed": counts.failed()},
        "metadata": metadata(job),
    })
}

/// The client's metadata, and where the job's lines go now and why (`spillway_route`,
/// `spillway_plan`), once the runner has planned it.
fn metadata(job: &JobRow) -> Value {
    let mut metadata = job.metadata.as_deref().and_then(|m| serde_json::from_str::<Value>(m).ok());
    let plan = job.plan.as_deref().and_then(|p| serde_json::from_str::<Value>(p).ok());
    if let Some(plan) = plan {
        let fields = metadata.get_or_insert_with(|| json!({}));
        if let Some(fields) = fields.as_object_mut() {
            fields.insert("spillway_route".into(), plan["route"].clone());
            fields.insert("spillway_plan".into(), plan["reason"].clone());
        }
    }
    metadata.unwrap_or(Value::Null)
}

fn window_text(ms: i64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms => format!("{}s", ms / 1000),
    }
}

fn respond(result: Result<Json<Value>, ApiError>) -> Response {
    result.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

pub(super) async fn create(
    State(state): State<Batches>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    respond(inner_create(&state, &headers, &body).await)
}

async fn inner_create(state: &Batches, headers: &HeaderMap, body: &[u8]) -> Result<Json<Value>, ApiError> {
    let who = caller(state, headers)?;
    let asked: Create = crate::api::wire::decode_json(body, "a batch")?;
    if !ENDPOINTS.contains(&asked.endpoint.as_str()) {
        let why = format!("`endpoint` must be one of {}", ENDPOINTS.join(", "));
        return Err(ApiError::new(ErrorCode::InvalidValue, why).param("endpoint"));
    }
    let window = window_ms(&asked.completion_window).ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidValue,
            "`completion_window` must be `24h` (or another number of h, m or s)",
        )
        .param("completion_window")
    })?;
    let (file, store) =
        files::owned(state, headers, &asked.input_file_id).await.map_err(|e| e.param("input_file_id"))?;
    if file.purpose != "batch" {
        let why = format!("file `{}` has purpose `{}`; a batch reads a `batch` file", file.id, file.purpose);
        return Err(ApiError::new(ErrorCode::InvalidValue, why).param("input_file_id"));
    }
    let text = store::file_content(&store, &file.id).await.map_err(store_error)?.unwrap_or_default();
    let max_lines = state.doors.serving.snapshot.load().config.batch.max_lines as usize;
    let now = now_ms();
    let (lines, status, errors) = match lines::openai(&text, &asked.endpoint, max_lines) {
        Ok(lines) => (lines, Status::Validating, None),
        Err(problems) => {
            let data: Vec<Value> = problems
                .iter()
                .map(|p| json!({"code": p.code, "message": p.message, "param": p.param, "line": p.line}))
                .collect();
            (Vec::new(), Status::Failed, Some(json!({"object": "list", "data": data}).to_string()))
        }
    };
    let mut at_ms = [None; 7];
    if status == Status::Failed {
        at_ms[3] = Some(now);
    }
    let job = JobRow {
        id: new_id(Dialect::OpenAi.id_prefix()),
        dialect: Dialect::OpenAi,
        endpoint: asked.endpoint,
        input_file_id: Some(file.id),
        output_file_id: None,
        error_file_id: None,
        status,
        owner: who.owner.clone(),
        metadata: asked.metadata.map(|m| json!(m).to_string()),
        errors,
        window_ms: window,
        created_ms: now,
        at_ms,
        total: lines.len() as i64,
        plan: None,
    };
    store::create_job(who.store, &job, &lines).await.map_err(store_error)?;
    tracing::info!(batch = %job.id, lines = job.total, status = job.status.as_str(), "batch created");
    let counts = Counts { queued: lines.len() as u64, ..Counts::default() };
    Ok(Json(object(&job, &counts)))
}

/// How OpenAI shows a job.
const SHOWN: Shown = Shown { dialect: Dialect::OpenAi, object, after: "after" };

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
    let page = jobs::page(&state, &headers, &params, &SHOWN).await.map(|mut page| {
        page["object"] = json!("list");
        Json(page)
    });
    respond(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_as_openai_writes_them_and_shorter() {
        assert_eq!(window_ms("24h"), Some(86_400_000));
        assert_eq!(window_ms("30m"), Some(1_800_000));
        assert_eq!(window_ms("90s"), Some(90_000));
        for bad in ["", "h", "0h", "-1h", "24", "1d", "1.5h"] {
            assert_eq!(window_ms(bad), None, "{bad}");
        }
        assert_eq!(window_text(86_400_000), "24h");
        assert_eq!(window_text(90_000), "90s");
    }
}
