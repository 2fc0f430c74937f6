//! The router's own view of each node's load: requests in flight, and requests sent since the
//! node's last good scrape. vLLM's gauges lag dispatch by seconds; between scrapes the router
//! credits what it has sent itself, so a burst does not all land on a node that looked idle.
//!
//! Counters are atomics updated by dispatch and read (as plain numbers) before planning.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Counters {
    in_flight: AtomicU64,
    sent: AtomicU64,
    sent_at_scrape: AtomicU64,
}

/// Every node's counters, by node key.
#[derive(Debug, Default)]
pub struct NodeLoad {
    nodes: Mutex<HashMap<String, Arc<Counters>>>,
}

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

impl NodeLoad {
    pub fn new() -> Arc<Self> {
        Arc::new(NodeLoad::default())
    }

    fn counters(&self, key: &str) -> Arc<Counters> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(nodes.entry(key.to_string()).or_default())
    }

    /// A request is being sent to the node.
    pub fn start(&self, key: &str) -> InFlight {
        let c = self.counters(key);
        c.in_flight.fetch_add(1, Ordering::Relaxed);
        c.sent.fetch_add(1, Ordering::Relaxed);
        InFlight(c)
    }

    /// A good scrape of the node landed: what was sent before it is now in its gauges.
    pub fn mark_scraped(&self, key: &str) {
        let c = self.counters(key);
        c.sent_at_scrape.store(c.sent.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub fn view(&self, key: &str) -> LoadView {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.get(key).map_or(LoadView::default(), |c| {
            let sent = c.sent.load(Ordering::Relaxed);
            LoadView {
                in_flight: c.in_flight.load(Ordering::Relaxed),
                unseen: sent.saturating_sub(c.sent_at_scrape.load(Ordering::Relaxed)),
                sent,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_requests_until_a_scrape_sees_them() {
        let load = NodeLoad::new();
        let a = load.start("n");
        let b = load.start("n");
        assert_eq!(load.view("n"), LoadView { in_flight: 2, unseen: 2, sent: 2 });
        load.mark_scraped("n");
        assert_eq!(load.view("n"), LoadView { in_flight: 2, unseen: 0, sent: 2 });
        drop(a);
        let _c = load.start("n");
        assert_eq!(load.view("n"), LoadView { in_flight: 2, unseen: 1, sent: 3 });
        drop(b);
        assert_eq!(load.view("n").in_flight, 1);
        assert_eq!(load.view("other"), LoadView::default());
    }
}
