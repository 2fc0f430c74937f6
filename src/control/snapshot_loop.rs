//! The loop that builds each new snapshot from what the other control loops know: discovered
//! nodes, breaker states, telemetry, quarantines and quota exhaustion. It is the only writer
//! of the snapshot; planning reads whatever it last published.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::time::Instant;

use super::discovery::DiscoveredNodes;
use super::pins::{PinBoard, Reported};
use crate::canonical::{BackendName, NodeKey, TaskName};
use crate::config::Config;
use crate::fleet::telemetry::TelemetryBoard;
use crate::guard::node::NodeBoard;
use crate::route::sticky::{PoolShares, ShareFeedback};
use crate::snapshot::{NodeView, Snapshot, SnapshotInputs};

/// (task, backend) pairs a required evaluation gate keeps apart, and why: the gate's board, as
/// the snapshot reads it.
pub trait GateVerdicts: Send + Sync {
    fn refusals(&self, config: &Config, pins: &PinBoard)
        -> BTreeMap<TaskName, BTreeMap<BackendName, String>>;
}

/// No gate: nothing kept apart.
pub struct NoGate;

impl GateVerdicts for NoGate {
    fn refusals(&self, _: &Config, _: &PinBoard) -> BTreeMap<TaskName, BTreeMap<BackendName, String>> {
        BTreeMap::new()
    }
}

/// Where the snapshot's parts come from.
pub struct Sources {
    /// The config in effect; a reload swaps it and the next rebuild follows.
    pub config: Arc<ArcSwap<Config>>,
    /// Each node's breaker, load counters and slots: views for planning, handles for dispatch.
    pub nodes: Arc<NodeBoard>,
    pub telemetry: Arc<TelemetryBoard>,
    pub discovered: watch::Receiver<DiscoveredNodes>,
    pub pins: Arc<PinBoard>,
    /// Gate results: which backends a task with a required gate may not use yet.
    pub gate: Arc<dyn GateVerdicts>,
    /// Whether a hosted backend's quota is gone for now (no I/O: a local view).
    pub over_quota: Box<dyn Fn(&str) -> bool + Send + Sync>,
    /// Hosted backends' PID availability.
    pub availability: Arc<super::balancing::AvailabilityBoard>,
    /// Drains and disables from the admin API.
    pub holds: Arc<crate::guard::holds::HoldBoard>,
    /// Each pool's sticky-spill share, stepped after a rebuild, at most once a second.
    pub shares: Mutex<PoolShares>,
    /// What the request paths' plans saw of each pool's own projects (for its share).
    pub share_feedback: Arc<ShareFeedback>,
}

/// What a node reports about itself: pod annotations first, else what vLLM exposes (the KV
/// cache dtype stands in for quantisation when it is not `auto`; `/version` for the engine).
fn reported(
    sources: &Sources,
    discovered: &DiscoveredNodes,
    backend: &str,
    origin: &str,
    key: &str,
) -> Reported {
    let meta = discovered.get(backend).and_then(|nodes| nodes.iter().find(|n| n.origin == origin));
    let telemetry = sources.telemetry.get(key);
    let dtype = telemetry
        .as_ref()
        .and_then(|t| t.sample.as_ref())
        .and_then(|s| s.cache.as_ref().and_then(|c| c.cache_dtype.clone()))
        .filter(|d| d != "auto");
    Reported {
        weights: meta.and_then(|m| m.metadata.weights_digest.clone()),
        quantization: meta.and_then(|m| m.metadata.quantization.clone()).or(dtype),
        engine: meta
            .and_then(|m| m.metadata.engine_version.clone())
            .or_else(|| telemetry.and_then(|t| t.info.version)),
    }
}

