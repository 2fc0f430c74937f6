//! How the gate calls a backend (a golden item, a judge's score, a shadow copy): only through
//! the dispatcher's synthetic entry point ([`Dispatcher::synthetic`]), so its calls go through
//! the same policy, planning, guards and node accounting as live traffic. The gate itself
//! never touches a breaker, an in-flight count or a quota.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::canonical::ChatRequest;
use crate::config::TaskConfig;
use crate::dispatch::synthetic::{Answered, Destination, Purpose, SyntheticCall, SyntheticError};
use crate::dispatch::Dispatcher;
use crate::snapshot::Snapshot;

/// What the gate calls through.
#[derive(Clone)]
pub struct Calls {
    pub dispatcher: Arc<Dispatcher>,
    /// What planning reads: the router's live snapshot, or (the CLI) one built from the config.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// Whether the snapshot carries telemetry, so a backend's calls can be planned over its
    /// nodes; without it (the CLI) a backend is called at its first node.
    pub planned: bool,
}

impl Calls {
    /// Where a call to `backend` (by name) goes, or `None` when it has no node.
    pub(crate) fn to_backend(&self, snap: &Snapshot, backend: &str) -> Option<Destination> {
        let b = snap.backend_id(backend)?;
        if snap.backends[b].nodes.is_empty() {
            return None;
        }
        Some(match self.planned {
            true => Destination::Backend(b),
            false => Destination::Node { backend: b, node: 0 },
        })
    }

    /// Where a call to one node (by key) of `backend` goes, or `None` when it is gone.
    pub(crate) fn to_node(&self, snap: &Snapshot, backend: &str, node: &str) -> Option<Destination> {
        let b = snap.backend_id(backend)?;
        let n = snap.backends[b].nodes.iter().position(|v| v.key == node)?;
        Some(Destination::Node { backend: b, node: n })
    }

    /// One call, on the snapshot in effect now.
    pub async fn ask(
        &self,
        purpose: Purpose,
        task: &TaskConfig,
        request: ChatRequest,
        to: Destination,
    ) -> Result<Answered, SyntheticError> {
        let snap = self.snapshot.load_full();
        self.dispatcher.synthetic(&snap, SyntheticCall { purpose, task, request, to }).await
    }
}
