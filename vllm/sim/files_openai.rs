//! OpenAI's Files API as the `openai` kind serves it, for the Batch API's input and output:
//! `POST /v1/files` (multipart/form-data: `purpose`, `file`), `GET /v1/files/{id}`,
//! `GET /v1/files/{id}/content`, `DELETE /v1/files/{id}`, with OpenAI's File object and
//! error envelope (`param` named). Files live in the sim's memory (`batch_store.rs`).

use super::batch_store::{now_secs, StoredFile};
use super::openai_wire::bearer;
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
    st.check_key(bearer(headers)).err().map(|SimError { status, message, .. }| error(status, message, None))
}

/// One part of a multipart body: its field name, filename and bytes.
struct Part<'a> {
    name: String,
    filename: Option<String>,
    data: &'a [u8],
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// `name="value"` out of a Content-Disposition header.
fn disposition(headers: &str, key: &str) -> Option<String> {
    let at = headers.find(&format!("{key}=\""))? + key.len() + 2;
    let len = headers[at..].find('"')?;
    Some(headers[at..at + len].to_string())
}

/// Split a multipart/form-data body on its boundary.
fn parts<'a>(content_type: &str, body: &'a [u8]) -> Result<Vec<Part<'a>>, String> {
    let boundary = content_type
        .strip_prefix("multipart/form-data")
        .and_then(|rest| rest.split(';').find_map(|p| p.trim().strip_prefix("boundary=")))
        .map(|b| b.trim_matches('"'))
        .ok_or("the body must be multipart/form-data with a boundary")?;
    let delim = format!("--{boundary}").into_bytes();
    let mut out = Vec::new();
    let mut at = find(body, &delim, 0).ok_or("no multipart boundary in the body")? + delim.len();
    while !body[at..].starts_with(b"--") {
        let head_end = find(body, b"\r\n\r\n", at).ok_or("a multipart part has no headers")?;
        let head = String::from_utf8_lossy(&body[at..head_end]).to_string();
        let next = find(body, &delim, head_end).ok_or("a multipart part is not closed")?;
        let data = &body[head_end + 4..next.saturating_sub(2).max(head_end + 4)];
        let name = disposition(&head, "name").ok_or("a multipart part has no name")?;
        out.push(Part { name, filename: disposition(&head, "filename"), data });
        at = next + delim.len();
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
    let parts = match parts(content_type, &body) {
        Ok(p) => p,
        Err(m) => return error(400, m, None),
    };
    let purpose = parts.iter().find(|p| p.name == "purpose").map(|p| String::from_utf8_lossy(p.data));
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
    Json(store(&st, &filename, purpose.trim(), Bytes::copy_from_slice(file.data))).into_response()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_fields_and_file() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n{\"a\":1}\n\r\n--XyZ--\r\n";
        let p = parts("multipart/form-data; boundary=XyZ", body).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].name.as_str(), p[0].data), ("purpose", &b"batch"[..]));
        assert_eq!(p[1].filename.as_deref(), Some("in.jsonl"));
        assert_eq!(p[1].data, b"{\"a\":1}\n");
        assert!(parts("application/json", body).is_err());
    }
}
