//! The HTTP face of Spillway: OpenAI-compatible routes, health and readiness.
//!
//! Handlers only decode, authorise and translate; planning and dispatch do the routing.
//! Every error leaves as an OpenAI error envelope.

mod admin;
mod batches;
mod body;
mod chat;
mod chunks;
mod completions;
pub mod dashboard;
pub mod edge;
mod embeddings;
mod frames;
pub mod front;
mod input;
mod messages;
pub mod readiness;
pub mod request_id;
mod responses;
mod traced;
mod whole;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::canonical::Principal;
pub mod codes;
pub mod error;
pub use crate::serve::key_may_use;
use crate::snapshot::Snapshot;
pub use error::{ApiError, ErrorCode};

/// The Messages and Responses doors' reading of a body into the canonical request, for
/// benches/door.rs beside the chat door's ([`wire::decode_bytes`]).
#[doc(hidden)]
pub mod doors {
    use super::ApiError;
    use crate::canonical::ChatRequest;

    pub fn messages(body: &bytes::Bytes, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
        super::messages::canonical(body, output_cap)
    }

    pub fn responses(body: &bytes::Bytes, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
        super::responses::canonical(body, output_cap)
    }

    /// A streamed chat answer's SSE body, as the chat door writes it from its events.
    pub fn chat_frames(
        events: crate::canonical::EventStream,
    ) -> std::pin::Pin<Box<dyn futures::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send>>
    {
        let writer = super::chunks::ChunkWriter::new("chatcmpl-1", "bench", 0);
        super::chunks::sse_body(events, "bench".into(), writer, true, Default::default(), ())
    }
}

/// What every handler shares, by who needs it (cheap to clone: each part is shared).
#[derive(Clone)]
pub struct AppState {
    /// The request pipeline and what it needs (the dialects).
    pub serving: Arc<crate::serve::Serving>,
    /// What a front door checks before it decodes ([`front::receive`]).
    pub door: front::Door,
    /// What the admin API, `/metrics`, `/readyz`, `/v1/models`, the dashboard and the layers
    /// read.
    pub ops: Arc<Ops>,
}

impl axum::extract::FromRef<AppState> for Arc<Ops> {
    fn from_ref(state: &AppState) -> Arc<Ops> {
        Arc::clone(&state.ops)
    }
}

/// The router's state as the operator sees and changes it.
pub struct Ops {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// The hosted lanes of dispatch: requests waiting for a connection slot, per origin.
    pub lanes: crate::adapter::transport::lanes::Lanes,
    /// The router's own in-flight and unseen counts per node (shared with dispatch).
    pub load: Arc<crate::fleet::load::NodeLoad>,
    /// The client keys: static ones from the environment and issued ones from the store.
    /// Neither kind configured: no auth.
    pub client_keys: Arc<crate::keys::KeyBoard>,
    /// Hosted quota counters (for `/metrics`: whether the shared Redis state is reachable).
    pub quota: Arc<crate::guard::quota::QuotaBoard>,
    /// Limits and budgets per client key and team (for `/metrics`: the shared state).
    pub budgets: Arc<crate::guard::budget::BudgetBoard>,
    /// The cost ledger (`None` when it is off): its store for reports, its writer's buffer.
    pub ledger: Option<(crate::ledger::Store, crate::ledger::LedgerSender)>,
    /// Bearer token of the admin API; `None`: the admin API is off.
    pub admin_token: Option<String>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Node telemetry (GPU readings for the metrics).
    pub telemetry: Arc<crate::fleet::telemetry::TelemetryBoard>,
    /// Operator holds (drain, disable) and breaker overrides as applied here; the admin API
    /// changes them through `operator` (shared through the ledger store when there is one).
    pub holds: Arc<crate::guard::holds::HoldBoard>,
    pub operator: Arc<crate::control::opstate::OperatorBoard>,
    /// Canary probes of fallback backends (run on an interval, or now by the admin API).
    pub canaries: Arc<crate::control::canary::Canaries>,
    /// Config reload (admin API and SIGHUP).
    pub reloader: Arc<crate::control::reload::Reloader>,
    /// The evaluation gate: results, accepted pins, re-runs and shadow traffic.
    pub gate: crate::gate::service::GateService,
    /// Set by the first shutdown signal: `/readyz` answers 503 while the router serves on.
    pub readiness: Arc<readiness::Readiness>,
    /// OpenTelemetry traces (off unless an OTLP endpoint is configured).
    pub tracing: crate::trace::Tracing,
    /// Where each session was served last, and its moves (fed by the bookkeeping loop).
    pub sessions: Arc<std::sync::Mutex<crate::control::sessions::SessionBook>>,
    /// The queue in front of each local pool (shared with the pipeline).
    pub queues: Arc<crate::guard::wait_queue::WaitQueues>,
    /// The queue of access lines to the bookkeeping loop.
    pub access: crate::control::access::AccessLog,
}

