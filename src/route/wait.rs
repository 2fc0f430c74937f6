//! Waiting for a local slot, priced: when no node of a pool has headroom for a request, which
//! of its full nodes frees a slot soon enough that the first token still comes within the
//! task's SLO, and when. Such a node becomes a [`Reason::Wait`] target, planned where the pool
//! stands in the chain (before the hosted providers the pool comes before), and the pipeline
//! holds the request in the pool's queue (`serve::wait`) until a slot frees, instead of paying
//! a hosted provider now.
//!
//! For each full node: how many of its busy slots must free before one more request fits
//! (those over its usable slots, the reserve kept, plus one), and when each frees
//! (`fleet::slot_free`, from the router's own requests there and the node's rates). The frees
//! that let a request in, all nodes of the pool together, go to the pool's waiters in order: a
//! request with `ahead` waiters before it starts no sooner than the `ahead`-th of them (each
//! waiter ahead holding the slot it takes as long as a request like this one would), and not
//! before its node frees one. Its first token then comes after its own prefill on that node,
//! as if the node were idle (`fleet::headroom::predict_ttft`). A node is a target when that is
//! within the SLO left (the task's target with its margin, less what the request has already
//! waited). Pure: what the router knows of its own requests comes in through [`Waits`].

use tokio::time::Instant;

use super::{Reason, RequestFacts, Spill, Target};
use crate::config::{BackendId, Priority};
use crate::fleet::headroom::{self, NodeSignals, PoolLimits, SpillReason};
use crate::fleet::load::LoadView;
use crate::fleet::progress::{NodeRunning, Running};
use crate::fleet::slot_free::{self, Rates};
use crate::snapshot::{BreakerView, NodeView, Snapshot};

/// What a request that may wait for a local slot brings to planning.
pub struct Waits<'a> {
    /// The router's own requests in flight on a node, and its usual answer length.
    pub running: &'a dyn Fn(&NodeView) -> NodeRunning,
    /// Requests already waiting for pool `b` that go before this one.
    pub ahead: &'a dyn Fn(BackendId) -> usize,
    /// How long this request has waited already (its SLO counts from its arrival).
    pub waited_s: f64,
}

/// The full nodes of pool `backend` worth waiting for, soonest first token first. `spills`
/// are the plan's spills so far (this pool's nodes among them); `limits` the pool's limits for
/// this request's priority.
pub(super) fn targets(
    facts: &RequestFacts<'_>,
    snap: &Snapshot,
    backend: BackendId,
    limits: &PoolLimits,
    spills: &[Spill],
    slo_s: f64,
    now: Instant,
) -> Vec<Target> {
    let Some(waits) = facts.waits else { return Vec::new() };
    if facts.priority == Priority::Batch {
        return Vec::new();
    }
    let view = &snap.backends[backend];
    let mut full: Vec<usize> = spills
        .iter()
        .filter(|s| s.backend == backend && matches!(s.reason, SpillReason::Queue | SpillReason::Reserve))
        .map(|s| s.node)
        .filter(|&i| waitable(&view.nodes[i]))
        .collect();
    full.sort_unstable();
    full.dedup();
    // Each node's frees that let a request in, soonest first: its free slots now (when the
    // requests ahead hold them), then those of its busy slots past the ones that only make room.
    let mut nodes: Vec<(usize, Vec<f64>)> = Vec::new();
    // How long a request like this one holds a slot once it has one, node by node.
    let mut holds = Vec::new();
    for i in full {
        let node = &view.nodes[i];
        let sig = &node.signals;
        let load: LoadView = (facts.load)(node);
        let (running, typical) = (waits.running)(node);
        let others = load.others(sig.running, sig.waiting).unwrap_or(0.0);
        let rates = Rates::of(sig, load);
        let frees = slot_free::frees_in(&running, others, typical, &rates, now);
        let cached = facts.cached.and_then(|cached| cached(node)).map_or(0, |h| h.tokens);
        let fresh = Running {
            started: now,
            prefill_tokens: facts.prompt_tokens.saturating_sub(cached),
            max_tokens: facts.max_output_tokens,
            streamed: 0,
            first_token: false,
        };
        holds.push(slot_free::remaining_s(&fresh, typical, &rates, now));
        let slots = headroom::slots(sig, limits);
        let usable = (slots - (slots * limits.reserve.max(0.0) + 1e-9).floor()).max(1.0);
        let at_node = load.at_node(sig.running, sig.waiting);
        let free_now = (usable - at_node).floor().max(0.0) as usize;
        let need = (at_node + 1.0 - usable).ceil().max(1.0) as usize;
        let mut open = vec![0.0; free_now];
        open.extend_from_slice(slot_free::usable(&frees, need));
        nodes.push((i, open));
    }
    let mut pool: Vec<f64> = nodes.iter().flat_map(|(_, open)| open.iter().copied()).collect();
    pool.sort_by(f64::total_cmp);
    let ahead = (waits.ahead)(backend);
    let hold_s = holds.iter().sum::<f64>() / holds.len().max(1) as f64;
    let mut found: Vec<(f64, usize, f64)> = nodes
        .iter()
        .filter_map(|(i, open)| {
            let first = *open.first()?;
            let start = slot_free::start_s(&pool, first, ahead, hold_s)?;
            // Its own prefill on that node, once a slot is its: as on the node with nothing else.
            let alone =
                NodeSignals { running: Some(0.0), waiting: Some(0.0), ..view.nodes[*i].signals.clone() };
            let cached = facts.cached.and_then(|cached| cached(&view.nodes[*i])).map(|h| h.tokens);
            let ttft = start
                + headroom::predict_ttft(&alone, LoadView::default(), limits, facts.prompt_tokens, cached);
            (ttft <= slo_s).then_some((ttft, *i, start))
        })
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    found
        .into_iter()
        .map(|(ttft, node, start)| Target {
            backend,
            node,
            reason: Reason::Wait {
                predicted_ttft_ms: (ttft * 1000.0).round() as u32,
                start_ms: (start * 1000.0).round() as u32,
                warm: false,
            },
        })
        .collect()
}

/// A node worth waiting for: measured, not held, down or quarantined.
fn waitable(node: &NodeView) -> bool {
    node.held.is_none()
        && node.quarantine.is_none()
        && node.breaker != BreakerView::Open
        && node.signals.scraped_at.is_some()
}

#[cfg(test)]
#[path = "wait_tests.rs"]
mod tests;
