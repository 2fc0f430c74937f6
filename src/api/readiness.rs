//! Ready means measured: a fresh router answers `/readyz` 503 until every local node has a
//! fresh reading, or until `telemetry.startup_wait_ms` has passed since it started, so that
//! Kubernetes sends it no traffic it would spill only because it has not yet seen its fleet.
//! (A node still unread once the router is ready takes requests on the router's own count,
//! up to its capacity: `route`'s unread nodes.) Once ready it stays ready (a pool that goes stale later spills or is served
//! blind as planning decides; a replica that flapped would only move its traffic onto others).
//! The log says once how long startup took and why it ended. Once a shutdown signal has come
//! (`app::rollout`), the router is leaving: `/readyz` answers 503 while it serves on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::snapshot::Snapshot;

/// How often the watcher looks at the snapshot while the router starts.
const LOOK_EVERY: Duration = Duration::from_millis(25);

/// Why startup ended, or `None` while it goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupEnd {
    /// Every local node has a fresh reading.
    Measured,
    /// The wait passed with these nodes (root addresses) still unmeasured.
    WaitOver { unmeasured: Vec<String> },
}

/// Whether startup is over at `now`, for a router started at `began` that waits up to `wait`.
pub fn judge(snap: &Snapshot, began: Instant, wait: Duration, now: Instant) -> Option<StartupEnd> {
    let unmeasured = snap.unmeasured_nodes(now);
    if unmeasured.is_empty() {
        Some(StartupEnd::Measured)
    } else if now.saturating_duration_since(began) >= wait {
        Some(StartupEnd::WaitOver { unmeasured: unmeasured.into_iter().map(str::to_owned).collect() })
    } else {
        None
    }
}

/// Whether the router has started (its fleet measured) and whether it is on its way out (set
/// by the first shutdown signal); read by `/readyz` and by the edge layer that asks HTTP/1
/// clients not to reuse their connections.
#[derive(Debug)]
pub struct Readiness {
    leaving: AtomicBool,
    pub startup: Arc<Startup>,
}

/// Ready at once: no startup wait.
impl Default for Readiness {
    fn default() -> Self {
        Readiness::new(Duration::ZERO)
    }
}

impl Readiness {
    /// A router that waits up to `startup_wait` for its fleet to be measured.
    pub fn new(startup_wait: Duration) -> Readiness {
        Readiness { leaving: AtomicBool::new(false), startup: Arc::new(Startup::new(startup_wait)) }
    }

    /// True once a shutdown signal came: the router still serves but wants no new traffic.
    pub(crate) fn leaving(&self) -> bool {
        self.leaving.load(Ordering::Relaxed)
    }

    /// Report unready from now on.
    pub fn leave(&self) {
        self.leaving.store(true, Ordering::Relaxed);
    }
}

/// A router's startup: when it began, how long it may wait, and whether it is over.
#[derive(Debug)]
pub struct Startup {
    began: Instant,
    wait: Duration,
    over: AtomicBool,
}

impl Startup {
    pub fn new(wait: Duration) -> Startup {
        Startup { began: Instant::now(), wait, over: AtomicBool::new(false) }
    }

    /// Whether startup is over, judged on `snap` at `now` until it is; whoever first finds it
    /// over logs how long it took and why.
    pub fn over(&self, snap: &Snapshot, now: Instant) -> bool {
        if self.over.load(Ordering::Relaxed) {
            return true;
        }
        let Some(end) = judge(snap, self.began, self.wait, now) else { return false };
        if !self.over.swap(true, Ordering::Relaxed) {
            let startup_ms = now.saturating_duration_since(self.began).as_millis() as u64;
            match end {
                StartupEnd::Measured => {
                    tracing::info!(startup_ms, "ready: every local node has a fresh reading")
                }
                StartupEnd::WaitOver { unmeasured } => tracing::warn!(
                    startup_ms,
                    wait_ms = self.wait.as_millis() as u64,
                    nodes = ?unmeasured,
                    "ready after the startup wait with nodes not heard from: each takes requests up to its capacity on the router's own count (a pool with none heard from is served blind only when nothing else can take a request)"
                ),
            }
        }
        true
    }
}

/// Look at the snapshot until startup is over, so that it is logged when it ends even while
/// nothing asks `/readyz`.
pub async fn watch(startup: Arc<Startup>, snapshot: Arc<ArcSwap<Snapshot>>) {
    while !startup.over(&snapshot.load(), Instant::now()) {
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::canonical::NodeKey;
    use crate::fleet::headroom::NodeSignals;
    use crate::guard::node::NodeHandle;
    use crate::snapshot::{BreakerView, SnapshotInputs};

    /// The example config's snapshot, with the nodes `read` says were read at `at`.
    fn snap(at: Instant, read: &dyn Fn(&NodeKey) -> bool) -> Snapshot {
        let config = Arc::new(crate::config::parse(include_str!("../../spillway.example.yaml")).unwrap());
        let none = BTreeMap::new();
        let signals =
            |key: &NodeKey| read(key).then(|| NodeSignals { scraped_at: Some(at), ..NodeSignals::default() });
        let inputs = SnapshotInputs {
            discovered: &none,
            breaker: &|_| BreakerView::Closed,
            handle: &NodeHandle::detached,
            signals: &signals,
            quarantine: &|_| None,
            over_quota: &|_| false,
            availability: &|_| 1.0,
            slow: &|_| false,
            share: &|_| 1.0,
        };
        Snapshot::build(config, &inputs, 1)
    }

    #[tokio::test(start_paused = true)]
    async fn startup_ends_when_every_node_is_measured_or_the_wait_has_passed() {
        let began = Instant::now();
        let wait = Duration::from_secs(5);
        let unread = snap(began, &|_| false);
        let nodes: Vec<String> = unread.unmeasured_nodes(began).into_iter().map(str::to_owned).collect();
        assert!(nodes.len() > pools_len(&unread), "the example's pools have several nodes, none read yet");
        assert_eq!(judge(&unread, began, wait, began + Duration::from_millis(4999)), None);
        assert_eq!(
            judge(&unread, began, wait, began + wait),
            Some(StartupEnd::WaitOver { unmeasured: nodes.clone() })
        );

        // One node of each pool read: still starting, and the others are named when the wait ends.
        let all = snap(began, &|_| true);
        let firsts: Vec<NodeKey> =
            all.backends.iter().filter(|b| b.is_local()).map(|b| b.nodes[0].key.clone()).collect();
        let one_each = snap(began, &|key| firsts.contains(key));
        assert_eq!(judge(&one_each, began, wait, began + Duration::from_millis(10)), None);
        let Some(StartupEnd::WaitOver { unmeasured }) = judge(&one_each, began, wait, began + wait) else {
            panic!("the wait is over")
        };
        assert_eq!(unmeasured.len(), nodes.len() - pools_len(&all));
        assert_eq!(judge(&all, began, wait, began + Duration::from_millis(10)), Some(StartupEnd::Measured));
        // A reading that has gone stale does not count.
        let later = began + Duration::from_secs(60);
        assert_eq!(all.unmeasured_nodes(later).len(), nodes.len());

        // Once over, startup stays over, whatever the fleet shows later.
        let startup = Startup::new(wait);
        assert!(!startup.over(&unread, began));
        assert!(startup.over(&all, began + Duration::from_millis(10)));
        assert!(startup.over(&unread, later));
        assert!(Startup::new(Duration::ZERO).over(&unread, Instant::now()), "no wait: ready at once");
    }

    fn pools_len(snap: &Snapshot) -> usize {
        snap.backends.iter().filter(|b| b.is_local()).count()
    }
}
