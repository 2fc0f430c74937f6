//! The loop that republishes the snapshot when breaker states change, so planning sees open
//! breakers (and half-open ones after their wait) without ever touching the breakers itself.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use super::breaker::BreakerBoard;
use crate::route::Snapshot;

/// Publish a new snapshot whenever a node's breaker view differs from the current one.
/// Returns whether it published.
pub fn refresh(current: &ArcSwap<Snapshot>, board: &BreakerBoard, now: Instant) -> bool {
    let snap = current.load();
    let changed = snap.backends.iter().flat_map(|b| &b.nodes).any(|n| board.view(&n.key, now) != n.breaker);
    if changed {
        current.store(Arc::new(snap.with_breakers(|key| board.view(key, now))));
    }
    changed
}

/// Run [`refresh`] every `period` until the task is aborted.
pub async fn run(current: Arc<ArcSwap<Snapshot>>, board: Arc<BreakerBoard>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        refresh(&current, &board, Instant::now());
    }
}
