//! The one entry point for calls made beside live traffic: canaries, gate items, judges and
//! shadows. Each goes through the same policy, planning, walk, guards and node accounting as a
//! client's request, so a synthetic call is real load: it takes a node slot and a breaker
//! permit, feeds the breaker, honours Retry-After holds, spends the retry budget and the
//! backend's quota at batch priority, and counts in its node's in-flight requests.
//!
//! A call names its [`Destination`]: a backend, planned by [`route::plan_among`] over that one
//! backend at [`Priority::Batch`] (data-class policy, capabilities, headroom and the batch
//! reserve on a pool, open breakers last, the least busy node with headroom first and the seed
//! spreading calls over equally busy ones),
//! or one node (a gate run on a node kept out of traffic; the CLI, which has no telemetry),
//! which skips planning but not the guards. The gate never refuses a synthetic call: a gate
//! run is how a backend earns its result. At most `dispatch.max_synthetic_in_flight` calls run
//! at once; gate items and judges wait for room there and in the quota, canaries and shadows
//! never wait. Records go out with `synthetic: true` under the purpose's client key.

mod answer;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub use self::answer::{Answered, GradedText, SyntheticError};
pub use crate::outcome::Purpose;

use super::Dispatcher;
use crate::canonical::ChatRequest;
use crate::config::{BackendId, Priority, Strategy, TaskConfig};
use crate::fleet::load::LoadView;
use crate::outcome::RequestMeta;
use crate::route::{self, Plan, Reason, RequestFacts, Target};
use crate::snapshot::{NodeView, Snapshot};

/// How long a call that waits (gate items, judges) waits for quota before it gives up.
const QUOTA_WAIT: Duration = Duration::from_secs(60);
/// How often a waiting call looks at the quota again.
const QUOTA_POLL: Duration = Duration::from_millis(500);
/// The most a whole answer may take, first token to last.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// Where a synthetic call goes (indices into `snapshot.backends` and its `nodes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// Planned over this backend's nodes.
    Backend(BackendId),
    /// This node, whatever planning would say of it.
    Node { backend: BackendId, node: usize },
}

/// One call made beside live traffic.
#[derive(Debug, Clone)]
pub struct SyntheticCall<'a> {
    pub purpose: Purpose,
    /// The task whose data it carries: its policy, SLO deadline and prompt variants apply.
    pub task: &'a TaskConfig,
    /// The messages as the caller wrote them (the backend's variant is added on the way).
    pub request: ChatRequest,
    pub to: Destination,
}

/// The bound on synthetic calls in flight, owned by the dispatcher.
pub(super) fn bound(max_in_flight: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(max_in_flight.max(1)))
}

impl Dispatcher {
    /// Make one synthetic call and collect its whole answer.
    pub async fn synthetic(
        &self,
        snap: &Snapshot,
        call: SyntheticCall<'_>,
    ) -> Result<Answered, SyntheticError> {
        let _running = self.synthetic_slot(call.purpose).await?;
        let backend = match call.to {
            Destination::Backend(b) | Destination::Node { backend: b, .. } => b,
        };
        let view = snap.backends.get(backend.index()).ok_or(SyntheticError::NoTarget)?;
        // The judge grades; the task's prompt variants are for answering it.
        let mut task = call.task.clone();
        task.strategy = Strategy::Priority;
        if call.purpose == Purpose::Judge {
            task.variant_texts.clear();
        }
        let mut request = call.request;
        request.model = task.name.clone();
        request.stream = true;
        let give_up = Instant::now() + if call.purpose.waits() { QUOTA_WAIT } else { Duration::ZERO };
        loop {
            let plan = match call.to {
                Destination::Backend(b) => {
                    let load = |node: &NodeView| node.handle.load.view();
                    let seed = rand::random();
                    plan_for(snap, &task, &request, b, &load, Instant::now(), seed)?
                }
                Destination::Node { backend, node } => {
                    view.nodes.get(node).ok_or(SyntheticError::NoTarget)?;
                    refused(snap, &task, backend)?;
                    let target = Target { backend, node, reason: Reason::Preferred { rank: 0 } };
                    Plan { targets: vec![target], spills: Vec::new(), kept: Vec::new() }
                }
            };
            if plan.targets.is_empty() {
                return Err(SyntheticError::no_capacity(snap, &plan, backend));
            }
            if Instant::now() < give_up && !self.quota_room(snap, backend, &request) {
                tokio::time::sleep(QUOTA_POLL).await;
                continue;
            }
            let meta = RequestMeta {
                client_key: Some(call.purpose.as_str().to_string()),
                request_id: format!("{}-{:016x}", call.purpose.as_str(), rand::random::<u64>()),
                priority: Priority::Batch,
                synthetic: true,
                ..RequestMeta::default()
            };
            let started = Instant::now();
            let answer = match self.dispatch(snap, &plan, &task, &request, Priority::Batch, &meta, None).await
            {
                Ok(committed) => answer::collect(committed, started, ANSWER_TIMEOUT).await,
                Err(e) => Err(SyntheticError::from_dispatch(e)),
            };
            match answer {
                Err(SyntheticError::OverQuota(_)) if Instant::now() < give_up => {
                    tokio::time::sleep(QUOTA_POLL).await
                }
                answer => return answer,
            }
        }
    }