/// The dialect doors as the batch runner calls them: in process, each line decoded, served and
/// answered by its endpoint's door, with no router between.
pub fn batch_lines(state: &AppState) -> Arc<dyn crate::batch::runner::LineCaller> {
    let doors = axum::extract::FromRef::from_ref(state);
    Arc::new(batches::InProcess::new(doors, state.ops.tracing.clone()))
}

pub fn router(state: AppState) -> Router {
    let api = doors(state.clone());
    // `GET /v1/responses`: the Responses WebSocket mode, each message sent through `api`.
    let doors = axum::extract::FromRef::from_ref(&state);
    let sockets = responses::Sockets { api: api.clone(), doors };
    let websocket = Router::new()
        .route("/v1/responses", get(responses::upgrade))
        .with_state(sockets)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state.ops), request_id::layer));
    api.merge(websocket)
}

/// Every route but the WebSocket upgrade.
fn doors(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(models))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/dashboard", get(crate::api::dashboard::page))
        .route("/dashboard/data", get(crate::api::dashboard::data))
        .merge(admin::routes())
        .merge(batches::routes())
        .fallback(|| async { ApiError::new(codes::NOT_FOUND, "no such route") })
        // After every route (it applies to the routes registered so far); axum adds `Allow`.
        .method_not_allowed_fallback(|method: Method, uri: Uri| async move {
            ApiError::new(
                codes::METHOD_NOT_ALLOWED,
                format!(
                    "{method} is not allowed on {}; the Allow header lists the methods that are",
                    uri.path()
                ),
            )
        })
        // Inside the request-id layer: the span carries the request's id.
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state.ops), traced::layer))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state.ops), request_id::layer))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state.ops), close_when_leaving))
        .with_state(state)
}

