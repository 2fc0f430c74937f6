//! OpenAI's Batch API as the `openai` kind serves it: `POST /v1/batches`, `GET
//! /v1/batches[/{id}]`, `POST /v1/batches/{id}/cancel`, with OpenAI's Batch object. The input
//! file (uploaded through `files_openai.rs`) is checked when the batch is created (400s in
//! OpenAI's envelope); after `--batch-delay-ms` every line is answered by the realtime route
//! its `url` names (`batch_store.rs`), and the answers become the output file (2xx) and the
//! error file (the rest, and `batch_expired` lines under `--batch-expire`).

use super::batch_lines;
use super::batch_store::{self, now_secs, Answer, Ending, Line, OPENAI_ENDPOINTS};
use super::files_openai::{authorize, error, store};
use super::server::AppState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Parse and check an input file against the batch's endpoint.
fn read_lines(content: &[u8], endpoint: &str) -> Result<Vec<Line>, String> {
    let text = std::str::from_utf8(content).map_err(|_| "The input file is not UTF-8.".to_string())?;
    let mut lines = Vec::new();
    for (n, raw) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let n = n + 1;
        let v: Value = serde_json::from_str(raw).map_err(|e| format!("Line {n}: invalid JSON: {e}"))?;
        let custom_id = v.get("custom_id").and_then(Value::as_str);
        let custom_id = custom_id.ok_or(format!("Line {n}: 'custom_id' must be a string."))?;
        if v.get("method").and_then(Value::as_str) != Some("POST") {
            return Err(format!("Line {n}: 'method' must be 'POST'."));
        }
        let url = v.get("url").and_then(Value::as_str).unwrap_or_default();
        if url != endpoint {
            return Err(format!("Line {n}: 'url' is '{url}', but the batch's endpoint is '{endpoint}'."));
        }
        let body =
            v.get("body").filter(|b| b.is_object()).ok_or(format!("Line {n}: 'body' must be an object."))?;
        lines.push(Line { custom_id: custom_id.to_string(), url: url.to_string(), body: body.clone() });
    }
    if lines.is_empty() {
        return Err("The input file has no requests.".to_string());
    }
    if let Some(id) = batch_store::duplicate_id(&lines) {
        return Err(format!("The custom_id '{id}' appears more than once; custom_ids must be unique."));
    }
    Ok(lines)
}

/// `POST /v1/batches`.
pub async fn create(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = authorize(&st, &headers) {
        return r;
    }
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(400, format!("invalid JSON body: {e}"), None),
    };
    let field = |k: &str| req.get(k).and_then(Value::as_str);
    let Some(endpoint) = field("endpoint").filter(|e| OPENAI_ENDPOINTS.contains(e)) else {
        return error(400, format!("'endpoint' must be one of {OPENAI_ENDPOINTS:?}."), Some("endpoint"));
    };
    if field("completion_window") != Some("24h") {
        return error(400, "'completion_window' must be '24h'.", Some("completion_window"));
    }
    let Some(file_id) = field("input_file_id") else {
        return error(400, "Missing required parameter: 'input_file_id'.", Some("input_file_id"));
    };
    let Some(file) = st.batches.file(file_id) else {
        return error(400, format!("No such File object: {file_id}"), Some("input_file_id"));
    };
    if file.object["purpose"] != "batch" {
        let msg = format!("The file {file_id} has purpose '{}', not 'batch'.", file.object["purpose"]);
        return error(400, msg, Some("input_file_id"));
    }
    let lines = match read_lines(&file.content, endpoint) {
        Ok(l) => l,
        Err(m) => return error(400, m, Some("input_file_id")),
    };
    let id = st.batches.new_id("batch_");
    let created = now_secs();
    let object = json!({
        "id": id, "object": "batch", "endpoint": endpoint, "errors": null,
        "input_file_id": file_id, "completion_window": "24h", "status": "validating",
        "output_file_id": null, "error_file_id": null, "created_at": created,
        "in_progress_at": null, "expires_at": created + 86_400, "finalizing_at": null,
        "completed_at": null, "failed_at": null, "expired_at": null, "cancelling_at": null,
        "cancelled_at": null,
        "request_counts": {"total": lines.len(), "completed": 0, "failed": 0},
        "metadata": req.get("metadata").cloned().unwrap_or(Value::Null),
    });
    let cancel = st.batches.insert(object.clone());
    let st2 = Arc::clone(&st);
    tokio::spawn(async move {
        let begin = |b: &mut Value| {
            if b["status"] == "validating" {
                b["status"] = json!("in_progress");
                b["in_progress_at"] = json!(now_secs());
            }
        };
        st2.batches.update(&id, begin);
        let ending = st2.batches.wait_turn(&cancel).await;
        run(&st2, &id, &lines, ending).await;
    });
    Json(object).into_response()
}

