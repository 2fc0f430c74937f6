//! The shared core of every dialect's front door. [`receive`] authenticates the client, reads
//! the body and takes an admission permit; the door decodes its wire format; [`serve`] does
//! the rest: the task its `model` names, whether the key may use it, the canonical request (the
//! dialect's decoder, given the task), priority from the headers, affinity from what the
//! client sent ([`super::affinity`]), the plan, the key's limits and budgets
//! ([`super::spend`]: reserve the worst case, or refuse), dispatch up to the first token, the
//! answer's meter (its cost, and the reservation settled when it ends), the `x-spillway-*`
//! headers, and the shadow tap. So every
//! dialect's traffic is routed, priced, counted and shadowed the same way; a front door only
//! decodes its wire format and encodes the committed event stream back into it.
//!
//! A door may pin a request ([`Pinning`]) to the task's first backend, one that holds state
//! the client leans on: it is then planned over that backend alone, so nothing fails over or
//! spills, and no shadow copies it elsewhere.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderValue};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::affinity;
use super::error::{ApiError, ErrorCode};
use super::meter::{self, CostCell, Metering};
use super::request_id::RequestId;
use super::AppState;
use crate::canonical::{ChatRequest, ErrorClass, Principal};
use crate::config::{BackendId, BackendKind, Priority, TaskConfig};
use crate::dispatch::{Committed, DispatchError};
use crate::gate::shadow;
use crate::outcome::{AttemptRecord, RequestMeta, Skip};
use crate::policy;
use crate::route::{self, PlanError, Reason, RequestFacts};
use crate::snapshot::{NodeView, Snapshot};
use crate::trace::RequestSpan;

/// What a front door knows of a request before the core takes it.
pub struct Arrival<'a> {
    pub arrived_at: SystemTime,
    pub request_id: String,
    /// Who sent it, when keys are configured.
    pub principal: Option<Principal>,
    pub headers: &'a HeaderMap,
    /// Serve only on the task's first backend, if the door says so.
    pub pin: Option<Pinning>,
    /// The request's server span, when tracing is on.
    pub trace: Option<RequestSpan>,
}

/// A request that only the task's first backend may serve, and only when it is of `kind`
/// (the backend keeps state the request leans on, such as the responses OpenAI stores).
/// When the task's first backend is of another kind, the answer is `refusal`.
pub struct Pinning {
    pub kind: BackendKind,
    pub refusal: ApiError,
}

/// A request received by a front door: who sent it, its body, and its share of the router's
/// concurrency (held until the answer has been written).
pub struct Received {
    pub arrived_at: SystemTime,
    pub principal: Option<Principal>,
    pub body: Bytes,
    pub admission: OwnedSemaphorePermit,
}

impl Received {
    /// What the core needs to know of the request's arrival.
    pub fn arrival<'a>(
        &self,
        request_id: String,
        trace: Option<RequestSpan>,
        headers: &'a HeaderMap,
    ) -> Arrival<'a> {
        Arrival {
            arrived_at: self.arrived_at,
            request_id,
            principal: self.principal.clone(),
            headers,
            pin: None,
            trace,
        }
    }
}

/// What a front door's route is handed: the shared state, the request's id (set by the
/// request-id layer), its server span (set by the trace layer, when tracing is on) and the
/// request itself, unread.
pub struct Incoming {
    pub state: Arc<AppState>,
    pub request_id: String,
    pub trace: Option<RequestSpan>,
    pub headers: HeaderMap,
    pub body: Body,
}

impl FromRequest<Arc<AppState>> for Incoming {
    type Rejection = Infallible;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Incoming, Infallible> {
        let (parts, body) = request.into_parts();
        let request_id =
            parts.extensions.get::<RequestId>().map_or_else(String::new, |RequestId(id)| id.clone());
        let trace = parts.extensions.get::<RequestSpan>().cloned();
        Ok(Incoming { state: Arc::clone(state), request_id, trace, headers: parts.headers, body })
    }
}

