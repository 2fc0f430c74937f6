//! Anthropic's Message Batches API as the `anthropic` kind serves it: `POST
//! /v1/messages/batches`, `GET …/batches[/{id}]`, `POST …/{id}/cancel`, `GET …/{id}/results`
//! (JSONL) and `DELETE …/{id}`, with the `message_batch` object and Anthropic's error
//! envelope, behind the Messages route's own `x-api-key`/`anthropic-version` checks. After
//! `--batch-delay-ms` each request is answered by the Messages route (`batch_store.rs`).

use super::anthropic_wire::{check_headers, error_response};
use super::batch_lines;
use super::batch_store::{self, Ending, Line};
use super::server::{AppState, SimError};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn rejected(status: u16, message: impl Into<String>) -> Response {
    error_response(&SimError::new(status, message))
}

fn not_found(id: &str) -> Response {
    rejected(404, format!("No message batch found with id '{id}'."))
}

/// Check `requests` and turn it into lines.
fn read_requests(v: &Value) -> Result<Vec<Line>, String> {
    let requests = v.get("requests").and_then(Value::as_array).filter(|r| !r.is_empty());
    let requests = requests.ok_or("requests: must be a non-empty array")?;
    let mut lines = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let custom_id = r.get("custom_id").and_then(Value::as_str).filter(|c| {
            (1..=64).contains(&c.len())
                && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
        });
        let custom_id =
            custom_id.ok_or(format!("requests.{i}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$"))?;
        let params = r
            .get("params")
            .filter(|p| p.is_object())
            .ok_or(format!("requests.{i}.params: Field required"))?;
        lines.push(Line {
            custom_id: custom_id.to_string(),
            url: "/v1/messages".to_string(),
            body: params.clone(),
        });
    }
    if let Some(id) = batch_store::duplicate_id(&lines) {
        return Err(format!("Duplicate custom_id '{id}': each request's custom_id must be unique."));
    }
    Ok(lines)
}

/// `POST /v1/messages/batches`.
pub async fn create(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(e) = check_headers(&st, &headers) {
        return error_response(&e);
    }
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return rejected(400, format!("invalid JSON body: {e}")),
    };
    let lines = match read_requests(&v) {
        Ok(l) => l,
        Err(m) => return rejected(400, m),
    };
    let id = st.batches.new_id("msgbatch_");
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let results_url = format!("http://{host}/v1/messages/batches/{id}/results");
    let created = jiff::Timestamp::now();
    let expires = created.checked_add(jiff::SignedDuration::from_hours(24)).unwrap_or(created);
    let object = json!({
        "id": id, "type": "message_batch", "processing_status": "in_progress",
        "request_counts": {"processing": lines.len(), "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
        "ended_at": null, "created_at": created.to_string(), "expires_at": expires.to_string(),
        "cancel_initiated_at": null, "archived_at": null, "results_url": null,
    });
    let cancel = st.batches.insert(object.clone());
    let st2 = Arc::clone(&st);
    tokio::spawn(async move {
        let ending = st2.batches.wait_turn(&cancel).await;
        run(&st2, &id, &lines, ending, results_url).await;
    });
    Json(object).into_response()
}

