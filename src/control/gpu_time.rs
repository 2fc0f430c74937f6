//! The sampler behind the ledger's GPU-time rows: once a second it looks at every node of every
//! vLLM pool (quarantined ones too: their GPUs are paid for all the same) and says whether it
//! is serving, how many of its slots run a sequence and what its GPUs cost; `ledger::usage`
//! folds the samples into node-minutes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::discovery::DiscoveredNodes;
use crate::canonical::NodeKey;
use crate::fleet::headroom::{self, NodeSignals, PoolLimits};
use crate::fleet::load::LoadView;
use crate::fleet::metrics::AgentSample;
use crate::fleet::telemetry::TelemetryBoard;
use crate::ledger::usage::{MinuteTracker, NodeSample};
use crate::ledger::{unix_millis, LedgerSender};
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;

/// Where the samples come from.
pub struct Sources {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub telemetry: Arc<TelemetryBoard>,
    pub discovered: watch::Receiver<DiscoveredNodes>,
    /// Each sample is counted in `spillway_gpu_samples_total`.
    pub metrics: Arc<Metrics>,
}

/// Whether a node is serving: vLLM runs a sequence, a GPU shows utilisation, or this router
/// has a request on it now or sent one since the last sample.
pub(crate) fn is_busy(
    running: Option<f64>,
    agent: Option<&AgentSample>,
    in_flight: u64,
    sent_since: u64,
) -> bool {
    let gpu_busy =
        agent.is_some_and(|a| a.up && a.gpus.iter().any(|g| g.utilization.is_some_and(|u| u > 0.0)));
    running.is_some_and(|r| r > 0.0) || gpu_busy || in_flight > 0 || sent_since > 0
}

/// Sequences running on a node now, by the load model (`fleet::load`): this router's requests in
/// flight on it, plus the others a fresh reading's running gauge showed beyond this router's
/// own (a node with no fresh gauge counts only what this router has on it, a lower bound). A
/// lagging gauge that still shows requests this router saw finish adds nothing.
pub(crate) fn running_now(sig: &NodeSignals, limits: &PoolLimits, now: Instant, load: LoadView) -> f64 {
    let running = sig.running.filter(|_| headroom::fresh(sig, limits, now));
    load.at_node(running, None)
}

/// One sample of every local node. `last_sent` carries each node's send counter between calls.
fn sample(sources: &Sources, last_sent: &mut HashMap<NodeKey, u64>) -> Vec<NodeSample> {
    let snap = sources.snapshot.load();
    let discovered = sources.discovered.borrow();
    let mut samples = Vec::new();
    let now = Instant::now();
    for (view, config) in snap.backends.iter().zip(&snap.config.backends) {
        let Some(pool) = config.pool() else { continue };
        for node in &view.nodes {
            let annotated = discovered
                .get(view.name.as_str())
                .and_then(|nodes| nodes.iter().find(|n| n.origin == node.origin))
                .and_then(|n| n.metadata.gpu_hourly_usd);
            let load = node.handle.load.view();
            // A node seen for the first time: everything sent to it so far is new.
            let before = last_sent.insert(node.key.clone(), load.sent).unwrap_or(0);
            let agent = sources.telemetry.get(&node.key).and_then(|t| t.agent);
            samples.push(NodeSample {
                backend: view.name.as_str().into(),
                node: node.key.clone(),
                gpu_count: i64::from(pool.gpu_count),
                gpu_hourly_usd: annotated.or(pool.gpu_hourly_usd),
                busy: is_busy(node.signals.running, agent.as_ref(), load.in_flight, load.sent - before),
                running: running_now(&node.signals, &view.limits, now, load),
                // The node's slots as routing counts them: its own limit, else the pool's.
                capacity: headroom::slots(&node.signals, &view.limits),
            });
        }
    }
    samples
}

/// Sample every `period` and hand each finished node-minute to the ledger; on `stop`, sample
/// once more, hand over the minute in progress and return.
pub async fn run(sources: Sources, ledger: LedgerSender, period: Duration, stop: CancellationToken) {
    let mut tracker = MinuteTracker::default();
    let mut last_sent = HashMap::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let now = unix_millis(SystemTime::now());
        let samples = sample(&sources, &mut last_sent);
        for s in &samples {
            sources.metrics.observe_gpu_sample(&s.backend, s.busy);
        }
        for minute in tracker.observe(now, samples) {
            let _ = ledger.send(minute);
        }
    }
    // One last sample, so that requests since the last tick count toward the open minute.
    let last = sample(&sources, &mut last_sent);
    let closed = tracker.observe(unix_millis(SystemTime::now()), last);
    for minute in closed.into_iter().chain(tracker.finish()) {
        let _ = ledger.send(minute);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::metrics::GpuStats;

    fn agent(util: Option<f64>, up: bool) -> AgentSample {
        AgentSample {
            up,
            reason: None,
            gpus: vec![GpuStats {
                index: 0,
                uuid: String::new(),
                utilization: util,
                memory_used_bytes: None,
                memory_total_bytes: None,
                power_watts: None,
                temperature_celsius: None,
            }],
        }
    }

    #[test]
    fn busy_when_any_source_sees_work() {
        assert!(!is_busy(None, None, 0, 0));
        assert!(!is_busy(Some(0.0), Some(&agent(Some(0.0), true)), 0, 0));
        assert!(is_busy(Some(1.0), None, 0, 0));
        assert!(is_busy(Some(0.0), Some(&agent(Some(0.35), true)), 0, 0));
        assert!(!is_busy(None, Some(&agent(Some(0.35), false)), 0, 0), "a down agent says nothing");
        assert!(is_busy(None, None, 1, 0));
        assert!(is_busy(None, None, 0, 1), "a request that came and went between samples");
    }

    #[test]
    fn running_is_this_routers_in_flight_plus_the_others_a_fresh_gauge_shows() {
        let limits = PoolLimits { max_running: 16, reserve: 0.2, stale_after: Duration::from_secs(5) };
        let now = Instant::now();
        let scraped = |ago: u64, running: Option<f64>| NodeSignals {
            scraped_at: now.checked_sub(Duration::from_secs(ago)),
            running,
            ..NodeSignals::default()
        };
        // `counted` of the router's own were in the reading; `in_flight` are on the node now.
        let load = |in_flight: u64, counted: u64| LoadView { in_flight, counted, ..LoadView::default() };
        assert_eq!(running_now(&scraped(1, Some(5.0)), &limits, now, load(2, 2)), 5.0, "3 others and 2 own");
        assert_eq!(
            running_now(&scraped(1, Some(5.0)), &limits, now, load(7, 2)),
            10.0,
            "sent since the scrape"
        );
        assert_eq!(
            running_now(&scraped(1, Some(5.0)), &limits, now, load(0, 5)),
            0.0,
            "all five finished since"
        );
        assert_eq!(
            running_now(&scraped(60, Some(5.0)), &limits, now, load(1, 0)),
            1.0,
            "a stale gauge says nothing"
        );
        assert_eq!(running_now(&scraped(1, None), &limits, now, load(0, 0)), 0.0);
        assert_eq!(running_now(&NodeSignals::default(), &limits, now, load(3, 0)), 3.0, "never scraped");
    }
}
