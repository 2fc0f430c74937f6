//! Admin routes over the fleet: list every backend and node with its state and why, drain or
//! disable one (a game-day drill: traffic moves to the rest of the plan, requests in flight
//! finish), release it, and force a breaker open or closed. Each action goes through the
//! operator state (`control::opstate`): stored and audited first, then in effect here, and on
//! every other replica at once (Redis) or within `state.operator_poll_ms`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::authorize;
use crate::api::{codes, ApiError, Ops};
use crate::canonical::NodeKey;
use crate::control::opstate::Change;
use crate::guard::breaker::Forced;
use crate::guard::holds::{HoldKind, Scope};
use crate::snapshot::{BreakerView, Snapshot};

fn reply(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.into_response(),
    }
}

fn decode<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("request body: {e}")))
}

/// The store behind the operator state did not take the change: nothing changed anywhere.
fn not_stored(e: crate::ledger::StoreError) -> ApiError {
    tracing::error!("admin: the operator state change was not stored: {e}");
    ApiError::new(codes::LEDGER_UNAVAILABLE, "the ledger store did not take the change; nothing changed")
}

fn breaker_str(b: BreakerView) -> &'static str {
    match b {
        BreakerView::Closed => "closed",
        BreakerView::HalfOpen => "half_open",
        BreakerView::Open => "open",
    }
}

/// A self-hosted node's engine as telemetry knows it: which adapter reads its pages (`null`
/// before the first good scrape of an `auto` pool), what its side page said, and which of the
/// TTFT predictor's inputs its telemetry gives (the rest are defaults).
fn engine_of(state: &Ops, n: &crate::snapshot::NodeView) -> serde_json::Map<String, Value> {
    let telemetry = state.telemetry.get(&n.key);
    let (measured, defaulted): (Vec<_>, Vec<_>) =
        crate::fleet::headroom::predictor_inputs(&n.signals).into_iter().partition(|(_, had)| *had);
    let names = |v: Vec<(&'static str, bool)>| v.into_iter().map(|(name, _)| name).collect::<Vec<_>>();
    let mut out = serde_json::Map::new();
    out.insert("engine".into(), json!(telemetry.as_ref().and_then(|t| t.engine).map(|e| e.name())));
    out.insert("engine_version".into(), json!(telemetry.as_ref().and_then(|t| t.info.version.clone())));
    out.insert("slots".into(), json!(n.signals.max_running));
    let failing = telemetry.as_ref().filter(|t| t.consecutive_failures > 0);
    out.insert("telemetry_error".into(), json!(failing.and_then(|t| t.last_error.clone())));
    out.insert(
        "predictor_inputs".into(),
        json!({"measured": names(measured), "defaulted": names(defaulted)}),
    );
    out
}

/// A backend's declared data terms; an undeclared term is `null`.
fn terms_json(t: &crate::config::DataTerms) -> Value {
    json!({
        "retention_days": t.retention_days,
        "trains_on_data": t.trains_on_data,
        "zero_data_retention": t.zero_data_retention,
        "processing_regions": t.processing_regions,
    })
}

/// `GET /admin/backends`: each backend with its nodes, its data terms, and the tasks whose
/// data class refuses it (`policy_refused`, with the reason).
pub async fn list(State(state): State<Arc<Ops>>, headers: HeaderMap) -> Response {
    reply(authorize(&state, &headers).map(|_| {
        let snap = state.snapshot.load();
        let now = tokio::time::Instant::now();
        let backends: Vec<Value> = snap
            .backends
            .iter()
            .enumerate()
            .map(|(id, b)| {
                let nodes: Vec<Value> = b
                    .nodes
                    .iter()
                    .map(|n| {
                        let load = n.handle.load.view();
                        let age =
                            n.signals.scraped_at.map(|at| now.saturating_duration_since(at).as_secs_f64());
                        let mut node = json!({
                            "node": n.key,
                            "origin": n.origin,
                            "breaker": breaker_str(n.breaker),
                            "breaker_forced": n.handle.breaker.forced(),
                            "held": n.held,
                            "quarantined": n.quarantine,
                            "in_flight": load.in_flight,
                            "running": n.signals.running,
                            "waiting": n.signals.waiting,
                            // The load model's reading of the node (`fleet::load`).
                            "load": {
                                "at_node": load.at_node(n.signals.running, n.signals.waiting),
                                "others": load.others(n.signals.running, n.signals.waiting),
                                "queued": load.queued(n.signals.waiting),
                                "counted_in_reading": load.counted,
                            },
                            "telemetry_age_s": age,
                        });
                        if b.is_local() {
                            node.as_object_mut().expect("an object").extend(engine_of(&state, n));
                        }
                        node
                    })
                    .collect();
                let config = &snap.config.backends[id];
                let refused: Vec<Value> = crate::policy::refusals_of(&snap.config, config)
                    .into_iter()
                    .map(|(task, why)| json!({"task": task, "why": why}))
                    .collect();
                json!({
                    "backend": b.name,
                    "kind": b.kind.as_str(),
                    "engine": config.pool().map(|p| p.engine.as_str()),
                    "model": b.model,
                    "local": b.is_local(),
                    "availability": b.availability,
                    "share": b.is_local().then_some(b.share),
                    "reserve_released": b.reserve_released,
                    "nodes": nodes,
                    "terms": terms_json(&config.terms),
                    "policy_refused": refused,
                })
            })
            .collect();
        let holds: Vec<Value> =
            state.holds.all().into_iter().map(|(s, h)| json!({"scope": s, "hold": h})).collect();
        let operator = state.operator.status();
        let operator = json!({
            "version": operator.version,
            "shared": operator.shared,
            "sync_age_s": operator.sync_age.map(|a| a.as_secs_f64()),
            "notify_up": operator.notify_up,
        });
        json!({
            "backends": backends,
            "holds": holds,
            "canaries": state.canaries.board.last(),
            "operator_state": operator,
        })
    }))
}

/// The body of every admin action: what it applies to, and how.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Target {
    backend: String,
    /// A node key from `GET /admin/backends`; absent: the whole backend.
    #[serde(default)]
    node: Option<String>,
    /// Holds: `drain` (default) or `disable`.
    #[serde(default)]
    kind: Option<String>,
    /// Breakers: `open`, `closed`, or `auto` (back to the breaker's own state machine).
    #[serde(default)]
    state: Option<String>,
}

