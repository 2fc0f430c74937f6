//! Google Vertex AI's publisher models: Claude through `:rawPredict` / `:streamRawPredict`
//! (Anthropic's body less `model`, with `anthropic_version: vertex-2023-10-16`; the stream as
//! Anthropic's SSE) and `count-tokens:rawPredict`, Gemini through `:generateContent` /
//! `:streamGenerateContent`, all below `/v1/projects/{project}/locations/{location}/publishers/
//! {publisher}/models/`. Every call needs a bearer token the simulator's own token endpoint
//! (`/token`, [`super::google_oauth`]) issued; errors come in Google's envelope.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Form, Json, Router};
use serde_json::{json, Value};

use super::anthropic_wire::{self, Serving};
use super::server::{AppState, SimError};
use crate::adapter::provider::vertex::VERTEX_VERSION;
use crate::adapter::wire::anthropic::host::CLOUD_BETAS;

type State_ = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/token", post(token)).route(
        "/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{model_verb}",
        post(predict),
    )
}

/// Google's error envelope.
fn google_error(e: &SimError) -> Response {
    let status = match e.status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    };
    let code = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"code": e.status, "message": e.message, "status": status}});
    let mut resp = (code, Json(body)).into_response();
    e.put_retry_after(super::SimKind::Vertex, resp.headers_mut());
    resp
}

/// `POST /token`: the OAuth token endpoint of the service account.
async fn token(State(st): State_, headers: HeaderMap, Form(form): Form<Vec<(String, String)>>) -> Response {
    let Some(account) = &st.google else {
        return (StatusCode::NOT_FOUND, "no service account: start the sim with --gcp-service-account")
            .into_response();
    };
    let host = headers.get("host").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    match account.grant(&form, &format!("http://{host}/token"), now) {
        Ok(token) => Json(token).into_response(),
        Err(error) => (StatusCode::BAD_REQUEST, Json(error)).into_response(),
    }
}

/// A bearer token the token endpoint issued (any, when the sim has no service account).
fn authenticate(st: &AppState, headers: &HeaderMap) -> Result<(), SimError> {
    let Some(account) = &st.google else { return Ok(()) };
    let bearer =
        headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    match bearer {
        Some(token) if account.accepts(token) => Ok(()),
        _ => Err(SimError::new(
            401,
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        )),
    }
}

async fn predict(
    State(st): State_,
    Path((project, location, publisher, model_verb)): Path<(String, String, String, String)>,
    query: Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admitted = authenticate(&st, &headers).and_then(|()| {
        if (project.as_str(), location.as_str()) != (st.vertex_place.0.as_str(), st.vertex_place.1.as_str()) {
            return Err(SimError::new(404, format!("Project {project} has no models in {location}.")));
        }
        Ok(())
    });
    if let Err(e) = admitted {
        return google_error(&e);
    }
    let (model, verb) = model_verb.split_once(':').unwrap_or((&model_verb, ""));
    match publisher.as_str() {
        "anthropic" => match claude(&st, model, verb, &headers, &body).await {
            Ok(resp) => resp,
            Err(e) => google_error(&e),
        },
        "google" => {
            super::gemini_wire::generate(State(st), Path(model_verb.clone()), query, headers, body).await
        }
        other => google_error(&SimError::new(
            404,
            format!("Publisher model publishers/{other}/models/{model} not found."),
        )),
    }
}

/// Claude's three verbs.
async fn claude(
    st: &Arc<AppState>,
    model: &str,
    verb: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, SimError> {
    let v = st.read_json(body)?;
    if v.get("anthropic_version").and_then(Value::as_str) != Some(VERTEX_VERSION) {
        return Err(SimError::new(400, format!("anthropic_version: must be {VERTEX_VERSION}")));
    }
    let betas = headers.get("anthropic-beta").and_then(|h| h.to_str().ok()).unwrap_or_default();
    if let Some(flag) = betas.split(',').map(str::trim).find(|f| !f.is_empty() && !CLOUD_BETAS.contains(f)) {
        return Err(SimError::new(
            400,
            format!("Unexpected value(s) `{flag}` for the `anthropic-beta` header."),
        ));
    }
    let named = if model == "count-tokens" {
        v.get("model").and_then(Value::as_str).unwrap_or_default()
    } else {
        model
    };
    if named != st.model {
        return Err(SimError::new(
            404,
            format!("Publisher Model `publishers/anthropic/models/{named}` not found."),
        ));
    }
    match (model, verb) {
        ("count-tokens", "rawPredict") => {
            let mut v = v;
            if let Some(body) = v.as_object_mut() {
                body.remove("anthropic_version");
                body.remove("model");
            }
            let n = anthropic_wire::count(st.kind, v)?;
            Ok(Json(json!({"input_tokens": n})).into_response())
        }
        (_, "rawPredict" | "streamRawPredict") => {
            if v.get("model").is_some() {
                return Err(SimError::new(400, "model: the model is named in the URL, not the body"));
            }
            let stream = verb == "streamRawPredict";
            if v.get("stream").and_then(Value::as_bool).unwrap_or(false) != stream {
                return Err(SimError::new(400, format!("stream must be {stream} for {verb}")));
            }
            let serving = Serving { model: Some(model.to_string()), stream: Some(stream), framing: None };
            anthropic_wire::answer(st, headers, &v, serving).await
        }
        _ => Err(SimError::new(404, format!("no method {verb}"))),
    }
}
