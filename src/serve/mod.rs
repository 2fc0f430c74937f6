//! The request pipeline, between the dialects (`api/`), which decode a wire format and encode
//! the answer back into it, and dispatch, which walks the plan. [`serve`] reads as the flow of
//! one request: the task its `model` names and whether the key may use it; the request's facts
//! (canonical request, priority, affinity); the backends its policy and pinning leave; the
//! plan; the key's limits and budgets; dispatch up to the first token; settlement (the lease
//! prices the answer once, the meter settles the reservation at that price); the shadow tap.
//! Every dialect's traffic is
//! routed, priced, counted and shadowed the same way here, and nothing here knows a wire format.
//!
//! A door may pin a request ([`Pinning`]) to the task's first backend, one that holds state
//! the client leans on: it is then planned over that backend alone, so nothing fails over or
//! spills, and no shadow copies it elsewhere.

pub mod affinity;
mod count;
pub mod error;
mod headers;
mod meter;
pub mod owned;
mod refusal;
mod shadow;
mod spend;
mod wait;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::canonical::{Affinity, ChatRequest, Principal};
use crate::config::{BackendId, Config, Priority, TaskConfig};
use crate::dispatch::{Committed, Dispatcher, Keys};
use crate::fleet::prefix_cache::PrefixKeys;
use crate::guard::budget::{BudgetBoard, BudgetOptions};
use crate::guard::quota::QuotaBoard;
use crate::guard::wait_queue::{Holder, WaitQueues};
use crate::keys::{KeyBoard, StaticKeys};
use crate::outcome::{Record, RequestMeta};
use crate::route::wait::Waits;
use crate::route::{self, Plan, PlanError, RequestFacts};
use crate::snapshot::{NodeView, Snapshot};
use crate::trace::RequestSpan;

pub use crate::dispatch::CostCell;
pub use count::count_tokens;
pub use error::{ApiError, ErrorCode};
pub use headers::{cost_header, AnswerHeaders, Headers, NoHeaders};
use meter::Metering;
use owned::{Owned, OwnersOnly};
pub use refusal::plan_error;

/// What the pipeline needs, shared by every request.
pub struct Serving {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub dispatcher: Arc<Dispatcher>,
    /// The client keys (an issued key's own limits).
    pub client_keys: Arc<KeyBoard>,
    /// Limits and budgets per client key and team, checked before dispatch.
    pub budgets: Arc<BudgetBoard>,
    /// Shadow traffic of the evaluation gate (`None`: off).
    pub shadows: Option<Arc<crate::gate::shadow::Shadows>>,
    /// Each plan's word on the pools that take its project first (`route::sticky`).
    pub share_feedback: Arc<crate::route::sticky::ShareFeedback>,
    /// The queue in front of each local pool, for requests that wait for a slot (`wait`).
    pub queues: Arc<WaitQueues>,
}

impl Serving {
    /// A pipeline with in-process state and no control loops: the snapshot stays the config's
    /// first (configured nodes, not yet measured), hosted quotas, key limits and budgets count
    /// in memory, and no shadows run. Outcome records go to `records`. What a test or a bench
    /// needs to call [`serve`] without HTTP.
    pub fn in_process(config: Arc<Config>, keys: Keys, records: mpsc::UnboundedSender<Record>) -> Serving {
        let quota = QuotaBoard::new(&config, None);
        let client_keys = Arc::new(KeyBoard::new(StaticKeys::new(&HashMap::new())));
        Serving {
            snapshot: Arc::new(ArcSwap::from_pointee(Snapshot::from_config(Arc::clone(&config)))),
            dispatcher: Arc::new(Dispatcher::new(config.dispatch.clone(), &config.tls, keys, records, quota)),
            client_keys,
            budgets: BudgetBoard::new(&config.budgets, BudgetOptions::default()),
            shadows: None,
            share_feedback: Arc::default(),
            queues: WaitQueues::new(),
        }
    }
}

/// What a front door knows of a request before the pipeline takes it.
pub struct Arrival<'a> {
    pub arrived_at: SystemTime,
    pub request_id: String,
    /// Who sent it, when keys are configured.
    pub principal: Option<Principal>,
    pub headers: &'a dyn Headers,
    /// The priority the door set (a batch line's is batch); `None`: the one the headers ask
    /// for (`x-spillway-priority`), else the task's.
    pub priority: Option<Priority>,
    /// Serve only on the task's first backend, if the door says so.
    pub pin: Option<Pinning>,
    /// What it holds that only one provider takes, if the door found any.
    pub owned: Option<OwnersOnly>,
    /// Plan it over the task's fleet pools only (a batch line, which must not spill).
    pub fleet_only: bool,
    /// The request's server span, when tracing is on.
    pub trace: Option<RequestSpan>,
}

/// A request that only the task's first backend may serve, and only when its provider takes
/// what is `owned` (the backend keeps state the request leans on, such as the responses OpenAI
/// stores). When the task's first backend's provider does not, the answer is `refusal`.
pub struct Pinning {
    pub owned: Owned,
    pub refusal: ApiError,
}