impl Target {
    /// The node keys this target names in `snap`, or 404 naming what is unknown.
    fn nodes(&self, snap: &Snapshot) -> Result<Vec<NodeKey>, ApiError> {
        let backend = snap.backend_id(&self.backend).map(|i| &snap.backends[i]).ok_or_else(|| {
            ApiError::new(codes::NOT_FOUND, format!("no backend `{}`", self.backend)).param("backend")
        })?;
        let keys = backend.nodes.iter().map(|n| &n.key);
        match &self.node {
            None => Ok(keys.cloned().collect()),
            Some(node) if keys.clone().any(|k| k == node.as_str()) => Ok(vec![NodeKey::from(node.as_str())]),
            Some(node) => Err(ApiError::new(
                codes::NOT_FOUND,
                format!("backend `{}` has no node `{node}` (see GET /admin/backends)", self.backend),
            )
            .param("node")),
        }
    }

    fn scope(&self) -> Scope {
        match &self.node {
            Some(node) => Scope::Node(NodeKey::from(node.as_str())),
            None => Scope::Backend(self.backend.clone()),
        }
    }
}

/// `POST /admin/hold {"backend", "node"?, "kind": "drain"|"disable"}`.
pub async fn hold(State(state): State<Arc<Ops>>, headers: HeaderMap, body: Bytes) -> Response {
    reply(async {
        let who = authorize(&state, &headers)?;
        let req: Target = decode(&body)?;
        let kind = match req.kind.as_deref().unwrap_or("drain") {
            "drain" => HoldKind::Drained,
            "disable" => HoldKind::Disabled,
            other => {
                return Err(ApiError::bad_request(format!("kind `{other}` is not one of drain, disable"))
                    .param("kind"))
            }
        };
        let nodes = req.nodes(&state.snapshot.load())?;
        state.operator.change(vec![Change::Hold(req.scope(), Some(kind))], &who.0).await.map_err(not_stored)?;
        let in_flight: u64 = nodes.iter().map(|n| state.load.view(n).in_flight).sum();
        tracing::warn!(who = %who.0, backend = %req.backend, node = ?req.node, "admin: {}", kind.as_str());
        Ok(json!({"held": req.scope(), "kind": kind, "nodes": nodes, "in_flight": in_flight}))
    }
    .await)
}

