//! `GET /admin/sessions?limit=N` and `GET /admin/sessions/{id}`: the sessions this replica
//! served lately (latest first), each with where its last request was served and how often it
//! moved between the fleet and hosted providers (`control::sessions`). A session is named by
//! its affinity hash, as the logs and the ledger's rows name it; never by its key.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::authorize;
use crate::api::{codes, ApiError, Ops};

/// Sessions listed unless `limit` says otherwise, and at most.
const LIMIT: usize = 50;
const LIMIT_MAX: usize = 1000;

pub(crate) async fn list(
    State(state): State<Arc<Ops>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let listed = authorize(&state, &headers).and_then(|_| limit(&params)).map(|limit| {
        let book = state.sessions.lock().unwrap_or_else(|e| e.into_inner());
        Json(json!({"sessions": book.recent(limit), "tracked": book.len()}))
    });
    listed.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

pub(crate) async fn one(
    State(state): State<Arc<Ops>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let found = authorize(&state, &headers).and_then(|_| {
        let session = state.sessions.lock().unwrap_or_else(|e| e.into_inner()).get(&id);
        session.map(Json).ok_or_else(|| {
            ApiError::new(codes::NOT_FOUND, format!("no session `{id}` on this replica lately"))
        })
    });
    found.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

fn limit(params: &HashMap<String, String>) -> Result<usize, ApiError> {
    super::count_param(params, "limit", LIMIT, LIMIT_MAX)
}
