//! OpenAI's Files API as the `openai` kind serves it, for the Batch API's input and output:
//! `POST /v1/files` (multipart/form-data: `purpose`, `file`), `GET /v1/files/{id}`,
//! `GET /v1/files/{id}/content`, `DELETE /v1/files/{id}`, with OpenAI's File object and
//! error envelope (`param` named). Files live in the sim's memory (`batch_store.rs`).

use super::batch_store::{now_secs, StoredFile};
use super::openai_wire::presented_key;
use super::server::{AppState, SimError};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// Purposes OpenAI accepts on upload; only `batch` files can start a batch.
const PURPOSES: [&str; 6] = ["assistants", "batch", "fine-tune", "vision", "user_data", "evals"];

/// An OpenAI error envelope naming the offending parameter.
pub fn error(status: u16, message: impl Into<String>, param: Option<&str>) -> Response {
    let code = if status == 401 { json!("invalid_api_key") } else { Value::Null };
    let body = json!({"error": {"message": message.into(), "type": "invalid_request_error", "param": param, "code": code}});
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), Json(body)).into_response()
}

/// The Bearer key check of the chat route: the OpenAI error response when it fails.
pub fn authorize(st: &AppState, headers: &HeaderMap) -> Option<Response> {
    st.check_key(presented_key(st.kind, headers))
        .err()
        .map(|SimError { status, message, .. }| error(status, message, None))
}

/// One part of a multipart body: its field name, filename and bytes.
struct Part {
    name: String,
    filename: Option<String>,
    data: Bytes,
}

/// The parts of a multipart/form-data body (read with `multer`, as the router reads them).
async fn parts(content_type: &str, body: Bytes) -> Result<Vec<Part>, String> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| "the body must be multipart/form-data with a boundary".to_string())?;
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut out = Vec::new();
    while let Some(field) = form.next_field().await.map_err(|e| format!("the form could not be read: {e}"))? {
        let name = field.name().ok_or("a multipart part has no name")?.to_string();
        let filename = field.file_name().map(str::to_string);
        let data = field.bytes().await.map_err(|e| format!("a multipart part could not be read: {e}"))?;
        out.push(Part { name, filename, data });
    }
    Ok(out)
}

/// Keep a file and answer its File object.
pub fn store(st: &AppState, filename: &str, purpose: &str, content: Bytes) -> Value {
    let id = st.batches.new_id("file-");
    let object = json!({
        "id": id, "object": "file", "bytes": content.len(), "created_at": now_secs(),
        "expires_at": null, "filename": filename, "purpose": purpose,
        "status": "processed", "status_details": null,
    });
    st.batches.put_file(&id, StoredFile { object: object.clone(), content });
    object
}

/// `POST /v1/files`.
pub async fn upload(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = authorize(&st, &headers) {
        return r;
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let parts = match parts(content_type, body).await {
        Ok(p) => p,
        Err(m) => return error(400, m, None),
    };
    let purpose = parts.iter().find(|p| p.name == "purpose").map(|p| String::from_utf8_lossy(&p.data));
    let Some(purpose) = purpose else {
        return error(400, "Missing required parameter: 'purpose'.", Some("purpose"));
    };
    if !PURPOSES.contains(&purpose.trim()) {
        let msg = format!("'{purpose}' is not one of {PURPOSES:?} - 'purpose'");
        return error(400, msg, Some("purpose"));
    }
    let Some(file) = parts.iter().find(|p| p.name == "file") else {
        return error(400, "Missing required parameter: 'file'.", Some("file"));
    };
    let filename = file.filename.clone().unwrap_or_else(|| "upload".to_string());
    Json(store(&st, &filename, purpose.trim(), file.data.clone())).into_response()
}

fn lookup(st: &AppState, headers: &HeaderMap, id: &str) -> Result<StoredFile, Box<Response>> {
    if let Some(r) = authorize(st, headers) {
        return Err(Box::new(r));
    }
    st.batches.file(id).ok_or_else(|| Box::new(error(404, format!("No such File object: {id}"), Some("id"))))
}

/// `GET /v1/files/{id}`.
pub async fn get(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    match lookup(&st, &headers, &id) {
        Ok(f) => Json(f.object).into_response(),
        Err(r) => *r,
    }
}

/// `GET /v1/files/{id}/content`.
pub async fn content(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    match lookup(&st, &headers, &id) {
        Ok(f) => {
            let mut resp = f.content.into_response();
            let ty = HeaderValue::from_static("application/octet-stream");
            resp.headers_mut().insert(header::CONTENT_TYPE, ty);
            resp
        }
        Err(r) => *r,
    }
}

/// `DELETE /v1/files/{id}`.
pub async fn delete(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    match lookup(&st, &headers, &id) {
        Ok(_) => {
            st.batches.delete_file(&id);
            Json(json!({"id": id, "object": "file", "deleted": true})).into_response()
        }
        Err(r) => *r,
    }
}