/// `POST /admin/release {"backend", "node"?}`: lift a drain or disable.
pub async fn release(State(state): State<Arc<Ops>>, headers: HeaderMap, body: Bytes) -> Response {
    reply(async {
        let who = authorize(&state, &headers)?;
        let target: Target = decode(&body)?;
        target.nodes(&state.snapshot.load())?;
        let released =
            state.operator.change(vec![Change::Hold(target.scope(), None)], &who.0).await.map_err(not_stored)?;
        tracing::warn!(who = %who.0, backend = %target.backend, node = ?target.node, released, "admin: release");
        Ok(json!({"released": released, "scope": target.scope()}))
    }
    .await)
}

/// `POST /admin/breakers {"backend", "node"?, "state": "open"|"closed"|"auto"}`.
pub(crate) async fn force_breaker(
    State(state): State<Arc<Ops>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    reply(async {
        let who = authorize(&state, &headers)?;
        let req: Target = decode(&body)?;
        let Some(wanted) = req.state.as_deref() else {
            return Err(ApiError::bad_request("state is required: open, closed or auto").param("state"));
        };
        let forced = match wanted {
            "open" => Some(Forced::Open),
            "closed" => Some(Forced::Closed),
            "auto" => None,
            other => {
                return Err(ApiError::bad_request(format!(
                    "state `{other}` is not one of open, closed, auto"
                ))
                .param("state"))
            }
        };
        let nodes = req.nodes(&state.snapshot.load())?;
        let changes = nodes.iter().map(|n| Change::Breaker(n.clone(), forced)).collect();
        state.operator.change(changes, &who.0).await.map_err(not_stored)?;
        tracing::warn!(who = %who.0, backend = %req.backend, node = ?req.node, state = wanted, "admin: force breaker");
        Ok(json!({"state": wanted, "nodes": nodes}))
    }
    .await)
}

/// The body of `POST /admin/canary`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CanaryRequest {
    /// Probe only this backend; absent: every fallback backend.
    #[serde(default)]
    backend: Option<String>,
}

/// `POST /admin/canary {"backend"?}`: run the canaries now and return their results.
pub async fn canary(State(state): State<Arc<Ops>>, headers: HeaderMap, body: Bytes) -> Response {
    let who = match authorize(&state, &headers) {
        Ok(who) => who,
        Err(e) => return e.into_response(),
    };
    let req: CanaryRequest = if body.is_empty() {
        CanaryRequest::default()
    } else {
        match decode(&body) {
            Ok(req) => req,
            Err(e) => return e.into_response(),
        }
    };
    let results = state.canaries.round(req.backend.as_deref()).await;
    if let (Some(name), true) = (&req.backend, results.is_empty()) {
        return ApiError::new(
            codes::NOT_FOUND,
            format!("`{name}` is not a fallback backend any task may send data to"),
        )
        .param("backend")
        .into_response();
    }
    tracing::warn!(who = %who.0, backend = ?req.backend, probes = results.len(), "admin: canary");
    Json(json!({"results": results})).into_response()
}