/// Build the next snapshot.
pub(crate) fn rebuild(sources: &Sources, version: u64, now: Instant) -> Snapshot {
    let discovered = sources.discovered.borrow().clone();
    let origins: BTreeMap<BackendName, Vec<String>> = discovered
        .iter()
        .map(|(b, nodes)| (b.clone(), nodes.iter().map(|n| n.origin.clone()).collect()))
        .collect();
    let breaker = |key: &NodeKey| sources.nodes.breakers.view(key, now);
    let signals = |key: &NodeKey| sources.telemetry.signals(key);
    let handle = |key: &NodeKey, limit: Option<u32>| sources.nodes.handle(key, limit);
    let inputs = SnapshotInputs {
        discovered: &origins,
        breaker: &breaker,
        handle: &handle,
        signals: &signals,
        quarantine: &|_| None,
        over_quota: &*sources.over_quota,
        availability: &|b| sources.availability.effective(b),
        slow: &|b| sources.availability.slow(b),
        share: &|b| sources.shares.lock().unwrap_or_else(|e| e.into_inner()).get(b),
    };
    let config = sources.config.load_full();
    let mut snap = Snapshot::build(Arc::clone(&config), &inputs, version);
    for view in &mut snap.backends {
        let found = discovered.get(view.name.as_str());
        for node in &mut view.nodes {
            node.held = sources.holds.why_held(&view.name, &node.key);
            node.host_ip = found
                .and_then(|nodes| nodes.iter().find(|n| n.origin == node.origin))
                .and_then(|n| n.host_ip.clone());
        }
    }
    for (b, view) in snap.backends.iter_mut().enumerate() {
        let pin = config.backends[b].pool().and_then(|p| p.pin.as_ref());
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
    snap.gate_refusals = sources.gate.refusals(&config, &sources.pins);
    let load = |node: &NodeView| node.handle.load.view();
    sources.shares.lock().unwrap_or_else(|e| e.into_inner()).step(&snap, &load, &sources.share_feedback, now);
    snap
}

/// Rebuild and publish every `period` until stopped.
pub async fn run(current: Arc<ArcSwap<Snapshot>>, sources: Sources, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let version = current.load().version + 1;
        current.store(Arc::new(rebuild(&sources, version, Instant::now())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::discovery::{metadata::NodeMetadata, DiscoveredNode};
    use crate::fleet::load::NodeLoad;
    use crate::guard::breaker::BreakerBoard;
    use crate::snapshot::BreakerView;

    const CONFIG: &str = r#"
backends:
  - name: pool
    kind: vllm
    endpoints: [http://10.0.0.1:8000]
    discovery: {kubernetes: {namespace: llm, selector: app=vllm}}
    model: m
    pin: {weights: "sha256:aaa", quantization: fp8}
  - {name: hosted, kind: openai, model: gpt, quota: {rpm: 10}}
tasks:
  - {name: t, backends: [pool, hosted], slo: {ttft_ms: 800}}
"#;

    fn pod(name: &str, ip: &str, weights: &str) -> DiscoveredNode {
        DiscoveredNode {
            name: name.into(),
            origin: format!("http://{ip}:8000"),
            metadata: NodeMetadata { weights_digest: Some(weights.into()), ..NodeMetadata::default() },
            host_ip: None,
        }
    }

    fn sources(discovered: DiscoveredNodes, over_quota: bool) -> (Sources, watch::Sender<DiscoveredNodes>) {
        let config = Arc::new(crate::config::parse(CONFIG).unwrap());
        let (tx, rx) = watch::channel(discovered);
        let sources = Sources {
            nodes: NodeBoard::new(BreakerBoard::new(config.dispatch.breaker.clone()), NodeLoad::new()),
            telemetry: TelemetryBoard::new(),
            discovered: rx,
            pins: Arc::new(PinBoard::default()),
            gate: Arc::new(NoGate),
            over_quota: Box::new(move |b| over_quota && b == "hosted"),
            availability: super::super::balancing::AvailabilityBoard::new(&config),
            holds: Default::default(),
            shares: Default::default(),
            share_feedback: Default::default(),
            config: Arc::new(ArcSwap::new(config)),
        };
        (sources, tx)
    }

    #[tokio::test(start_paused = true)]
    async fn each_node_keeps_its_handle_across_rebuilds_and_it_reaches_the_shared_boards() {
        let (sources, _tx) = sources(DiscoveredNodes::new(), false);
        let first = rebuild(&sources, 2, Instant::now());
        let node = &first.backends[0].nodes[0];
        let _in_flight = node.handle.load.start(crate::config::Priority::Standard);
        let permit = node.handle.breaker.try_acquire(Instant::now()).unwrap();
        permit.failure(Instant::now());

        let next = rebuild(&sources, 3, Instant::now());
        let same = &next.backends[0].nodes[0];
        assert_eq!(same.key, node.key);
        assert_eq!(same.handle, node.handle, "one node, one handle's state");
        assert_eq!(same.handle.load.view().in_flight, 1, "what dispatch credited is still there");
        assert_eq!(sources.nodes.load.view(&node.key).in_flight, 1, "and the admin API sees it by key");
        sources.nodes.breakers.force(&node.key, Some(crate::guard::breaker::Forced::Open));
        assert!(same.handle.breaker.try_acquire(Instant::now()).is_none(), "a forced breaker applies");
        assert_ne!(next.backends[1].nodes[0].handle, node.handle);
    }

    #[tokio::test(start_paused = true)]
    async fn discovered_pods_join_the_pool_and_a_pod_that_differs_from_the_pin_is_quarantined() {
        let pods =
            [("pool".into(), vec![pod("a", "10.1.0.1", "sha256:aaa"), pod("b", "10.1.0.2", "sha256:bbb")])];
        let (sources, tx) = sources(pods.into_iter().collect(), false);
        let mut events = sources.pins.subscribe();
        let snap = rebuild(&sources, 2, Instant::now());
        let nodes: Vec<(&str, Option<&str>)> =
            snap.backends[0].nodes.iter().map(|n| (n.origin.as_str(), n.quarantine.as_deref())).collect();
        assert_eq!(
            nodes,
            [
                ("http://10.0.0.1:8000", None),
                ("http://10.1.0.1:8000", None),
                ("http://10.1.0.2:8000", Some("weights: pinned sha256:aaa, reported sha256:bbb")),
            ]
        );
        let event = events.try_recv().unwrap();
        assert_eq!(event.node, "pool/m@http://10.1.0.2:8000/v1");
        assert_eq!(event.reported.weights.as_deref(), Some("sha256:bbb"));
        // The pod is replaced by one with the pinned weights: it leaves quarantine; a pod
        // that leaves the cluster leaves the pool.
        tx.send_replace([("pool".into(), vec![pod("b", "10.1.0.2", "sha256:aaa")])].into_iter().collect());
        let snap = rebuild(&sources, 3, Instant::now());
        assert_eq!(snap.backends[0].nodes.len(), 2);
        assert!(snap.backends[0].nodes.iter().all(|n| n.quarantine.is_none()));
        assert!(events.try_recv().unwrap().differences.is_empty());
        assert!(sources.pins.all().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_kv_cache_dtype_stands_in_for_an_unannotated_quantisation() {
        let (sources, _tx) = sources(DiscoveredNodes::new(), false);
        let key = &NodeKey::from("pool/m@http://10.0.0.1:8000/v1");
        let text =
            "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"int8\",num_gpu_blocks=\"100\"} 1\n\
                    vllm:num_requests_running{model_name=\"m\"} 0\n";
        sources.telemetry.on_scrape(
            key,
            crate::canonical::Engine::Vllm,
            crate::fleet::engines::vllm::parse_vllm(text).unwrap(),
            Instant::now(),
        );
        let snap = rebuild(&sources, 2, Instant::now());
        assert_eq!(
            snap.backends[0].nodes[0].quarantine.as_deref(),
            Some("quantization: pinned fp8, reported int8")
        );
        assert_eq!(snap.backends[0].nodes[0].signals.kv_blocks, Some(100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hosted_backend_out_of_quota_releases_the_pools_reserve() {
        let (sources, _tx) = sources(DiscoveredNodes::new(), true);
        let snap = rebuild(&sources, 2, Instant::now());
        assert!(snap.backends[0].reserve_released);
        assert_eq!(snap.backends[0].limits.reserve, 0.0);
        let (sources, _tx) = self::sources(DiscoveredNodes::new(), false);
        let snap = rebuild(&sources, 2, Instant::now());
        assert!(!snap.backends[0].reserve_released);
        assert_eq!(snap.backends[0].limits.reserve, 0.2);
        assert_eq!(snap.backends[1].nodes[0].breaker, BreakerView::Closed);
    }
}
