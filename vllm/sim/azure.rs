//! Azure OpenAI's two ways in to the same OpenAI wire, and Entra's token endpoint
//! ([`super::entra`]) for callers without a key: the v1 API (`/openai/v1/...`, the
//! deployment named by the body's `model`) and a legacy deployment
//! (`/openai/deployments/{deployment}/...?api-version=`, the body's `model` ignored). Each
//! route checks the `api-key` first, then that the deployment exists (the sim's `--model`) and,
//! on legacy routes, that an `api-version` was given, as Azure does; then the OpenAI wire
//! answers, in Azure's error envelope and with its rate-limit headers (`openai_wire`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use axum::{Form, Json};
use serde_json::{json, Value};

use super::openai_wire::{error_response, presented_key};
use super::server::{AppState, SimError};
use super::{embeddings_wire, openai_wire};

type State_ = State<Arc<AppState>>;
type Params = Query<HashMap<String, String>>;

/// Azure's routes: each way in takes the operation from its path.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/openai/v1/models", get(openai_wire::models))
        .route("/openai/v1/{*operation}", post(v1))
        .route("/openai/deployments/{deployment}/{*operation}", post(legacy))
        .route("/{tenant}/oauth2/v2.0/token", post(entra_token))
}

fn no_deployment() -> SimError {
    SimError::new(
        404,
        "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.",
    )
}

/// The key, then the deployment the v1 body's `model` names.
fn v1_admits(st: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<(), SimError> {
    st.check_key(presented_key(st.kind, headers))?;
    let model =
        serde_json::from_slice::<Value>(body).ok().and_then(|v| v["model"].as_str().map(str::to_string));
    match model {
        Some(m) if m == st.model => Ok(()),
        Some(_) => Err(no_deployment()),
        None => Err(SimError::new(400, "Missing required parameter: 'model'.")),
    }
}

/// The key, the `api-version`, then the deployment in the path.
fn legacy_admits(
    st: &AppState,
    headers: &HeaderMap,
    deployment: &str,
    query: &Params,
) -> Result<(), SimError> {
    st.check_key(presented_key(st.kind, headers))?;
    if !query.contains_key("api-version") {
        return Err(SimError::new(404, "Resource not found"));
    }
    if deployment != st.model {
        return Err(no_deployment());
    }
    Ok(())
}

async fn v1(State(st): State_, Path(operation): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let admitted = v1_admits(&st, &headers, &body);
    answer(st, admitted, &operation, headers, body).await
}

async fn legacy(
    State(st): State_,
    Path((deployment, operation)): Path<(String, String)>,
    query: Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admitted = legacy_admits(&st, &headers, &deployment, &query);
    answer(st, admitted, &operation, headers, body).await
}

/// The OpenAI wire's answer to `operation` once the request is admitted, else the refusal in
/// Azure's envelope.
async fn answer(
    st: Arc<AppState>,
    admitted: Result<(), SimError>,
    operation: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match (admitted, operation) {
        (Err(e), _) => error_response(st.kind, &e),
        (Ok(()), "chat/completions") => openai_wire::chat(State(st), headers, body).await,
        (Ok(()), "embeddings") => embeddings_wire::embeddings(State(st), headers, body).await,
        (Ok(()), _) => error_response(st.kind, &SimError::new(404, "Resource not found")),
    }
}

/// `POST /{tenant}/oauth2/v2.0/token`.
async fn entra_token(
    State(st): State_,
    Path(tenant): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let Some(app) = &st.entra else {
        return (
            StatusCode::NOT_FOUND,
            "no Entra application: start the sim with --entra-tenant-id and --entra-client-id",
        )
            .into_response();
    };
    match app.grant(&tenant, &form) {
        Ok(token) => Json(json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token})).into_response(),
        Err((status, error, why)) => (status, Json(json!({"error": error, "error_description": why}))).into_response(),
    }
}