/// A request committed to a backend, for the front door to encode.
pub struct Served {
    pub committed: Committed,
    /// The task's name (what the answer says its model is).
    pub task: String,
    /// Unix seconds of arrival.
    pub created: u64,
    /// The values of the answer's `x-spillway-*` headers.
    pub headers: AnswerHeaders,
    /// The answer's cost, once the events have carried its usage (`add_cost_header`).
    pub cost: Arc<CostCell>,
    /// The prompt's tokens as the pipeline estimated them before dispatch.
    pub estimated_prompt_tokens: u32,
}

/// Route and dispatch a decoded request whose `model` is `model`; `to_canonical` turns it
/// into the canonical request once its task is known (the task caps `max_tokens`).
pub async fn serve(
    serving: &Serving,
    arrival: Arrival<'_>,
    model: &str,
    to_canonical: impl FnOnce(&TaskConfig) -> Result<ChatRequest, ApiError>,
) -> Result<Served, ApiError> {
    let Arrival { arrived_at, request_id, principal, headers, priority, pin, owned, fleet_only, trace } =
        arrival;
    let snap = serving.snapshot.load_full();
    // 1. The task, and whether the key may use it.
    let asked_priority = match priority {
        Some(set) => Some(set),
        None => headers::priority(headers)?,
    };
    let task = task_for(&snap, model, principal.as_ref())?;
    let pinned = pin.map(|pin| pinned_backend(&snap, task, pin)).transpose()?;
    if let Some(refusal) = owned.as_ref().and_then(|owned| owned.refusal(&snap, task)) {
        return Err(refusal);
    }
    // 2. The request's facts, and whether a shadow will grade its answer (drawn now: the
    // adapter reads the answer's text only for a reader beside the client).
    let mut canonical = to_canonical(task)?;
    canonical.shadowed = pinned.is_none() && shadow::sampled(serving, task);
    if let Some(span) = &trace {
        span.routed(&canonical.operation, model, &task.name);
    }
    let priority = asked_priority.unwrap_or(task.priority);
    let key_name = principal.as_ref().map(Principal::name);
    let affinity = affinity_of(headers, &canonical, key_name, task, &snap);
    let created = arrived_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // 3. The backends its policy (and a pin) leave, 4. the plan.
    let mut eligible = eligible(&snap, task, pinned)?;
    if fleet_only {
        eligible.retain(|&id| snap.backends[id].is_local());
        if eligible.is_empty() {
            let why = format!(
                "task `{}` has no fleet pool its policy allows, and this request runs on the fleet only",
                task.name
            );
            return Err(ApiError::new(ErrorCode::Shed, why));
        }
    }
    let estimated_prompt_tokens = canonical.estimated_prompt_tokens();
    let asker = wait::Asker {
        priority,
        holder: Holder { session: affinity.map(|a| a.hash), key: key_name },
        prompt_tokens: estimated_prompt_tokens,
        slo_s: task.slo.ttft_ms as f64 / 1000.0 * (1.0 - task.slo.margin),
    };
    let keys = PrefixKeys::of(&canonical, affinity.map(|a| a.hash));
    let replan = |snap: &Snapshot, waits: Option<&Waits<'_>>| {
        let facts = (priority, affinity, created);
        plan(serving, snap, task, (&canonical, &keys), facts, eligible.clone(), waits)
    };
    // 4b. When the plan waits for a local slot: in the pool's queue until one frees in time,
    // or spilled once it cannot (`wait`).
    let wait::Planned { snap, plan, claim, decision } =
        wait::plan(serving, snap.clone(), asker, &replan).await?;
    let queued = decision.as_ref().map(|d| (d.outcome, d.waited));
    // 5. The key's limits and budgets: its worst case reserved, or refused.
    let reservation = spend::reserve(serving, principal.as_ref(), &snap, &plan, &canonical).await?;
    // 6. Dispatch, up to the first token.
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
    let dispatched =
        serving.dispatcher.dispatch(&snap, &plan, task, &canonical, priority, &meta, claim).await;
    if let Some(decision) = decision {
        let ttft = dispatched.as_ref().ok().map(|c| c.ttft + decision.waited);
        serving.dispatcher.record(Record::Queue(decision.settle(&task.name, ttft, &meta.request_id)));
    }
    let mut committed = match dispatched {
        Ok(committed) => committed,
        Err(e) => {
            // No upstream answered: nothing was spent.
            if let Some(r) = reservation {
                r.release().await;
            }
            return Err(refusal::dispatch_error(e));
        }
    };
    let mut answer_headers = headers::spillway_headers(&committed);
    headers::add_queue_headers(&mut answer_headers, queued);
    // What only one provider takes reached another without it: the answer says so.
    if let Some(owned) = &owned {
        owned.add_headers(&snap, &committed.backend, &mut answer_headers);
    }
    // 7. Settlement. The answer passes through three wrappers, inside out, and each sees the
    // stream end after the one inside it: dispatch's lease (prices the answer once when its
    // usage arrives, frees the node slot and breaker permit, corrects the quota charge,
    // records the outcome), the meter (settles the budget reservation at that price), and
    // 8. the shadow tap (copies the request to a shadow backend; not for a pinned request,
    // which leans on its backend's state: a copy elsewhere would answer another question).
    let cost = Arc::clone(&committed.cost);
    let metering = Metering { budgets: serving.budgets.config(), reservation, cost: Arc::clone(&cost) };
    committed.events = meter::meter(committed.events, metering);
    if canonical.shadowed {
        committed = shadow::tap(serving, &snap, task, &canonical, &meta.request_id, committed);
    }
    Ok(Served {
        committed,
        task: task.name.clone(),
        created,
        headers: answer_headers,
        cost,
        estimated_prompt_tokens,
    })
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
    if !key_may_use(principal, task) {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("this key may not use task `{}`", task.name),
        ));
    }
    Ok(task)
}

