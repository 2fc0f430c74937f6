//! The pipeline's last step: a sampled share of a task's answers is copied, through a tap on
//! the committed event stream, to the shadow backends the evaluation gate grades (`gate::shadow`).

use std::sync::Arc;

use tokio::time::Instant;

use super::Serving;
use crate::canonical::ChatRequest;
use crate::config::TaskConfig;
use crate::dispatch::Committed;
use crate::gate::shadow;
use crate::snapshot::{NodeView, Snapshot};

/// Whether this request is among the share of the task's answers that shadow traffic copies.
pub(super) fn sampled(serving: &Serving, task: &TaskConfig) -> bool {
    serving.shadows.is_some() && shadow::sampled(task, rand::random())
}

/// `committed`, its events tapped for the shadows of a [`sampled`] request; backends with no
/// room are counted, not sent.
pub(super) fn tap(
    serving: &Serving,
    snap: &Arc<Snapshot>,
    task: &TaskConfig,
    canonical: &ChatRequest,
    request_id: &str,
    mut committed: Committed,
) -> Committed {
    let Some(shadows) = serving.shadows.as_ref() else {
        return committed;
    };
    let load = |node: &NodeView| node.handle.load.view();
    let targets =
        shadow::targets(snap, task, canonical, &committed.backend, &load, Instant::now(), rand::random());
    for &b in &targets.no_room {
        shadows.metrics.observe_shadow(&task.name, &snap.backends[b].name, "no_capacity");
    }
    if targets.send.is_empty() {
        return committed;
    }
    let (events, primary_answer) = shadow::tap(committed.events);
    committed.events = events;
    let job = shadow::Job {
        snap: Arc::clone(snap),
        task: task.clone(),
        // Shadows are graded, never relayed to a client.
        request: ChatRequest { relay: false, shadowed: false, ..canonical.clone() },
        targets: targets.send,
        primary: committed.backend.clone(),
        request_id: request_id.to_string(),
    };
    shadows.spawn(job, primary_answer);
    committed
}
