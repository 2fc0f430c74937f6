//! Admin routes over the evaluation gate: where every gated (task, backend) stands for its
//! fingerprint in effect and why, which pool nodes the gate keeps out, the pins it accepted,
//! and a run started by hand (it answers when the run is done).

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
use crate::gate::requalify::Requalified;
use crate::gate::store::GateResult;

fn result_json(r: &GateResult) -> Value {
    let s = &r.summary;
    json!({
        "fingerprint": r.fingerprint, "node": r.node, "trigger": r.trigger, "finished_ms": r.finished_ms,
        "items": s.items, "passed_items": s.passed_items, "errors": s.errors, "pass_rate": s.pass_rate(),
        "p50_ms": s.p50_ms, "p95_ms": s.p95_ms, "cost_per_item_usd": s.cost_per_item().map(|c| c.to_string()),
        "passed": s.passed, "why": s.why,
    })
}

/// `GET /admin/gate`.
pub async fn status(State(state): State<Arc<Ops>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    let snap = state.snapshot.load();
    let gate = &state.gate;
    let standings: Vec<Value> = gate
        .board
        .standings(&snap.config, &gate.pins)
        .iter()
        .map(|s| {
            json!({
                "task": s.task, "backend": s.backend, "fingerprint": s.fingerprint, "required": s.required,
                "passing": s.passing(), "serving": s.refusal().is_none(), "why_not": s.refusal(),
                "last_run_failed": s.last_run_failed, "result": s.result.as_ref().map(result_json),
            })
        })
        .collect();
    let quarantined: Vec<Value> = snap
        .backends
        .iter()
        .flat_map(|b| b.nodes.iter().map(move |n| (b, n)))
        .filter_map(|(b, n)| {
            n.quarantine.as_ref().map(|why| json!({"backend": b.name, "node": n.key, "why": why}))
        })
        .collect();
    let pins: Value = snap
        .config
        .backends
        .iter()
        .filter_map(|b| Some((b, b.pool()?)))
        .map(|(b, pool)| {
            let pin = gate.pins.in_effect(&b.name, pool.pin.as_ref()).unwrap_or_default();
            (
                b.name.clone(),
                json!({"weights": pin.weights, "quantization": pin.quantization, "engine": pin.engine}),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    Json(json!({"standings": standings, "quarantined": quarantined, "pins_in_effect": pins})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunBody {
    task: String,
    backend: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequalifyBody {
    node: String,
}

/// `POST /admin/gate/requalify` `{"node": KEY}`: run the gate again on a node it kept out
/// (every gated task of its pool, under what the node reports).
pub async fn requalify(State(state): State<Arc<Ops>>, headers: HeaderMap, body: Bytes) -> Response {
    let who = match authorize(&state, &headers) {
        Ok(who) => who,
        Err(e) => return e.into_response(),
    };
    let body: RequalifyBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("request body: {e}")).into_response(),
    };
    let Some(requalifier) = &state.gate.requalifier else {
        return ApiError::new(codes::NOT_FOUND, "the gate needs the ledger store").into_response();
    };
    tracing::warn!(who = %who.0, node = %body.node, "admin: gate re-run on a quarantined node");
    match requalifier.retry(&body.node).await {
        Ok(Requalified::Accepted { fingerprint }) => {
            Json(json!({"node": body.node, "fingerprint": fingerprint, "accepted": true})).into_response()
        }
        Ok(Requalified::Refused { fingerprint, why }) => {
            Json(json!({"node": body.node, "fingerprint": fingerprint, "accepted": false, "why": why}))
                .into_response()
        }
        Ok(Requalified::AlreadyRunning) => {
            ApiError::new(codes::GATE_RUNNING, "a run for this fingerprint is under way").into_response()
        }
        Err(why) => ApiError::bad_request(why.to_string()).param("node").into_response(),
    }
}

/// `POST /admin/gate/run` `{"task": …, "backend": …}`.
pub async fn run(State(state): State<Arc<Ops>>, headers: HeaderMap, body: Bytes) -> Response {
    let who = match authorize(&state, &headers) {
        Ok(who) => who,
        Err(e) => return e.into_response(),
    };
    let body: RunBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("request body: {e}")).into_response(),
    };
    tracing::warn!(who = %who.0, task = %body.task, backend = %body.backend, "admin: gate run started");
    match state.gate.run_now(&body.task, &body.backend).await {
        Ok(result) => {
            tracing::warn!(who = %who.0, task = %body.task, backend = %body.backend, passed = result.summary.passed, "admin: gate run finished");
            Json(json!({"task": result.task, "backend": result.backend, "result": result_json(&result)}))
                .into_response()
        }
        Err(why) => ApiError::new(codes::GATE_RUN_FAILED, why.to_string()).into_response(),
    }
}