/// Answer the requests (or not), keep the results and end the batch.
async fn run(st: &Arc<AppState>, id: &str, lines: &[Line], ending: Ending, results_url: String) {
    let answers = match ending {
        Ending::Run => batch_lines::answer_all(st, lines).await.into_iter().map(Some).collect(),
        _ => vec![None; lines.len()],
    };
    let mut counts = HashMap::from([("succeeded", 0), ("errored", 0), ("canceled", 0), ("expired", 0)]);
    let mut jsonl = String::new();
    for (line, answer) in lines.iter().zip(answers) {
        let result = match (ending, answer) {
            (_, Some(a)) if (200..300).contains(&a.status) => json!({"type": "succeeded", "message": a.body}),
            (_, Some(a)) => json!({"type": "errored", "error": a.body}),
            (Ending::Expired, None) => json!({"type": "expired"}),
            (_, None) => json!({"type": "canceled"}),
        };
        let ty = match result["type"].as_str() {
            Some("succeeded") => "succeeded",
            Some("errored") => "errored",
            Some("expired") => "expired",
            _ => "canceled",
        };
        *counts.get_mut(ty).expect("a counted type") += 1;
        jsonl += &(json!({"custom_id": line.custom_id, "result": result}).to_string() + "\n");
    }
    st.batches.set_results(id, jsonl.into());
    st.batches.update(id, |b| {
        b["processing_status"] = json!("ended");
        b["ended_at"] = json!(now());
        b["results_url"] = json!(results_url);
        b["request_counts"] = json!({
            "processing": 0, "succeeded": counts["succeeded"], "errored": counts["errored"],
            "canceled": counts["canceled"], "expired": counts["expired"],
        });
    });
}

/// Run the header checks, then `f`.
fn checked(st: &AppState, headers: &HeaderMap, f: impl FnOnce() -> Response) -> Response {
    match check_headers(st, headers) {
        Ok(()) => f(),
        Err(e) => error_response(&e),
    }
}

/// `GET /v1/messages/batches/{id}`.
pub async fn get(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    checked(&st, &headers, || {
        st.batches.get(&id).map(|b| Json(b).into_response()).unwrap_or_else(|| not_found(&id))
    })
}

/// `POST /v1/messages/batches/{id}/cancel`: `canceling` until the batch ends.
pub async fn cancel(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    checked(&st, &headers, || {
        let batch = st.batches.update(&id, |b| {
            if b["processing_status"] == "in_progress" {
                b["processing_status"] = json!("canceling");
                b["cancel_initiated_at"] = json!(now());
            }
        });
        match batch {
            Some(b) => {
                st.batches.cancel(&id);
                Json(b).into_response()
            }
            None => not_found(&id),
        }
    })
}

/// `GET /v1/messages/batches/{id}/results`: JSONL, once the batch has ended.
pub async fn results(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    checked(&st, &headers, || match (st.batches.get(&id), st.batches.results(&id)) {
        (None, _) => not_found(&id),
        (Some(_), None) => {
            rejected(400, format!("Message batch {id} has not ended yet; no results are available."))
        }
        (Some(_), Some(jsonl)) => {
            let mut resp = jsonl.into_response();
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-jsonl"));
            resp
        }
    })
}

/// `DELETE /v1/messages/batches/{id}`: only an ended batch.
pub async fn delete(State(st): State<Arc<AppState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    checked(&st, &headers, || match st.batches.get(&id) {
        None => not_found(&id),
        Some(b) if b["processing_status"] != "ended" => {
            rejected(400, format!("Message batch {id} is still processing; cancel it or wait for it to end."))
        }
        Some(_) => {
            st.batches.remove(&id);
            Json(json!({"id": id, "type": "message_batch_deleted"})).into_response()
        }
    })
}

/// `GET /v1/messages/batches?before_id=&after_id=&limit=`: newest first.
pub async fn list(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    checked(&st, &headers, || {
        let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
            None => 20,
            Some(Ok(n)) if (1..=1000).contains(&n) => n,
            Some(_) => return rejected(400, "limit: must be an integer from 1 to 1000"),
        };
        let (after, before) = (q.get("after_id").map(String::as_str), q.get("before_id").map(String::as_str));
        let (data, has_more) = st.batches.page(after, before, limit);
        let first_id = data.first().map(|b| b["id"].clone()).unwrap_or(Value::Null);
        let last_id = data.last().map(|b| b["id"].clone()).unwrap_or(Value::Null);
        Json(json!({"data": data, "has_more": has_more, "first_id": first_id, "last_id": last_id}))
            .into_response()
    })
}
