//! The loop that builds each new snapshot from what the other control loops know: discovered
//! nodes, breaker states, telemetry, quarantines and quota exhaustion. It is the only writer
//! of the snapshot; planning reads whatever it last published.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::time::Instant;

use super::breaker::BreakerBoard;
use super::discovery::DiscoveredNodes;
use super::pins::{PinBoard, Reported};
use crate::config::Config;
use crate::fleet::telemetry::TelemetryBoard;
use crate::route::{Snapshot, SnapshotInputs};

/// Where the snapshot's parts come from.
pub struct Sources {
    pub config: Arc<Config>,
    pub breakers: Arc<BreakerBoard>,
    pub telemetry: Arc<TelemetryBoard>,
    pub discovered: watch::Receiver<DiscoveredNodes>,
    pub pins: Arc<PinBoard>,
    /// Whether a hosted backend's quota is gone for now (no I/O: a local view).
    pub over_quota: Box<dyn Fn(&str) -> bool + Send + Sync>,
}

/// What a node reports about itself: pod annotations first, else what vLLM exposes (the KV
/// cache dtype stands in for quantisation when it is not `auto`).
fn reported(
    sources: &Sources,
    discovered: &DiscoveredNodes,
    backend: &str,
    origin: &str,
    key: &str,
) -> Reported {
    let meta = discovered.get(backend).and_then(|nodes| nodes.iter().find(|n| n.origin == origin));
    let dtype = sources
        .telemetry
        .get(key)
        .and_then(|t| t.sample)
        .and_then(|s| s.cache.as_ref().and_then(|c| c.cache_dtype.clone()))
        .filter(|d| d != "auto");
    Reported {
        weights: meta.and_then(|m| m.metadata.weights_digest.clone()),
        quantization: meta.and_then(|m| m.metadata.quantization.clone()).or(dtype),
        engine: meta.and_then(|m| m.metadata.engine_version.clone()),
    }
}

/// Build the next snapshot.
pub fn rebuild(sources: &Sources, version: u64, now: Instant) -> Snapshot {
    let discovered = sources.discovered.borrow().clone();
    let origins: BTreeMap<String, Vec<String>> = discovered
        .iter()
        .map(|(b, nodes)| (b.clone(), nodes.iter().map(|n| n.origin.clone()).collect()))
        .collect();
    let breaker = |key: &str| sources.breakers.view(key, now);
    let signals = |key: &str| sources.telemetry.signals(key);
    let inputs = SnapshotInputs {
        discovered: &origins,
        breaker: &breaker,
        signals: &signals,
        quarantine: &|_| None,
        over_quota: &*sources.over_quota,
    };
    let mut snap = Snapshot::build(Arc::clone(&sources.config), &inputs, version);
    for (b, view) in snap.backends.iter_mut().enumerate() {
        let pin = sources.config.backends[b].pin.as_ref();
        if !view.is_local() || pin.is_none() {
            continue;
        }
        for node in &mut view.nodes {
            let what = reported(sources, &discovered, &view.name, &node.origin, &node.key);
            node.quarantine = sources.pins.check(&view.name, &node.key, pin, &what);
        }
    }
    let live: Vec<&str> = snap.backends.iter().flat_map(|b| b.nodes.iter().map(|n| n.key.as_str())).collect();
    sources.pins.retain(|k| live.contains(&k));
    snap
}

/// Rebuild and publish every `period` until the task is aborted.
pub async fn run(current: Arc<ArcSwap<Snapshot>>, sources: Sources, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let version = current.load().version + 1;
        current.store(Arc::new(rebuild(&sources, version, Instant::now())));
    }
}
