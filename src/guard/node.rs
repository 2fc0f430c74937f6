//! A node's request-path state behind one handle: its breaker, the router's load counters on
//! it and its slot semaphore (`max_inflight_per_node`). The snapshot builder attaches each
//! node's handle once per snapshot, so planning and dispatch reach them without a map lookup
//! or a key formatted per request; the boards behind [`NodeBoard`] stay the place where the
//! control loops and the admin API find a node by its key.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::breaker::{BreakerBoard, NodeBreaker};
use crate::canonical::NodeKey;
use crate::fleet::load::{NodeCounters, NodeLoad};

/// What dispatch and planning reach a node's state through.
#[derive(Clone)]
pub struct NodeHandle {
    pub breaker: Arc<NodeBreaker>,
    pub load: NodeCounters,
    /// `None`: the router puts no limit on requests in flight to the node.
    slots: Option<Arc<Semaphore>>,
}

impl NodeHandle {
    /// A handle on state of its own, shared with nothing (a snapshot built from config alone).
    pub(crate) fn detached(_: &NodeKey, max_inflight: Option<u32>) -> NodeHandle {
        NodeHandle {
            breaker: NodeBreaker::new(Default::default()),
            load: NodeCounters::default(),
            slots: max_inflight.map(|n| Arc::new(Semaphore::new(n as usize))),
        }
    }

    /// One of the node's slots, or `Err` when they are all taken; `Ok(None)` when unlimited.
    pub(crate) fn try_slot(&self) -> Result<Option<OwnedSemaphorePermit>, NodeFull> {
        match &self.slots {
            None => Ok(None),
            Some(slots) => Arc::clone(slots).try_acquire_owned().map(Some).map_err(|_| NodeFull),
        }
    }
}

/// Every slot of the node is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeFull;

impl fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeHandle").field("load", &self.load.view()).finish_non_exhaustive()
    }
}

/// Two handles are equal when they reach the same node's state.
impl PartialEq for NodeHandle {
    fn eq(&self, other: &NodeHandle) -> bool {
        Arc::ptr_eq(&self.breaker, &other.breaker) && self.load.same(&other.load)
    }
}

/// Makes each node's handle from the shared boards.
pub struct NodeBoard {
    pub breakers: Arc<BreakerBoard>,
    pub load: Arc<NodeLoad>,
    /// Each limited node's slots and the limit they were made for: a reload that changes the
    /// limit gets new slots (calls holding the old ones finish on them).
    slots: Mutex<HashMap<NodeKey, (u32, Arc<Semaphore>)>>,
}

impl NodeBoard {
    pub fn new(breakers: Arc<BreakerBoard>, load: Arc<NodeLoad>) -> Arc<NodeBoard> {
        Arc::new(NodeBoard { breakers, load, slots: Mutex::new(HashMap::new()) })
    }

    /// The node's handle, with `max_inflight` slots when the router limits it.
    pub fn handle(&self, key: &NodeKey, max_inflight: Option<u32>) -> NodeHandle {
        let slots = max_inflight.map(|limit| {
            let mut map = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            match map.get(key) {
                Some((made_for, slots)) if *made_for == limit => Arc::clone(slots),
                _ => {
                    let slots = Arc::new(Semaphore::new(limit as usize));
                    map.insert(key.clone(), (limit, Arc::clone(&slots)));
                    slots
                }
            }
        });
        NodeHandle { breaker: self.breakers.node(key), load: self.load.node(key), slots }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn a_node_keeps_its_state_across_handles_and_a_new_limit_gets_new_slots() {
        let board = NodeBoard::new(BreakerBoard::new(Default::default()), NodeLoad::new());
        let key = NodeKey::from("pool/m@http://a/v1");
        let first = board.handle(&key, Some(1));
        let _in_flight = first.load.start(crate::config::Priority::Standard);
        let held = first.try_slot().unwrap();
        assert!(held.is_some());

        let again = board.handle(&key, Some(1));
        assert_eq!(first, again, "the same node's state");
        assert_eq!(again.load.view().in_flight, 1, "counted through either handle");
        assert_eq!(again.try_slot().err(), Some(NodeFull), "its one slot is taken");
        board.breakers.force(key.as_str(), Some(crate::guard::breaker::Forced::Open));
        assert!(again.breaker.try_acquire(Instant::now()).is_none(), "the admin API's force applies");

        let wider = board.handle(&key, Some(2));
        assert!(wider.try_slot().unwrap().is_some(), "a reload to two slots takes effect at once");
        assert!(board.handle(&key, None).try_slot().unwrap().is_none(), "unlimited");
        assert_ne!(board.handle(&NodeKey::from("other"), None), first);
    }
}
