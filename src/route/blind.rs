//! Serving blind: a local pool whose telemetry cannot be read at all (an engine page the router
//! cannot parse, a blocked metrics port, scrapes that keep timing out) is still served when
//! nothing else can take the request, within each node's capacity counted by the router's own
//! in-flight requests. Unknown load is not zero load, so this only ever stands in for a 429:
//! while another eligible backend could take the request, a stale node still means spill.
//!
//! The rule, in full:
//! - a pool is *unmeasured* when none of its nodes (held and down ones included) has a fresh
//!   scrape. A pool with one fresh node is measured and its stale nodes spill as before: the
//!   scrape works for the pool, so what is wrong is the stale node;
//! - a hosted backend is an alternative unless it is down (every breaker open, its quota used
//!   up, or availability below 0.1: the test that releases a pool's reserve); a local pool is
//!   one while a node has headroom for the request;
//! - with no alternative among the eligible backends (after policy and capability filters),
//!   the nodes of each unmeasured pool that are not held, quarantined or breaker-open and have
//!   fewer requests in flight than their capacity (the pool's `max_running`, and
//!   `max_inflight_per_node` when set; no reserve, since nothing else can take the request)
//!   become [`Reason::Unmeasured`] targets: the affinity node first, then the fewest in
//!   flight, ties rotated by the request's seed.
//!
//! Pure, like the rest of planning: it reads the request's facts, the snapshot and `now`. It
//! never ranks an unmeasured node against a measured one.

use tokio::time::Instant;

use super::{affinity_node, Reason, RequestFacts, Target};
use crate::config::BackendId;
use crate::snapshot::{BackendView, BreakerView, Snapshot};

/// Requests one node of the pool may have in flight when it is served blind.
pub fn capacity(view: &BackendView) -> u32 {
    view.limits.max_running.min(view.max_inflight_per_node.unwrap_or(u32::MAX)).max(1)
}

/// Whether `backend` could take the request in an unmeasured pool's place; `has_headroom`
/// says whether a local pool has a node with headroom for it.
pub(crate) fn alternative(
    snap: &Snapshot,
    backend: BackendId,
    has_headroom: &dyn Fn(BackendId) -> bool,
) -> bool {
    let view = &snap.backends[backend];
    if view.is_local() {
        has_headroom(backend)
    } else {
        !view.down
    }
}

/// The nodes of pool `backend` that may take the request blind, in the order to try them;
/// none when the pool is measured.
pub fn targets(facts: &RequestFacts<'_>, snap: &Snapshot, backend: BackendId, now: Instant) -> Vec<Target> {
    let view = &snap.backends[backend];
    if !view.unmeasured(now) {
        return Vec::new();
    }
    let capacity = capacity(view);
    let preferred = facts.affinity.and_then(|k| affinity_node(&view.nodes, k));
    let n = view.nodes.len();
    let start = if n == 0 { 0 } else { (facts.seed % n as u64) as usize };
    let mut open: Vec<(bool, u64, usize, usize)> = view
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| node.held.is_none() && node.quarantine.is_none())
        .filter(|(_, node)| node.breaker != BreakerView::Open)
        .map(|(i, node)| (i, (facts.load)(node).in_flight))
        .filter(|&(_, in_flight)| in_flight < u64::from(capacity))
        .map(|(i, in_flight)| (preferred != Some(i), in_flight, (i + n - start) % n, i))
        .collect();
    open.sort_unstable();
    open.into_iter()
        .map(|(_, in_flight, _, node)| Target {
            backend,
            node,
            reason: Reason::Unmeasured { in_flight: in_flight as u32, capacity },
        })
        .collect()
}

#[cfg(test)]
#[path = "blind_tests.rs"]
mod tests;
