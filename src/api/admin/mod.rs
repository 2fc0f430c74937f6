//! The admin API: operator routes behind their own bearer token (`admin_token_env`), never a
//! client key. Off (404) when no admin token is configured. Every action is logged with who
//! did it (the `x-spillway-operator` header, else "admin") and what it did.

mod audit;
mod fleet;
mod gate;
mod keys;
mod report;
mod sessions;
mod spenders;

use std::sync::Arc;

use axum::http::{header, HeaderMap};
use axum::routing::{get, post};
use axum::Router;
use sha2::{Digest, Sha256};

use super::{ApiError, AppState, Ops};

/// Who is acting: the `x-spillway-operator` header (a name for the audit log), else "admin".
#[derive(Debug, Clone)]
pub struct Operator(pub String);

/// Check the admin bearer token and say who is acting.
pub(crate) fn authorize(state: &Ops, headers: &HeaderMap) -> Result<Operator, ApiError> {
    let Some(expected) = &state.admin_token else {
        return Err(ApiError::new(codes::NOT_FOUND, "the admin API is off (set admin_token_env)"));
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // Compare digests so that the time taken says nothing about the token.
    match sent {
        Some(token) if Sha256::digest(token) == Sha256::digest(expected) => {}
        _ => return Err(ApiError::new(codes::INVALID_ADMIN_TOKEN, "this route needs the admin token")),
    }
    let who = headers
        .get("x-spillway-operator")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or("admin");
    Ok(Operator(who.to_string()))
}

/// A route's one query parameter `name`, a count from 1 to `max` (`default` when absent); any
/// other parameter, or a count out of range, is refused naming it.
pub(crate) fn count_param(
    params: &std::collections::HashMap<String, String>,
    name: &str,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    if let Some(unknown) = params.keys().find(|k| k.as_str() != name) {
        return Err(
            ApiError::bad_request(format!("unknown parameter `{unknown}`; expected {name}")).param(unknown)
        );
    }
    match params.get(name) {
        None => Ok(default),
        Some(text) => text.trim().parse::<usize>().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
            ApiError::bad_request(format!("{name} `{text}` must be a whole number from 1 to {max}"))
                .param(name)
        }),
    }
}

/// Every admin route.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/admin/reports/cost", get(report::cost_report))
        .route("/admin/spenders", get(spenders::top_spenders))
        .route("/admin/sessions", get(sessions::list))
        .route("/admin/sessions/{id}", get(sessions::one))
        .route("/admin/backends", get(fleet::list))
        .route("/admin/audit", get(audit::list))
        .route("/admin/hold", post(fleet::hold))
        .route("/admin/release", post(fleet::release))
        .route("/admin/breakers", post(fleet::force_breaker))
        .route("/admin/canary", post(fleet::canary))
        .route("/admin/reload", post(reload))
        .route("/admin/gate", get(gate::status))
        .route("/admin/gate/run", post(gate::run))
        .route("/admin/gate/requalify", post(gate::requalify))
        .route("/admin/keys", get(keys::list).post(keys::create))
        .route("/admin/keys/{id}/revoke", post(keys::revoke))
        .route("/admin/keys/{id}/rotate", post(keys::rotate))
}

/// `POST /admin/reload`: read the config file again and apply it (see `control::reload`).
async fn reload(
    axum::extract::State(state): axum::extract::State<Arc<Ops>>,
    headers: HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let who = match authorize(&state, &headers) {
        Ok(who) => who,
        Err(e) => return e.into_response(),
    };
    match state.reloader.reload(|name| std::env::var(name).ok()) {
        Ok(done) => {
            tracing::warn!(who = %who.0, restart_needed = ?done.restart_needed, "admin: config reloaded");
            axum::Json(done).into_response()
        }
        Err(problems) => {
            tracing::error!(who = %who.0, ?problems, "admin: config reload refused");
            ApiError::new(
                codes::INVALID_CONFIG,
                format!("the config was not reloaded: {}", problems.join("; ")),
            )
            .into_response()
        }
    }
}
use crate::api::codes;
