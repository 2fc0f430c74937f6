//! Step 4 of the pipeline when the fleet is full: wait for a local slot, or spill. When the
//! plan's first target is a full local node that frees a slot in time for the SLO
//! (`route::wait`), the request joins the pool's queue (`guard::wait_queue`) and plans again
//! each time one of the router's requests on the pool ends, the queue changes, or half the
//! time its prediction leaves has passed. It goes the moment it may take a slot (nobody waits
//! before it and the plan now starts on a node with room: the slot is claimed before it leaves
//! the queue, so the next waiter sees it taken), and spills the moment its first token would no
//! longer come within the SLO, when its wait reaches `queue.max_wait_ms`, or when the router
//! begins to shut down (then each waiter is served, spilled or refused, never dropped). A
//! request whose client goes away is dropped with its future, and its ticket leaves the queue.

use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use tokio::time::Instant;

use super::error::ApiError;
use super::Serving;
use crate::config::{BackendId, Priority};
use crate::fleet::load::InFlight;
use crate::guard::wait_queue::Holder;
use crate::outcome::QueueRecord;
use crate::route::wait::Waits;
use crate::route::{Plan, Reason};
use crate::snapshot::{NodeView, Snapshot};

/// Who is asking, for the queue's order and the SLO.
pub(super) struct Asker<'a> {
    pub priority: Priority,
    pub holder: Holder<'a>,
    pub prompt_tokens: u32,
    /// The task's TTFT target with its margin, seconds.
    pub slo_s: f64,
}

/// How soon after an answer a server may close the connection it came on (see the claim).
const SETTLE: Duration = Duration::from_millis(5);

/// What became of a request that waited.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub pool: String,
    /// `waited` (it took a local slot) or `spilled`.
    pub outcome: &'static str,
    /// Why it spilled (`slo`, `max_wait`, `draining`, `queue_full`, `queue_share`); `slot`
    /// when it waited.
    pub why: &'static str,
    pub waited: Duration,
    /// The first token as predicted when it joined, from its arrival.
    pub predicted_ttft_ms: u32,
}

impl Decision {
    /// The decision's record, once the first token came (`ttft`, from arrival) or did not;
    /// logged as one line.
    pub fn settle(self, task: &str, ttft: Option<Duration>, request_id: &str) -> QueueRecord {
        let ttft_ms = ttft.map(|t| t.as_millis() as u32);
        tracing::info!(
            request_id,
            task,
            pool = %self.pool,
            decision = self.outcome,
            why = self.why,
            waited_ms = self.waited.as_millis() as u64,
            predicted_ttft_ms = self.predicted_ttft_ms,
            ttft_ms,
            "queue decision"
        );
        QueueRecord {
            task: task.to_string(),
            pool: self.pool,
            outcome: self.outcome,
            why: self.why,
            waited: self.waited,
            predicted_ttft_ms: self.predicted_ttft_ms,
            ttft_ms,
        }
    }
}

/// The plan to dispatch, the snapshot it indexes, the local slot claimed for its first target,
/// and what the queue decided, if the request met it.
pub(super) struct Planned {
    pub snap: Arc<Snapshot>,
    pub plan: Plan,
    pub claim: Option<InFlight>,
    pub decision: Option<Decision>,
}

/// Plans the request on a snapshot, given what waiting needs (`None`: it may not wait).
pub(super) type Replan<'r> = dyn Fn(&Snapshot, Option<&Waits<'_>>) -> Result<Plan, ApiError> + Sync + 'r;