    /// A place in the bound: waited for by purposes that wait, else now or [`SyntheticError::Busy`].
    async fn synthetic_slot(&self, purpose: Purpose) -> Result<OwnedSemaphorePermit, SyntheticError> {
        let bound = Arc::clone(&self.synthetic);
        if purpose.waits() {
            bound.acquire_owned().await.map_err(|_| SyntheticError::Busy)
        } else {
            bound.try_acquire_owned().map_err(|_| SyntheticError::Busy)
        }
    }

    /// Whether the backend's quota has room for this request at batch priority, in this
    /// replica's view (dispatch then charges it for real).
    fn quota_room(&self, snap: &Snapshot, backend: BackendId, request: &ChatRequest) -> bool {
        let name = &snap.backends[backend].name;
        let (Some(limits), Some(used)) = (self.quota.limits(name), self.quota.usage(name)) else {
            return true;
        };
        let counter = crate::adapter::provider::counter(&snap.config.backends[backend]);
        let estimate =
            u64::from(counter.count_request(request)) + u64::from(request.max_tokens.unwrap_or(1024));
        limits.scaled(Priority::Batch.quota_ceiling()).admits(used.requests, used.tokens, estimate)
    }
}

/// Why the task's data class may not reach `backend`, as an error.
fn refused(snap: &Snapshot, task: &TaskConfig, backend: BackendId) -> Result<(), SyntheticError> {
    let config = &snap.config.backends[backend];
    match crate::policy::refuses(&snap.config, task, config) {
        None => Ok(()),
        Some(why) => Err(SyntheticError::Refused { backend: config.name.clone(), why }),
    }
}

/// The plan of a synthetic call to `backend` for `task`: the data-class policy, then
/// [`route::plan_among`] over that backend alone at batch priority; among a pool's nodes
/// equally good for the SLO, the least busy first, and `seed` picks among equally busy ones.
pub fn plan_for(
    snap: &Snapshot,
    task: &TaskConfig,
    request: &ChatRequest,
    backend: BackendId,
    load: &dyn Fn(&NodeView) -> LoadView,
    now: Instant,
    seed: u64,
) -> Result<Plan, SyntheticError> {
    if backend.index() >= snap.backends.len() {
        return Err(SyntheticError::NoTarget);
    }
    refused(snap, task, backend)?;
    let facts = RequestFacts::of(task, request, Priority::Batch, seed, load);
    let mut plan = route::plan_among(&facts, snap, vec![backend], now)
        .map_err(|e| SyntheticError::Unfit(e.to_string()))?;
    spread(&mut plan.targets, snap, load, seed);
    Ok(plan)
}

/// Put a pool's nodes in the order synthetic calls want: every node with headroom for the
/// SLO is as good as another for batch work, so the least busy of them first, and `seed`
/// rotates among equally busy ones (a lower predicted TTFT alone would send every call of an
/// idle pool to one node).
fn spread(targets: &mut [Target], snap: &Snapshot, load: &dyn Fn(&NodeView) -> LoadView, seed: u64) {
    let fits = |t: &Target| matches!(t.reason, Reason::Headroom { .. });
    let fitting = targets.iter().take_while(|t| fits(t)).count();
    if fitting == 0 {
        return;
    }
    let busy = |t: &Target| load(&snap.backends[t.backend].nodes[t.node]).in_flight;
    let group = &mut targets[..fitting];
    group.sort_by_key(busy);
    let least = busy(&group[0]);
    let idlest = group.iter().take_while(|t| busy(t) == least).count();
    group[..idlest].rotate_left((seed % idlest as u64) as usize);
}

#[cfg(test)]
#[path = "synthetic/tests.rs"]
mod tests;
