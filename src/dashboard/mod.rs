//! The built-in TTFT and SLO dashboard at `/dashboard` (placeholder until the page lands).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};

use crate::api::AppState;

/// `GET /dashboard`: the page.
pub async fn page() -> Response {
    Html("<!doctype html><title>Spillway</title><p>dashboard coming</p>").into_response()
}

/// `GET /dashboard/data`: what the page draws, as JSON.
pub async fn data(State(_state): State<Arc<AppState>>) -> Response {
    axum::Json(serde_json::json!({})).into_response()
}