/// Plan the request with `replan` (given the snapshot and what waiting needs), waiting in a
/// pool's queue when the plan says so.
pub(super) async fn plan(
    serving: &Serving,
    mut snap: Arc<Snapshot>,
    asker: Asker<'_>,
    replan: &Replan<'_>,
) -> Result<Planned, ApiError> {
    let queues = &serving.queues;
    let cfg = snap.config.queue.clone();
    let arrived = Instant::now();
    let running = |node: &NodeView| node.handle.load.running();
    let plan = {
        let s = &snap;
        let ahead = |b: BackendId| queues.ahead(&s.backends[b].name, asker.priority, asker.holder);
        let waits = Waits { running: &running, ahead: &ahead, waited_s: 0.0 };
        replan(&snap, cfg.enabled.then_some(&waits))?
    };
    let Some((pool, predicted_ttft_ms, warm)) = waits_for(&plan) else {
        return Ok(Planned { snap, plan: plan.without_waits(), claim: None, decision: None });
    };
    let pool_name = snap.backends[pool].name.clone();
    let decision =
        |outcome, why, waited| Decision { pool: pool_name.clone(), outcome, why, waited, predicted_ttft_ms };
    let ticket = match queues.join(&pool_name, asker.priority, asker.holder, asker.prompt_tokens, warm, &cfg)
    {
        Ok(ticket) => ticket,
        Err(refused) => {
            let decision = Some(decision("spilled", refused.as_str(), Duration::ZERO));
            return Ok(Planned { snap, plan: plan.without_waits(), claim: None, decision });
        }
    };
    let mut freed_at = arrived;
    loop {
        // Listen before looking, so that a slot freed while planning is not missed.
        let counters: Vec<_> = snap.backends[pool].nodes.iter().map(|n| n.handle.load.clone()).collect();
        let mut freed: Vec<_> = counters.iter().map(|c| Box::pin(c.freed().notified())).collect();
        freed.iter_mut().for_each(|f| {
            f.as_mut().enable();
        });
        let mut changed = Box::pin(queues.changed().notified());
        changed.as_mut().enable();

        let latest = serving.snapshot.load_full();
        if Arc::ptr_eq(&latest.config, &snap.config) {
            snap = latest;
        }
        let waited = arrived.elapsed();
        let plan = {
            let s = &snap;
            let ahead = |b: BackendId| match s.backends[b].name == ticket.pool() {
                true => ticket.ahead(),
                false => queues.ahead(&s.backends[b].name, asker.priority, asker.holder),
            };
            let waits = Waits { running: &running, ahead: &ahead, waited_s: waited.as_secs_f64() };
            replan(&snap, Some(&waits))?
        };
        let first = plan.targets.first().filter(|t| snap.backends[t.backend].is_local());
        let recheck = match first.map(|t| t.reason) {
            Some(Reason::Headroom { .. } | Reason::Unmeasured { .. }) => {
                let target = first.expect("matched");
                let claim =
                    snap.backends[target.backend].nodes[target.node].handle.load.start(asker.priority);
                drop(ticket);
                // The slot is ours; go a moment after it freed. A server may close its
                // connection right after an answer although it said keep-alive (llama.cpp does
                // after every stream); a request written into that close fails, and a request
                // reaches a node at most once. By then the close has arrived, and the
                // connection pool sees it.
                if let Some(left) = SETTLE.checked_sub(freed_at.elapsed()) {
                    tokio::time::sleep(left).await;
                }
                let decision = Some(decision("waited", "slot", waited));
                return Ok(Planned { snap, plan: plan.without_waits(), claim: Some(claim), decision });
            }
            Some(Reason::Wait { predicted_ttft_ms, warm, .. })
                if !queues.draining() && waited < cfg.max_wait() =>
            {
                ticket.set_warm(warm);
                let slack = asker.slo_s - waited.as_secs_f64() - f64::from(predicted_ttft_ms) / 1000.0;
                Duration::from_secs_f64((slack / 2.0).clamp(0.01, 1.0)).min(cfg.max_wait() - waited)
            }
            _ => {
                drop(ticket);
                let why = if queues.draining() {
                    "draining"
                } else if waited >= cfg.max_wait() {
                    "max_wait"
                } else {
                    "slo"
                };
                let decision = Some(decision("spilled", why, waited));
                return Ok(Planned { snap, plan: plan.without_waits(), claim: None, decision });
            }
        };
        let any_freed = async {
            match freed.is_empty() {
                true => std::future::pending().await,
                false => drop(select_all(freed).await),
            }
        };
        tokio::select! {
            _ = changed => {}
            _ = any_freed => {}
            _ = tokio::time::sleep(recheck) => {}
        }
        freed_at = Instant::now();
    }
}

/// The pool, the predicted first token and whether it waits for a warm node, when the plan's
/// first target is a wait.
fn waits_for(plan: &Plan) -> Option<(BackendId, u32, bool)> {
    match plan.targets.first()?.reason {
        Reason::Wait { predicted_ttft_ms, warm, .. } => {
            Some((plan.targets[0].backend, predicted_ttft_ms, warm))
        }
        _ => None,
    }
}