/// Authenticate, read the JSON body, then take an admission permit: only once the body is in,
/// so a slow sender never holds a permit.
pub async fn receive(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Received, ApiError> {
    let arrived_at = SystemTime::now();
    let principal = super::authenticate(state, headers)?;
    let body = super::body::read_json(headers, body, state.max_body_bytes, state.body_read_timeout).await?;
    let Ok(admission) = Arc::clone(&state.limiter).try_acquire_owned() else {
        return Err(ApiError::new(
            ErrorCode::RouterOverloaded,
            "Spillway is at its concurrency limit; retry shortly",
        )
        .retry_after(1));
    };
    Ok(Received { arrived_at, principal, body, admission })
}

/// A request committed to a backend, for the front door to encode.
pub struct Served {
    pub committed: Committed,
    /// The task's name (what the answer says its model is).
    pub task: String,
    /// Unix seconds of arrival.
    pub created: u64,
    /// The `x-spillway-*` headers of the answer.
    pub headers: HeaderMap,
    /// The answer's cost, once the events have carried its usage (`add_cost_header`).
    pub cost: Arc<CostCell>,
}

/// Route and dispatch a decoded request whose `model` is `model`; `to_canonical` turns it
/// into the canonical request once its task is known (the task caps `max_tokens`).
pub async fn serve(
    state: &Arc<AppState>,
    arrival: Arrival<'_>,
    model: &str,
    to_canonical: impl FnOnce(&TaskConfig) -> Result<ChatRequest, ApiError>,
) -> Result<Served, ApiError> {
    let Arrival { arrived_at, request_id, principal, headers, pin, trace } = arrival;
    let priority = header_str(headers, "x-spillway-priority")?
        .map(|p| {
            Priority::parse(p).ok_or_else(|| {
                let all: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
                ApiError::bad_request(format!("x-spillway-priority `{p}` is not one of {}", all.join(", ")))
                    .param("x-spillway-priority")
            })
        })
        .transpose()?;

    let snap = state.snapshot.load_full();
    let task = task_for(&snap, model, principal.as_ref())?;
    // The key's name (an environment variable, or an issued key's id): never the key.
    let key_name = principal.as_ref().map(Principal::name);
    let pinned = pin.map(|pin| pinned_backend(&snap, task, pin)).transpose()?;
    let canonical = to_canonical(task)?;
    if let Some(span) = &trace {
        span.routed(&canonical.operation, model, &task.name);
    }

    let priority = priority.unwrap_or(task.priority);

    // The affinity key keeps a project, session or conversation on the node that holds its
    // prefix cache; without one, requests spread at random. Logged as its source and hash only.
    let affinity = affinity::derive(headers, &canonical, key_name, &task.name, &snap.config.affinity);
    match affinity {
        Some(a) => tracing::debug!(affinity_source = a.source.as_str(), affinity_hash = %a.hex(), "affinity"),
        None => tracing::debug!(affinity_source = "none", "affinity"),
    }
    let affinity_hash = affinity.map(|a| a.hash);
    let created = arrived_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let load = |node: &NodeView| node.handle.load.view();
    let eligible = policy::eligible(task, &snap).map_err(|e| plan_error(PlanError::Policy(e)))?;
    let eligible = match pinned {
        None => eligible,
        Some(backend) if eligible.contains(&backend) => vec![backend],
        Some(backend) => {
            let (task, backend) = (&task.name, &snap.backends[backend].name);
            let why = format!(
                "the request is pinned to `{backend}`, task `{task}`'s first backend, \
                 which its policy refuses"
            );
            return Err(ApiError::new(ErrorCode::NoEligibleBackend, why));
        }
    };
    let plan = route::plan_among(
        &RequestFacts {
            task,
            prompt_tokens: canonical.estimated_prompt_tokens(),
            max_output_tokens: canonical.max_tokens.unwrap_or(1024),
            seed: affinity_hash.unwrap_or_else(rand::random),
            affinity: affinity_hash,
            window: route::chain::window_index(created, snap.config.balancing.affinity_window_secs),
            priority,
            load: &load,
            request: Some(&canonical),
            candidates: None,
        },
        &snap,
        eligible,
        Instant::now(),
    )
    .map_err(plan_error)?;
    state.share_feedback.record(&snap, &plan, canonical.estimated_prompt_tokens());
    let meta = RequestMeta {
        arrived_at,
        affinity,
        client_key: key_name.map(str::to_string),
        principal: principal.clone(),
        priority,
        request_id,
        synthetic: false,
        trace,
    };
    let reservation = super::spend::reserve(state, principal.as_ref(), &snap, &plan, &canonical).await?;
    let started = Instant::now();
    let committed = match state.dispatcher.dispatch(&snap, &plan, task, &canonical, priority, &meta).await {
        Ok(committed) => committed,
        Err(e) => {
            // No upstream answered: nothing was spent.
            if let Some(r) = reservation {
                r.release().await;
            }
            return Err(dispatch_error(e));
        }
    };
    let mut spillway_headers = HeaderMap::new();
    add_spillway_headers(&mut spillway_headers, &committed);
    let mut committed = committed;
    let cost = Arc::new(CostCell::default());
    if let Some(backend) = snap.config.backend(&committed.backend) {
        let metering = Metering {
            backend: backend.clone(),
            budgets: state.budgets.config(),
            reservation,
            cost: Arc::clone(&cost),
            started,
        };
        committed.events = meter::meter(committed.events, metering);
    }
    // A pinned request leans on its backend's state: a copy elsewhere would answer another question.
    let shadows = state.gate.shadows.as_ref().filter(|_| pinned.is_none());
    if let Some(shadows) = shadows.filter(|_| shadow::sampled(task, rand::random())) {
        let load = |node: &NodeView| node.handle.load.view();
        let targets = shadow::targets(
            &snap,
            task,
            &canonical,
            &committed.backend,
            &load,
            Instant::now(),
            rand::random(),
        );
        for &b in &targets.no_room {
            shadows.metrics.observe_shadow(&task.name, &snap.backends[b].name, "no_capacity");
        }
        if !targets.send.is_empty() {
            let (events, primary_answer) = shadow::tap(committed.events);
            committed.events = events;
            let job = shadow::Job {
                snap: Arc::clone(&snap),
                task: task.clone(),
                // Shadows are graded, never relayed to a client.
                request: ChatRequest { relay: false, ..canonical.clone() },
                targets: targets.send,
                primary: committed.backend.clone(),
                request_id: meta.request_id.clone(),
            };
            shadows.spawn(job, primary_answer);
        }
    }
    Ok(Served { committed, task: task.name.clone(), created, headers: spillway_headers, cost })
}

/// The task's first backend, if it is of the pin's kind; otherwise the pin's refusal.
fn pinned_backend(snap: &Snapshot, task: &TaskConfig, pin: Pinning) -> Result<BackendId, ApiError> {
    task.backends
        .first()
        .and_then(|name| snap.backend_id(name))
        .filter(|&id| snap.backends[id].kind == pin.kind)
        .ok_or(pin.refusal)
}

/// The task a request's `model` names (by name or alias), if the key may use it.
pub fn task_for<'s>(
    snap: &'s Snapshot,
    model: &str,
    principal: Option<&Principal>,
) -> Result<&'s TaskConfig, ApiError> {
    let task = snap.config.task(model).ok_or_else(|| {
        ApiError::new(ErrorCode::ModelNotFound, format!("no task named `{model}`")).param("model")
    })?;
    if !super::key_may_use(principal, task) {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("this key may not use task `{}`", task.name),
        ));
    }
    Ok(task)
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str().map_err(|_| ApiError::bad_request(format!("header {name} is not text")).param(name))
        })
        .transpose()
}

