//! OpenAI's Files API for batch input: `POST /v1/files` (multipart: `purpose=batch` and the
//! JSONL `file`), `GET /v1/files/{id}`, `GET /v1/files/{id}/content`, `DELETE /v1/files/{id}`.
//! An input file is kept as sent, up to `batch.max_file_bytes`, for `batch.file_retention_days`;
//! a job's output and error files are written from its lines when read.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};

use super::{caller, new_id, not_found, now_ms, store_error, Batches};
use crate::api::error::{ApiError, ErrorCode};
use crate::batch::job::{Dialect, LineState};
use crate::batch::store::{self, FileRow};

/// The File object.
pub(super) fn object(f: &FileRow) -> Value {
    json!({
        "id": f.id, "object": "file", "bytes": f.bytes, "created_at": f.created_ms / 1000,
        "expires_at": f.expires_ms.map(|ms| ms / 1000), "filename": f.filename, "purpose": f.purpose,
        "status": "processed", "status_details": null,
    })
}

pub(super) async fn upload(State(state): State<Batches>, headers: HeaderMap, body: Body) -> Response {
    inner_upload(&state, &headers, body)
        .await
        .map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

async fn inner_upload(state: &Batches, headers: &HeaderMap, body: Body) -> Result<Json<Value>, ApiError> {
    let who = caller(state, headers)?;
    let batch = state.doors.serving.snapshot.load().config.batch.clone();
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok())
        .ok_or_else(|| {
            ApiError::new(ErrorCode::UnsupportedMediaType, "a file is uploaded as multipart/form-data")
        })?;
    // The form's other fields and boundaries come on top of the file.
    let limit = batch.max_file_bytes as usize + 64 * 1024;
    let read = Limited::new(body, limit).collect();
    let bytes = match tokio::time::timeout(std::time::Duration::from_secs(300), read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) | Err(_) => {
            let why = format!(
                "the file is larger than batch.max_file_bytes ({} bytes), or did not arrive",
                batch.max_file_bytes
            );
            return Err(ApiError::new(ErrorCode::RequestTooLarge, why).param("file"));
        }
    };
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(bytes) });
    let mut form = multer::Multipart::new(stream, boundary);
    let (mut purpose, mut file) = (None, None);
    while let Some(field) =
        form.next_field().await.map_err(|e| invalid(&format!("the form could not be read: {e}"), None))?
    {
        match field.name() {
            Some("purpose") => purpose = Some(field.text().await.unwrap_or_default()),
            Some("file") => {
                let name = field.file_name().unwrap_or("upload.jsonl").to_string();
                let text = field
                    .bytes()
                    .await
                    .map_err(|e| invalid(&format!("the file could not be read: {e}"), Some("file")))?;
                file = Some((name, text));
            }
            _ => {}
        }
    }
    match purpose.as_deref() {
        Some("batch") => {}
        Some(other) => {
            return Err(invalid(
                &format!("purpose `{other}` is not supported here; Spillway keeps files for `batch`"),
                Some("purpose"),
            ))
        }
        None => return Err(invalid("`purpose` is required", Some("purpose"))),
    }
    let Some((filename, bytes)) = file else { return Err(invalid("`file` is required", Some("file"))) };
    if bytes.len() as u64 > batch.max_file_bytes {
        let why =
            format!("the file is {} bytes; batch.max_file_bytes is {}", bytes.len(), batch.max_file_bytes);
        return Err(ApiError::new(ErrorCode::RequestTooLarge, why).param("file"));
    }
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| invalid("a batch file is UTF-8 JSONL", Some("file")))?;
    let created_ms = now_ms();
    let row = FileRow {
        id: new_id("file-"),
        purpose: "batch".into(),
        filename,
        bytes: text.len() as i64,
        owner: who.owner.clone(),
        created_ms,
        expires_ms: Some(created_ms + batch.file_retention_days as i64 * 86_400_000),
        batch_id: None,
    };
    store::insert_file(who.store, &row, Some(&text)).await.map_err(store_error)?;
    tracing::info!(file = %row.id, bytes = row.bytes, "batch file uploaded");
    Ok(Json(object(&row)))
}

fn invalid(why: &str, param: Option<&str>) -> ApiError {
    let e = ApiError::new(ErrorCode::InvalidRequest, why.to_string());
    match param {
        Some(p) => e.param(p),
        None => e,
    }
}

/// The caller's file `id`, unexpired.
pub(super) async fn owned(
    state: &Batches,
    headers: &HeaderMap,
    id: &str,
) -> Result<(FileRow, crate::batch::store::Store), ApiError> {
    let who = caller(state, headers)?;
    let file = store::file(who.store, id).await.map_err(store_error)?;
    match file {
        Some(f) if who.owns(&f.owner) && f.expires_ms.is_none_or(|at| at > now_ms()) => {
            Ok((f, who.store.clone()))
        }
        _ => Err(not_found("file", id)),
    }
}

pub(super) async fn show(
    State(state): State<Batches>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    owned(&state, &headers, &id)
        .await
        .map(|(f, _)| Json(object(&f)))
        .map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

pub(super) async fn delete(
    State(state): State<Batches>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let deleted = async {
        let (f, store) = owned(&state, &headers, &id).await?;
        store::delete_file(&store, &f.id).await.map_err(store_error)?;
        Ok::<_, ApiError>(Json(json!({"id": f.id, "object": "file", "deleted": true})))
    };
    deleted.await.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

pub(super) async fn content(
    State(state): State<Batches>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let text = async {
        let (f, store) = owned(&state, &headers, &id).await?;
        match &f.batch_id {
            None => {
                store::file_content(&store, &f.id).await.map_err(store_error).map(Option::unwrap_or_default)
            }
            Some(batch) => results_file(&store, batch, f.id.starts_with("file-output-")).await,
        }
    };
    match text.await {
        Ok(text) => ([(header::CONTENT_TYPE, "application/jsonl")], text).into_response(),
        Err(e) => e.into_response(),
    }
}

/// A job's output file (its answered lines) or error file (the rest), in OpenAI's line format.
async fn results_file(
    store: &crate::batch::store::Store,
    batch: &str,
    output: bool,
) -> Result<String, ApiError> {
    let states: &[LineState] = if output {
        &[LineState::Succeeded]
    } else {
        &[LineState::Errored, LineState::Canceled, LineState::Expired]
    };
    let lines = store::ended(store, batch, states).await.map_err(store_error)?;
    let mut text = String::new();
    for line in lines {
        let request_id = format!("{batch}-{}", line.idx);
        let body = line.result.as_deref().and_then(|r| serde_json::from_str::<Value>(r).ok());
        let (response, error) = match (line.state, line.status_code) {
            (LineState::Succeeded | LineState::Errored, Some(status)) => {
                (json!({"status_code": status, "request_id": request_id, "body": body}), Value::Null)
            }
            (state, _) => {
                let code = if state == LineState::Expired { "batch_expired" } else { "batch_cancelled" };
                (Value::Null, json!({"code": code, "message": line.result}))
            }
        };
        let id = format!("batch_req_{}", request_id.trim_start_matches(Dialect::OpenAi.id_prefix()));
        let out = json!({"id": id, "custom_id": line.custom_id, "response": response, "error": error});
        text.push_str(&out.to_string());
        text.push('\n');
    }
    Ok(text)
}