/// Whether a key may use a task. A static key: when the task has no `allowed_keys` or lists
/// its environment variable. An issued key with tasks: exactly those (naming a task at
/// creation is the operator's grant); with none: the tasks without `allowed_keys`.
pub fn key_may_use(key: Option<&Principal>, task: &TaskConfig) -> bool {
    match (key, &task.allowed_keys) {
        (None, _) => true,
        (Some(Principal::Issued(k)), allowed) if !k.tasks.is_empty() || allowed.is_some() => {
            k.tasks.contains(&task.name)
        }
        (Some(_), None) => true,
        (Some(key), Some(allowed)) => allowed.iter().any(|a| a == key.name()),
    }
}

/// The task's first backend, if its provider takes what the pin's request holds; otherwise the
/// pin's refusal.
fn pinned_backend(snap: &Snapshot, task: &TaskConfig, pin: Pinning) -> Result<BackendId, ApiError> {
    task.backends
        .first()
        .and_then(|name| snap.backend_id(name))
        .filter(|&id| snap.backends[id].provider.takes(pin.owned))
        .ok_or(pin.refusal)
}

/// The affinity key keeps a project, session or conversation on the node that holds its
/// prefix cache; without one, requests spread at random. Logged as its source and hash only.
fn affinity_of(
    headers: &dyn Headers,
    canonical: &ChatRequest,
    key_name: Option<&str>,
    task: &TaskConfig,
    snap: &Snapshot,
) -> Option<Affinity> {
    let affinity = affinity::derive(headers, canonical, key_name, &task.name, &snap.config.affinity);
    match affinity {
        Some(a) => tracing::debug!(affinity_source = a.source.as_str(), affinity_hash = %a.hex(), "affinity"),
        None => tracing::debug!(affinity_source = "none", "affinity"),
    }
    affinity
}

/// The backends the task's policy allows; only the pinned one when the request is pinned.
fn eligible(
    snap: &Snapshot,
    task: &TaskConfig,
    pinned: Option<BackendId>,
) -> Result<Vec<BackendId>, ApiError> {
    let eligible = crate::policy::eligible(task, snap).map_err(|e| plan_error(PlanError::Policy(e)))?;
    match pinned {
        None => Ok(eligible),
        Some(backend) if eligible.contains(&backend) => Ok(vec![backend]),
        Some(backend) => {
            let (task, backend) = (&task.name, &snap.backends[backend].name);
            let why = format!(
                "the request is pinned to `{backend}`, task `{task}`'s first backend, which its policy refuses"
            );
            Err(ApiError::new(ErrorCode::NoEligibleBackend, why))
        }
    }
}

/// The plan over `eligible`, counted for the sticky-spill shares.
fn plan(
    serving: &Serving,
    snap: &Snapshot,
    task: &TaskConfig,
    (canonical, keys): (&ChatRequest, &PrefixKeys),
    (priority, affinity, created): (Priority, Option<Affinity>, u64),
    eligible: Vec<BackendId>,
    waits: Option<&Waits<'_>>,
) -> Result<Plan, ApiError> {
    let load = |node: &NodeView| node.handle.load.view();
    let affinity = affinity.map(|a| a.hash);
    let mut facts = RequestFacts {
        affinity,
        window: route::chain::window_index(created, snap.config.balancing.affinity_window_secs),
        waits,
        ..RequestFacts::of(task, canonical, priority, affinity.unwrap_or_else(rand::random), &load)
    };
    let prompt_tokens = facts.prompt_tokens;
    let cached = |node: &NodeView| node.handle.load.cached(keys, prompt_tokens, node.signals.restarts);
    facts.cached = Some(&cached);
    let plan = route::plan_among(&facts, snap, eligible, Instant::now()).map_err(plan_error)?;
    serving.share_feedback.record(snap, &plan, prompt_tokens);
    Ok(plan)
}
