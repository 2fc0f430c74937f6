//! Which paths each simulated kind serves, and for a self-hosted node which identity and
//! metrics paths its engine's server has (`--engine`).
//!
//! Every self-hosted engine keeps the same OpenAI-compatible routes (and `/health`); what
//! differs is where its Prometheus page lives (`trtllm-serve`: `/prometheus/metrics`, its
//! `/metrics` being JSON iteration stats) and which JSON identity it answers: `/version`
//! (vLLM, `trtllm-serve`), `/props` (llama.cpp), `/info` (TGI). The bodies come from
//! `pages/`; this file only wires them to paths.

use super::pages::{self, info, NodeFacts};
use super::server::AppState;
use super::{
    anthropic_wire, batches_anthropic, batches_openai, completions_wire, embeddings_wire, files_openai,
    gemini_wire, openai_wire, responses_wire, SimKind,
};
use crate::fleet::engines::Engine;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;
use std::sync::Arc;

type Routes = Router<Arc<AppState>>;

async fn prometheus_page(State(st): State<Arc<AppState>>) -> Response {
    st.pages_served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = st.page.as_ref().map(|p| p.encode()).unwrap_or_default();
    let mut resp = body.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}

async fn iteration_stats(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(st.page.as_ref().and_then(|p| p.iteration_stats()).unwrap_or_else(|| Value::Array(Vec::new())))
}

/// A route that always answers `body`.
fn fixed(r: Routes, path: &str, body: Value) -> Routes {
    r.route(path, get(move || async move { Json(body) }))
}

/// The self-hosted node's routes for `engine`.
fn node(engine: Engine, facts: &NodeFacts) -> Routes {
    let r = Router::new()
        .route("/v1/chat/completions", post(openai_wire::chat))
        .route("/v1/responses", post(responses_wire::responses))
        // vLLM serves the Messages API natively (since v0.11).
        .route("/v1/messages", post(anthropic_wire::messages))
        .route("/v1/completions", post(completions_wire::completions))
        .route("/v1/embeddings", post(embeddings_wire::embeddings))
        .route("/v1/models", get(openai_wire::models))
        .route("/health", get(|| async {}))
        .route(pages::metrics_path(engine), get(prometheus_page));
    let r = match info::version(engine) {
        Some(v) => fixed(r, "/version", v),
        None => r,
    };
    match engine {
        Engine::Trtllm => r.route("/metrics", get(iteration_stats)),
        Engine::Llamacpp => fixed(r, "/props", info::llamacpp_props(facts)),
        Engine::Tgi => fixed(r, "/info", info::tgi_info(facts)),
        Engine::Vllm | Engine::Sglang => r,
    }
}

/// What a sim serves: a self-hosted node running an engine, or a hosted provider.
pub enum Serves<'a> {
    Node(Engine, &'a NodeFacts),
    Hosted(SimKind),
}

/// Every route of a sim.
pub fn router(serves: Serves<'_>, state: Arc<AppState>) -> Router {
    let r = match serves {
        Serves::Node(engine, facts) => node(engine, facts),
        Serves::Hosted(SimKind::OpenAi) => Router::new()
            .route("/v1/chat/completions", post(openai_wire::chat))
            .route("/v1/responses", post(responses_wire::responses))
            .route("/v1/completions", post(completions_wire::completions))
            .route("/v1/embeddings", post(embeddings_wire::embeddings))
            .route("/v1/models", get(openai_wire::models))
            .route("/v1/files", post(files_openai::upload))
            .route("/v1/files/{id}", get(files_openai::get).delete(files_openai::delete))
            .route("/v1/files/{id}/content", get(files_openai::content))
            .route("/v1/batches", post(batches_openai::create).get(batches_openai::list))
            .route("/v1/batches/{id}", get(batches_openai::get))
            .route("/v1/batches/{id}/cancel", post(batches_openai::cancel)),
        Serves::Hosted(SimKind::Anthropic) => Router::new()
            .route("/v1/messages", post(anthropic_wire::messages))
            .route("/v1/messages/count_tokens", post(anthropic_wire::count_tokens))
            .route("/v1/messages/batches", post(batches_anthropic::create).get(batches_anthropic::list))
            .route("/v1/messages/batches/{id}", get(batches_anthropic::get).delete(batches_anthropic::delete))
            .route("/v1/messages/batches/{id}/cancel", post(batches_anthropic::cancel))
            .route("/v1/messages/batches/{id}/results", get(batches_anthropic::results)),
        Serves::Hosted(SimKind::Gemini) => {
            Router::new().route("/v1beta/models/{model_action}", post(gemini_wire::generate))
        }
        Serves::Hosted(SimKind::AzureOpenai) => super::azure::routes(),
        Serves::Hosted(SimKind::Bedrock) => super::bedrock::routes(),
        Serves::Hosted(SimKind::Vertex) => super::vertex::routes(),
        // A vLLM-kind sim is always a node; as "hosted" it would serve nothing.
        Serves::Hosted(SimKind::Vllm) => Router::new(),
    };
    r.with_state(state)
}