/// While the router is leaving (after SIGTERM, before it stops accepting), HTTP/1 answers
/// carry `Connection: close`, so kept-alive clients reconnect (through the Service, to another
/// replica) instead of reusing a connection the drain will close under them.
async fn close_when_leaving(
    State(state): State<Arc<Ops>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let http1 = request.version() <= http::Version::HTTP_11;
    let mut response = next.run(request).await;
    if http1 && state.readiness.leaving() {
        response.headers_mut().insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    response
}

/// Who the request authenticated as (`None` when no key of either kind is configured), or
/// 401. The key comes as `Authorization: Bearer <key>` (OpenAI's SDKs) or `x-api-key: <key>`
/// (Anthropic's), on every route. An unknown, revoked or expired key gets one answer, which
/// each front door sends in its dialect's envelope. The key is never logged.
pub(crate) fn authenticate(
    keys: &crate::keys::KeyBoard,
    headers: &HeaderMap,
) -> Result<Option<Principal>, ApiError> {
    if !keys.required() {
        return Ok(None);
    }
    let unauthorized = |m: &str| ApiError::new(ErrorCode::InvalidApiKey, m);
    let key = match (headers.get(header::AUTHORIZATION), headers.get("x-api-key")) {
        (Some(value), _) => value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <key>`"))?,
        (None, Some(value)) => {
            value.to_str().map_err(|_| unauthorized("the x-api-key header is not text"))?
        }
        (None, None) => {
            return Err(unauthorized("missing API key: send Authorization: Bearer <key> or x-api-key: <key>"))
        }
    };
    let now_ms = crate::ledger::unix_millis(std::time::SystemTime::now());
    keys.check(key.trim(), now_ms).map(Some).map_err(|_| unauthorized("invalid API key"))
}

/// The tasks this key may use, and their aliases: in OpenAI's list shape, or in Anthropic's
/// when the request carries `anthropic-version` (Anthropic's SDKs always send it).
async fn models(State(state): State<Arc<Ops>>, headers: HeaderMap) -> Response {
    let anthropic = headers.contains_key("anthropic-version");
    let key = match authenticate(&state.client_keys, &headers) {
        Ok(key) => key,
        Err(e) if anthropic => return messages::error_response(&e),
        Err(e) => return e.into_response(),
    };
    let snap = state.snapshot.load();
    let ids: Vec<&str> = snap
        .config
        .tasks
        .iter()
        .filter(|t| key_may_use(key.as_ref(), t))
        .flat_map(|t| std::iter::once(t.name.as_str()).chain(t.aliases.iter().map(String::as_str)))
        .collect();
    if anthropic {
        let data: Vec<_> = ids
            .iter()
            .map(|id| json!({"type": "model", "id": id, "display_name": id, "created_at": "1970-01-01T00:00:00Z"}))
            .collect();
        return Json(
            json!({"data": data, "has_more": false, "first_id": ids.first(), "last_id": ids.last()}),
        )
        .into_response();
    }
    let data: Vec<_> = ids
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "spillway"}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// Ready once startup has ended (`readiness`: every local node measured, or the startup
/// wait over) and until a shutdown signal. The body says how much of the fleet the router can
/// see: local nodes, how many have fresh telemetry, which pools and nodes are unmeasured, which nodes
/// are quarantined.
async fn readyz(State(state): State<Arc<Ops>>) -> Response {
    if state.readiness.leaving() {
        let body = json!({"status": "draining", "message": "shutting down: send new traffic elsewhere"});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let snap = state.snapshot.load();
    let now = tokio::time::Instant::now();
    let nodes: usize = snap.backends.iter().map(|b| b.nodes.len()).sum();
    let local: Vec<_> = snap
        .backends
        .iter()
        .filter(|b| b.is_local())
        .flat_map(|b| b.nodes.iter().map(move |n| (b, n)))
        .collect();
    let fresh =
        local.iter().filter(|(b, n)| crate::fleet::headroom::fresh(&n.signals, &b.limits, now)).count();
    // How many nodes each engine's adapter reads ("unknown": no good scrape yet).
    let mut engines = std::collections::BTreeMap::<&str, usize>::new();
    for (_, n) in &local {
        let engine = state.telemetry.engine(&n.key);
        *engines.entry(engine.map_or("unknown", |e| e.name())).or_default() += 1;
    }
    let quarantined: Vec<_> = local
        .iter()
        .filter_map(|(_, n)| n.quarantine.as_ref().map(|q| json!({"node": n.key, "why": q})))
        .collect();
    let started = state.readiness.startup.over(&snap, now);
    let body = json!({
        "status": if started { "ready" } else { "starting" },
        "snapshot_version": snap.version,
        "backends": snap.backends.len(),
        "nodes": nodes,
        "local_nodes": local.len(),
        "fresh_local_nodes": fresh,
        "unmeasured_pools": snap.unmeasured_pools(now),
        "unmeasured_nodes": snap.unmeasured_nodes(now),
        "engines": engines,
        "quarantined": quarantined,
    });
    let status = if started { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}

/// The Prometheus exposition, with state gauges read now.
async fn metrics(State(state): State<Arc<Ops>>) -> Response {
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], current_metrics(&state)).into_response()
}

/// Set the state gauges from the current snapshot and render every family.
pub fn current_metrics(state: &Ops) -> String {
    let snapshot = state.snapshot.load();
    state.metrics.refresh(&crate::metrics::StateView {
        snapshot: &snapshot,
        telemetry: &state.telemetry,
        ledger_buffered: state.ledger.as_ref().map(|(_, s)| s.buffered()),
        ledger_spool: state.ledger.as_ref().and_then(|(_, s)| s.spool_stats()),
        upstream_waiting: &|base_url: &str| state.lanes.waiting(base_url),
        queues: &state.queues.depths(),
        now: tokio::time::Instant::now(),
    });
    state.metrics.set_quota_shared_state(state.quota.is_shared().then(|| state.quota.shared_state_ok()));
    state.metrics.set_budget_shared_state(state.budgets.is_shared().then(|| state.budgets.shared_state_ok()));
    let operator = state.operator.status();
    state.metrics.set_operator_state(&crate::metrics::OperatorStateView {
        version: operator.version,
        sync_age: operator.sync_age,
        notify_up: operator.notify_up,
    });
    let keys_age = state.client_keys.read_age(tokio::time::Instant::now());
    state.metrics.set_issued_keys_age(keys_age.map(|age| age.as_secs_f64()));
    let standings = state.gate.board.standings(&snapshot.config, &state.gate.pins);
    state.metrics.set_gate(
        standings.iter().map(|s| (s.task.as_str(), s.backend.as_str(), s.passing(), s.last_run_failed)),
    );
    state.metrics.render()
}

/// A running router: where it listens, and the task serving it.
pub struct RouterHandle {
    pub addr: SocketAddr,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Whether the router reports itself ready; [`crate::app::rollout`] clears it on SIGTERM.
    pub readiness: Arc<readiness::Readiness>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{IssuedKey, KeyId};

    #[test]
    fn issued_keys_use_the_tasks_they_name_static_keys_the_allowed_keys() {
        let config = crate::config::parse(
            "client_keys_env: [TEAM_A, TEAM_B]\n\
             backends: [{name: a, kind: openai, model: m}]\n\
             tasks:\n\
             - {name: open, backends: [a], slo: {ttft_ms: 500}}\n\
             - {name: closed, backends: [a], allowed_keys: [TEAM_A], slo: {ttft_ms: 500}}\n",
        )
        .unwrap();
        let (open, closed) = (config.task("open").unwrap(), config.task("closed").unwrap());
        let issued = |tasks: &[&str]| {
            Principal::Issued(std::sync::Arc::new(IssuedKey {
                id: KeyId::parse("0123456789ab").unwrap(),
                name: "ci".into(),
                team: "search".into(),
                tasks: tasks.iter().map(|t| t.to_string()).collect(),
            }))
        };
        let env = |name: &str| Principal::Static { env: name.into() };
        let may = |key: &Principal| (key_may_use(Some(key), open), key_may_use(Some(key), closed));
        assert_eq!(may(&env("TEAM_A")), (true, true));
        assert_eq!(may(&env("TEAM_B")), (true, false));
        assert_eq!(may(&issued(&[])), (true, false), "no tasks: the open ones");
        assert_eq!(may(&issued(&["closed"])), (false, true), "named tasks only, granted at creation");
        assert_eq!((key_may_use(None, open), key_may_use(None, closed)), (true, true), "auth off");
    }
}
