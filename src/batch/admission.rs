//! How many batch lines a pool may start now: batch work fills what interactive traffic leaves,
//! never the other way round. A node takes batch lines only while what it holds (its own
//! reading and what the router sent since) is below the bar, a share of what it may hold outside
//! its failover reserve, and never more than `max_per_node` of them at once. When interactive
//! demand rises the room is gone and no new line starts; running lines finish. Pure: the live
//! runner and `spillway simulate` read the same snapshot figures through it.

use tokio::time::Instant;

use crate::fleet::headroom;
use crate::fleet::load::LoadView;
use crate::snapshot::{BackendView, BreakerView, NodeView, Snapshot};

/// Lines of tasks with no pool (or spilled to hosted realtime) running at once, per replica.
pub const HOSTED_IN_FLIGHT: u64 = 16;

/// One fresh, usable node of a pool, as the admission rule sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeRoom {
    /// Sequences it runs at once.
    pub slots: f64,
    /// Slots kept free for failover (whole slots).
    pub reserved: f64,
    /// What it holds now: running and waiting, counting the router's own requests sent since.
    pub held: f64,
}

/// The lines a pool may start now: under `bar` (0–1) of each node's room outside its reserve,
/// at most `max_per_node` batch lines per node, less the `in_flight` batch lines already on it.
pub fn room(nodes: &[NodeRoom], bar: f64, max_per_node: u32, in_flight: u64) -> u64 {
    let free: f64 = nodes
        .iter()
        .map(|n| (bar * (n.slots - n.reserved).max(0.0) - n.held).floor().clamp(0.0, f64::from(max_per_node)))
        .sum();
    let cap = u64::from(max_per_node) * nodes.len() as u64;
    (free as u64).min(cap.saturating_sub(in_flight))
}

/// Each fresh, usable node of pool `b` at `now`, `load` being the router's own load on a node.
pub fn pool_rooms(b: &BackendView, now: Instant, load: &dyn Fn(&NodeView) -> LoadView) -> Vec<NodeRoom> {
    b.nodes
        .iter()
        .filter(|n| n.held.is_none() && n.quarantine.is_none() && n.breaker != BreakerView::Open)
        .filter(|n| headroom::fresh(&n.signals, &b.limits, now))
        .map(|n| {
            let slots = headroom::slots(&n.signals, &b.limits);
            let held = load(n).at_node(n.signals.running, n.signals.waiting);
            NodeRoom { slots, reserved: (slots * b.limits.reserve.max(0.0) + 1e-9).floor(), held }
        })
        .collect()
}

/// Seconds a line holds a slot on the fleet, as the nodes' telemetry says, averaged over every
/// pool node (0: no pool).
pub fn line_seconds(snap: &Snapshot) -> f64 {
    let services: Vec<f64> = snap
        .backends
        .iter()
        .filter(|b| b.is_local())
        .flat_map(|b| b.nodes.iter().map(|n| headroom::service_s(&n.signals)))
        .collect();
    if services.is_empty() {
        0.0
    } else {
        services.iter().sum::<f64>() / services.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(held: f64) -> NodeRoom {
        NodeRoom { slots: 10.0, reserved: 2.0, held }
    }

    #[test]
    fn batch_fills_below_the_bar_and_yields_to_interactive_load() {
        // 8 slots outside the reserve, a bar of 0.75: 6 may be held.
        assert_eq!(room(&[node(0.0)], 0.75, 16, 0), 6);
        assert_eq!(room(&[node(4.0)], 0.75, 16, 0), 2, "interactive load takes its share first");
        assert_eq!(room(&[node(6.0)], 0.75, 16, 0), 0, "at the bar nothing starts");
        assert_eq!(room(&[node(9.0)], 0.75, 16, 0), 0, "into the reserve: nothing");
        assert_eq!(room(&[node(0.0), node(0.0)], 0.75, 4, 0), 8, "per node at most max_per_node");
        assert_eq!(room(&[node(0.0), node(0.0)], 0.75, 4, 5), 3, "less what already runs");
        assert_eq!(room(&[], 0.75, 4, 0), 0, "no fresh node, no batch");
    }
}
