//! What both dialects' job routes share: a job of the caller's, shown, cancelled, or listed a
//! page at a time, newest first. Each dialect gives its job object and where its page starts
//! (`after` for OpenAI, `after_id` for Anthropic); its envelopes are its own.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::{caller, not_found, now_ms, store_error, Batches, Caller};
use crate::api::error::{ApiError, ErrorCode};
use crate::batch::job::{Counts, Dialect, Status};
use crate::batch::store::{self, JobRow};
use axum::http::HeaderMap;

/// A dialect's way of showing jobs.
pub(super) struct Shown {
    pub dialect: Dialect,
    pub object: fn(&JobRow, &Counts) -> Value,
    /// The query parameter a page starts after.
    pub after: &'static str,
}

/// The caller's job `id` of `dialect`, with its counts.
pub(super) async fn owned(
    who: &Caller<'_>,
    dialect: Dialect,
    id: &str,
) -> Result<(JobRow, Counts), ApiError> {
    let job = store::job(who.store, id).await.map_err(store_error)?;
    match job {
        Some(job) if job.dialect == dialect && who.owns(&job.owner) => {
            let counts = store::counts(who.store, id).await.map_err(store_error)?;
            Ok((job, counts))
        }
        _ => Err(not_found("batch", id)),
    }
}

/// The caller's job `id`, as its dialect shows it.
pub(super) async fn show(
    state: &Batches,
    headers: &HeaderMap,
    id: &str,
    shown: &Shown,
) -> Result<Value, ApiError> {
    let who = caller(state, headers)?;
    let (job, counts) = owned(&who, shown.dialect, id).await?;
    Ok((shown.object)(&job, &counts))
}

/// Move the caller's job `id`, unless it has ended, to `cancelling` (the runner cancels its
/// queued lines); the job as it is then.
pub(super) async fn cancel(
    state: &Batches,
    headers: &HeaderMap,
    id: &str,
    shown: &Shown,
) -> Result<Value, ApiError> {
    let who = caller(state, headers)?;
    let (job, _) = owned(&who, shown.dialect, id).await?;
    if job.status.ended() {
        let why = format!("batch `{}` has already ended ({})", job.id, job.status.as_str());
        return Err(ApiError::new(ErrorCode::InvalidRequest, why));
    }
    let from = [Status::Validating, Status::InProgress, Status::Finalizing];
    store::set_status(who.store, &job.id, &from, Status::Cancelling, now_ms()).await.map_err(store_error)?;
    tracing::info!(batch = %job.id, "batch cancelling");
    let (job, counts) = owned(&who, shown.dialect, id).await?;
    Ok((shown.object)(&job, &counts))
}

/// A page of the caller's jobs, newest first: `data`, `first_id`, `last_id`, `has_more`.
pub(super) async fn page(
    state: &Batches,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
    shown: &Shown,
) -> Result<Value, ApiError> {
    let who = caller(state, headers)?;
    let limit = page_limit(params)?;
    let after = params.get(shown.after).map(String::as_str);
    let jobs = store::jobs(who.store, shown.dialect, after, limit + 1).await.map_err(store_error)?;
    let more = jobs.len() as i64 > limit;
    let mut data = Vec::new();
    for job in jobs.into_iter().take(limit as usize).filter(|j| who.owns(&j.owner)) {
        let counts = store::counts(who.store, &job.id).await.map_err(store_error)?;
        data.push((shown.object)(&job, &counts));
    }
    let first = data.first().map(|o| o["id"].clone());
    let last = data.last().map(|o| o["id"].clone());
    Ok(json!({"data": data, "first_id": first, "last_id": last, "has_more": more}))
}

/// `limit`: 1 to 100, default 20.
fn page_limit(params: &HashMap<String, String>) -> Result<i64, ApiError> {
    match params.get("limit") {
        None => Ok(20),
        Some(text) => text.parse::<i64>().ok().filter(|n| (1..=100).contains(n)).ok_or_else(|| {
            ApiError::new(ErrorCode::InvalidValue, format!("limit `{text}` must be 1 to 100")).param("limit")
        }),
    }
}
