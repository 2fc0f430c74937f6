//! The router's own view of each node's load: requests in flight, and requests sent since the
//! node's last good scrape. vLLM's gauges lag dispatch by seconds; between scrapes the router
//! credits what it has sent itself, so a burst does not all land on a node that looked idle.
//!
//! Counters are atomics updated by dispatch and read (as plain numbers) before planning, each
//! node's reached through the handle the snapshot holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::canonical::NodeKey;

#[derive(Debug, Default)]
struct Counters {
    in_flight: AtomicU64,
    sent: AtomicU64,
    sent_at_scrape: AtomicU64,
}

/// Every node's counters, by node key: the scrape loop and the admin API reach them here;
/// dispatch and planning through the handle the snapshot holds ([`NodeCounters`]).
#[derive(Debug, Default)]
pub struct NodeLoad {
    nodes: Mutex<HashMap<NodeKey, NodeCounters>>,
}

/// One node's counters, cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct NodeCounters(Arc<Counters>);

/// One node's load as planning sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadView {
    /// Requests the router has in flight on the node now.
    pub in_flight: u64,
    /// Requests sent since the last good scrape: not yet in the node's own gauges.
    pub unseen: u64,
    /// Requests ever sent to the node by this router.
    pub sent: u64,
}

/// Held while a request is in flight on a node; dropping it ends the request.
#[derive(Debug)]
pub struct InFlight(Arc<Counters>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl NodeCounters {
    /// A request is being sent to the node.
    pub fn start(&self) -> InFlight {
        let c = &self.0;
        c.in_flight.fetch_add(1, Ordering::Relaxed);
        c.sent.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(c))
    }

    /// A good scrape of the node landed: what was sent before it is now in its gauges.
    pub fn mark_scraped(&self) {
        let c = &self.0;
        c.sent_at_scrape.store(c.sent.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub fn view(&self) -> LoadView {
        let c = &self.0;
        let sent = c.sent.load(Ordering::Relaxed);
        LoadView {
            in_flight: c.in_flight.load(Ordering::Relaxed),
            unseen: sent.saturating_sub(c.sent_at_scrape.load(Ordering::Relaxed)),
            sent,
        }
    }

    /// Whether both are the same node's counters.
    pub fn same(&self, other: &NodeCounters) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl NodeLoad {
    pub fn new() -> Arc<Self> {
        Arc::new(NodeLoad::default())
    }

    /// The node's counters (zero the first time the node is met).
    pub fn node(&self, key: &NodeKey) -> NodeCounters {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.entry(key.clone()).or_default().clone()
    }

    /// A request is being sent to the node.
    pub fn start(&self, key: &NodeKey) -> InFlight {
        self.node(key).start()
    }

    /// A good scrape of the node landed.
    pub fn mark_scraped(&self, key: &NodeKey) {
        self.node(key).mark_scraped();
    }

    pub fn view(&self, key: &str) -> LoadView {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.get(key).map_or(LoadView::default(), NodeCounters::view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_requests_until_a_scrape_sees_them() {
        let load = NodeLoad::new();
        let n = NodeKey::from("n");
        let a = load.start(&n);
        let b = load.node(&n).start();
        assert_eq!(load.view("n"), LoadView { in_flight: 2, unseen: 2, sent: 2 });
        load.mark_scraped(&n);
        assert_eq!(load.view("n"), LoadView { in_flight: 2, unseen: 0, sent: 2 });
        drop(a);
        let _c = load.start(&n);
        assert_eq!(load.view("n"), LoadView { in_flight: 2, unseen: 1, sent: 3 });
        drop(b);
        assert_eq!(load.view("n").in_flight, 1);
        assert_eq!(load.view("other"), LoadView::default());
        assert!(load.node(&n).same(&load.node(&n)), "one node, one set of counters");
        assert_eq!(load.node(&n).view(), load.view("n"));
    }
}