/// One output or error line for `answer`, or an `error` without a response.
fn result_line(st: &AppState, line: &Line, answer: Option<&Answer>, err: Option<(&str, &str)>) -> String {
    let response =
        answer.map(|a| json!({"status_code": a.status, "request_id": a.request_id, "body": a.body}));
    let error = err.map(|(code, message)| json!({"code": code, "message": message}));
    let id = st.batches.new_id("batch_req_");
    json!({"id": id, "custom_id": line.custom_id, "response": response, "error": error}).to_string() + "\n"
}

/// Answer the lines (or not), write the files and settle the batch's status.
async fn run(st: &Arc<AppState>, id: &str, lines: &[Line], ending: Ending) {
    let (mut out, mut err) = (String::new(), String::new());
    let (mut completed, mut failed) = (0, 0);
    match ending {
        Ending::Run => {
            for (line, a) in lines.iter().zip(batch_lines::answer_all(st, lines).await) {
                if (200..300).contains(&a.status) {
                    completed += 1;
                    out += &result_line(st, line, Some(&a), None);
                } else {
                    failed += 1;
                    err += &result_line(st, line, Some(&a), None);
                }
            }
        }
        Ending::Expired => {
            let why =
                ("batch_expired", "This request could not be executed before the completion window expired.");
            for line in lines {
                failed += 1;
                err += &result_line(st, line, None, Some(why));
            }
        }
        Ending::Cancelled => {}
    }
    st.batches.update(id, |b| {
        if ending == Ending::Run && b["status"] == "in_progress" {
            b["status"] = json!("finalizing");
            b["finalizing_at"] = json!(now_secs());
        }
    });
    let output =
        (!out.is_empty()).then(|| store(st, &format!("{id}_output.jsonl"), "batch_output", out.into()));
    let errors =
        (!err.is_empty()).then(|| store(st, &format!("{id}_error.jsonl"), "batch_output", err.into()));
    st.batches.update(id, |b| {
        let (status, at) = match (ending, b["status"].as_str()) {
            (Ending::Expired, _) => ("expired", "expired_at"),
            (_, Some("cancelling")) | (Ending::Cancelled, _) => ("cancelled", "cancelled_at"),
            _ => ("completed", "completed_at"),
        };
        b["status"] = json!(status);
        b[at] = json!(now_secs());
        b["output_file_id"] = output.map(|f| f["id"].clone()).unwrap_or(Value::Null);
        b["error_file_id"] = errors.map(|f| f["id"].clone()).unwrap_or(Value::Null);
        b["request_counts"]["completed"] = json!(completed);
        b["request_counts"]["failed"] = json!(failed);
    });
}

fn not_found(id: &str) -> Response {
    error(404, format!("No batch found with id '{id}'."), Some("batch_id"))
}

/// `GET /v1/batches/{id}`.
pub async fn get(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Some(r) = authorize(&st, &headers) {
        return r;
    }
    st.batches.get(&id).map(|b| Json(b).into_response()).unwrap_or_else(|| not_found(&id))
}

/// `POST /v1/batches/{id}/cancel`: `cancelling` now, `cancelled` once the batch stops.
pub async fn cancel(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Some(r) = authorize(&st, &headers) {
        return r;
    }
    let mut refused = None;
    let batch = st.batches.update(&id, |b| match b["status"].as_str().unwrap_or_default() {
        "validating" | "in_progress" | "finalizing" => {
            b["status"] = json!("cancelling");
            b["cancelling_at"] = json!(now_secs());
        }
        "cancelling" | "cancelled" => {}
        other => refused = Some(format!("Cannot cancel a batch with status '{other}'.")),
    });
    match (batch, refused) {
        (None, _) => not_found(&id),
        (Some(_), Some(m)) => error(400, m, None),
        (Some(b), None) => {
            st.batches.cancel(&id);
            Json(b).into_response()
        }
    }
}

/// `GET /v1/batches?after=&limit=`: newest first.
pub async fn list(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = authorize(&st, &headers) {
        return r;
    }
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 20,
        Some(Ok(n)) if (1..=100).contains(&n) => n,
        Some(_) => return error(400, "'limit' must be an integer from 1 to 100.", Some("limit")),
    };
    let (data, has_more) = st.batches.page(q.get("after").map(String::as_str), None, limit);
    let first_id = data.first().map(|b| b["id"].clone()).unwrap_or(Value::Null);
    let last_id = data.last().map(|b| b["id"].clone()).unwrap_or(Value::Null);
    Json(json!({"object": "list", "data": data, "first_id": first_id, "last_id": last_id, "has_more": has_more}))
        .into_response()
}