fn add_spillway_headers(headers: &mut HeaderMap, c: &Committed) {
    if let Ok(v) = HeaderValue::from_str(&c.backend) {
        headers.insert("x-spillway-backend", v);
    }
    if let Ok(v) = HeaderValue::from_str(&c.model) {
        headers.insert("x-spillway-model", v);
    }
    headers.insert("x-spillway-attempts", HeaderValue::from(c.attempts));
    headers.insert("x-spillway-ttft-ms", HeaderValue::from(c.ttft.as_millis() as u64));
    if let Some(spill) = c.spill {
        headers.insert("x-spillway-spill", HeaderValue::from_static(spill.as_str()));
    }
    if let Some(predicted) = c.predicted_ttft_ms {
        headers.insert("x-spillway-predicted-ttft-ms", HeaderValue::from(predicted));
    }
    // A local node served without telemetry (its pool has no fresh scrape and nothing else
    // could take the request): there was no headroom to predict from.
    if matches!(c.reason, Reason::Unmeasured { .. }) {
        headers.insert("x-spillway-headroom", HeaderValue::from_static("unmeasured"));
    }
}

/// No plan: policy left nothing (503, the operator's business), or nothing eligible can serve
/// this request (400 naming the context limit or the missing capability: the client's).
pub(super) fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::Policy(e) => ApiError::new(ErrorCode::NoEligibleBackend, e.0),
        PlanError::Unfit(unfit) if unfit.is_context_length() => {
            ApiError::new(ErrorCode::ContextLengthExceeded, unfit.to_string()).param("messages")
        }
        PlanError::Unfit(unfit) => {
            let param = unfit.missing().first().map_or("model", |c| c.param());
            ApiError::new(ErrorCode::UnsupportedCapability, unfit.to_string()).param(param)
        }
    }
}

fn dispatch_error(e: DispatchError) -> ApiError {
    match e {
        DispatchError::Rejected { backend, error, .. } => ApiError::from_upstream(&backend, &error),
        DispatchError::Shed { why } => ApiError::new(ErrorCode::Shed, why).retry_after(1),
        DispatchError::Exhausted { attempts } => {
            let detail: Vec<String> = attempts.iter().map(|a| a.describe()).collect();
            let called: Vec<_> = attempts.iter().filter(|a| a.skipped.is_none()).collect();
            let all_rate_limited =
                !called.is_empty() && called.iter().all(|a| a.error_class == Some(ErrorClass::RateLimited));
            let budget = attempts.iter().any(|a| a.skipped == Some(Skip::RetryBudget));
            let message = format!("no backend could serve the request: {}", detail.join("; "));
            let wait = retry_after_secs(&attempts);
            let no_room = called.is_empty()
                && attempts.iter().any(|a| matches!(a.skipped, Some(Skip::NodeFull | Skip::OverQuota)));
            if no_room {
                ApiError::new(ErrorCode::Shed, message).retry_after(wait)
            } else if all_rate_limited {
                ApiError::new(ErrorCode::UpstreamRateLimited, message).retry_after(wait)
            } else {
                let code =
                    if budget { ErrorCode::RetryBudgetExhausted } else { ErrorCode::AllBackendsFailed };
                ApiError::new(code, message).retry_after(wait)
            }
        }
    }
}

/// What the client should wait before trying again: the shortest wait an upstream asked for
/// (`Retry-After`, or what is left of a hold it set), in whole seconds, at least 1; 1 when
/// none asked.
fn retry_after_secs(attempts: &[AttemptRecord]) -> u64 {
    attempts
        .iter()
        .filter_map(|a| a.retry_after)
        .min()
        .map_or(1, |wait| wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
        .max(1)
}
