//! The immutable view of the world that planning reads.
//!
//! Control loops build a new [`Snapshot`] and swap it in whole; the request path only loads
//! the current one. It holds the config, every backend with its nodes (configured endpoints
//! plus discovered pods), each node's breaker state, telemetry signals and quarantine, and
//! each pool's limits with its failover reserve (released while a hosted partner is down).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::adapter::provider::{self, Provider};
use crate::adapter::WireFormat;
use crate::canonical::{BackendName, NodeKey, TaskName};
use crate::config::{BackendId, BackendKind, Config, PoolSpec, Price};
use crate::fleet::headroom::{NodeSignals, PoolLimits};
use crate::guard::node::{NodeBoard, NodeHandle};

pub use crate::guard::breaker::BreakerView;

/// One place a request can be sent: a vLLM node, or a hosted backend's endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// Stable identity across snapshots: `backend/model@base_url`. Telemetry, records and the
    /// boards behind its handle are keyed by it.
    pub key: NodeKey,
    /// Base URL as the adapter wants it (OpenAI-compatible URLs end in `/v1`).
    pub base_url: String,
    /// The node's root address (`http://10.0.0.5:8000`): `/metrics`, `/health`, `/version`.
    pub origin: String,
    pub breaker: BreakerView,
    /// What the node last reported (vLLM pools; default for hosted backends).
    pub signals: NodeSignals,
    /// Why the node is out of every pool (it differs from the pin), if it is.
    pub quarantine: Option<String>,
    /// Why an operator holds it out of every plan (drained or disabled), if one does.
    pub held: Option<String>,
    /// The IP of the machine it runs on when discovery knows it (a pod's `status.hostIP`).
    pub host_ip: Option<String>,
    /// Its breaker, the router's load counters and its slots, as dispatch reaches them.
    pub handle: NodeHandle,
}

/// A backend and its nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendView {
    pub name: String,
    pub kind: BackendKind,
    /// Who is at the other end, resolved once from its kind.
    pub provider: &'static dyn Provider,
    /// The wire its model speaks, as its provider says.
    pub wire: WireFormat,
    pub model: String,
    pub region: Option<String>,
    pub price: Option<Price>,
    /// Ask the upstream for a stream even when the client did not.
    pub stream_upstream: bool,
    /// The nodes serve Anthropic Messages requests themselves (`messages: native`).
    pub serves_messages: bool,
    /// Most requests in flight per node, if limited.
    pub max_inflight_per_node: Option<u32>,
    /// vLLM pools: capacity, the reserve in force now, staleness bound.
    pub limits: PoolLimits,
    /// vLLM pools: the reserve is released because a hosted backend sharing a task is down.
    pub reserve_released: bool,
    /// Hosted backends: down now (every breaker open, its quota used up, or availability below
    /// [`DOWN_BELOW`]), so it cannot take traffic in a pool's place. Always false for a pool.
    pub down: bool,
    /// Hosted backends: PID availability in [0, 1] from recent outcomes (1 until measured).
    pub availability: f64,
    /// Hosted backends: written off for slowness (`route::slowness`): its recent answers came
    /// after their SLO. Always false for a pool.
    pub slow: bool,
    /// Local pools: the share of affinity keys the pool takes first (`route::sticky`); 1 while
    /// it can take them all, and for hosted backends.
    pub share: f64,
    pub nodes: Vec<NodeView>,
}

impl BackendView {
    pub(crate) fn is_local(&self) -> bool {
        self.kind.is_local()
    }

    /// A local pool none of whose nodes (held and down ones included) has a fresh reading.
    pub fn unmeasured(&self, now: tokio::time::Instant) -> bool {
        self.is_local()
            && !self.nodes.iter().any(|n| crate::fleet::headroom::fresh(&n.signals, &self.limits, now))
    }
}

fn trim(u: &str) -> String {
    u.trim_end_matches('/').to_string()
}

/// A hosted backend whose availability is below this counts as down for the reserve.
pub(crate) const DOWN_BELOW: f64 = 0.1;

/// What the control loops know, as lookups the builder calls per backend and node.
pub struct SnapshotInputs<'a> {
    /// Node origins found by discovery, by backend name (added to configured endpoints).
    pub discovered: &'a BTreeMap<BackendName, Vec<String>>,
    pub breaker: &'a dyn Fn(&NodeKey) -> BreakerView,
    /// The handle of a node (its key, its `max_inflight_per_node`).
    pub handle: &'a dyn Fn(&NodeKey, Option<u32>) -> NodeHandle,
    pub signals: &'a dyn Fn(&NodeKey) -> Option<NodeSignals>,
    pub quarantine: &'a dyn Fn(&NodeKey) -> Option<String>,
    /// A hosted backend that cannot take traffic now (its quota is gone).
    pub over_quota: &'a dyn Fn(&str) -> bool,
    /// A hosted backend's PID availability.
    pub availability: &'a dyn Fn(&str) -> f64,
    /// Whether a hosted backend is written off for slowness (`route::slowness`).
    pub slow: &'a dyn Fn(&str) -> bool,
    /// A local pool's sticky-spill share (`route::sticky`).
    pub share: &'a dyn Fn(&str) -> f64,
}

/// Everything planning may read, frozen.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Increases with every published snapshot.
    pub version: u64,
    pub config: Arc<Config>,
    /// In config order; a task refers to them by name.
    pub backends: Vec<BackendView>,
    /// Backend name → its id (index into `backends`).
    by_name: HashMap<BackendName, BackendId>,
    /// Task → backend → why the evaluation gate keeps them apart (filled by the snapshot loop
    /// from the gate's results; empty when no task has a required gate). Read through
    /// [`Snapshot::gate_refusal`], which looks up without allocating.
    pub gate_refusals: BTreeMap<TaskName, BTreeMap<BackendName, String>>,
}

impl Snapshot {
    /// Why the gate keeps `task` off `backend`, if it does.
    pub fn gate_refusal(&self, task: &str, backend: &str) -> Option<&str> {
        self.gate_refusals.get(task)?.get(backend).map(String::as_str)
    }

    /// A first snapshot straight from config: configured nodes only, breakers closed, no
    /// telemetry yet, each node's handle on state of its own (tests, offline commands).
    pub fn from_config(config: Arc<Config>) -> Snapshot {
        Snapshot::first(config, &NodeHandle::detached)
    }

    /// The router's first snapshot, before the snapshot loop's: as [`Snapshot::from_config`],
    /// but each node's handle reaches the router's boards.
    pub fn from_config_on(config: Arc<Config>, nodes: &NodeBoard) -> Snapshot {
        Snapshot::first(config, &|key, limit| nodes.handle(key, limit))
    }

    fn first(config: Arc<Config>, handle: &dyn Fn(&NodeKey, Option<u32>) -> NodeHandle) -> Snapshot {
        let none = BTreeMap::new();
        let inputs = SnapshotInputs {
            discovered: &none,
            breaker: &|_| BreakerView::Closed,
            handle,
            signals: &|_| None,
            quarantine: &|_| None,
            over_quota: &|_| false,
            availability: &|_| 1.0,
            slow: &|_| false,
            share: &|_| 1.0,
        };
        Snapshot::build(config, &inputs, 1)
    }

    /// Build a snapshot from config and what the control loops know.
    pub fn build(config: Arc<Config>, inputs: &SnapshotInputs<'_>, version: u64) -> Snapshot {
        let stale_after = Duration::from_millis(config.telemetry.stale_after_ms);
        // A hosted backend's view carries a pool's default limits (it has no nodes of its own).
        let hosted_limits = PoolSpec::default();
        let mut backends: Vec<BackendView> = config
            .backends
            .iter()
            .map(|b| {
                let provider = provider::of(b.kind());
                let mut origins = provider.nodes(b);
                if b.kind() == BackendKind::Local {
                    for origin in inputs.discovered.get(b.name.as_str()).into_iter().flatten() {
                        let origin = trim(origin);
                        if !origins.iter().any(|(o, _)| *o == origin) {
                            origins.push((origin.clone(), format!("{origin}/v1")));
                        }
                    }
                }
                let nodes = origins
                    .into_iter()
                    .map(|(origin, base_url)| {
                        let key = NodeKey::new(&b.name, &b.model, &base_url);
                        NodeView {
                            breaker: (inputs.breaker)(&key),
                            signals: (inputs.signals)(&key).unwrap_or_default(),
                            quarantine: (inputs.quarantine)(&key),
                            held: None,
                            host_ip: None,
                            handle: (inputs.handle)(&key, b.max_inflight_per_node),
                            key,
                            base_url,
                            origin,
                        }
                    })
                    .collect();
                BackendView {
                    name: b.name.clone(),
                    kind: b.kind(),
                    provider,
                    wire: provider.wire(b),
                    model: b.model.clone(),
                    region: b.region.clone(),
                    price: b.price.clone(),
                    stream_upstream: b.stream_upstream,
                    serves_messages: b.serves_messages(),
                    max_inflight_per_node: b.max_inflight_per_node,
                    limits: {
                        let pool = b.pool().unwrap_or(&hosted_limits);
                        PoolLimits { max_running: pool.max_running, reserve: pool.reserve, stale_after }
                    },
                    reserve_released: false,
                    down: false,
                    availability: if b.kind().is_local() { 1.0 } else { (inputs.availability)(&b.name) },
                    slow: !b.kind().is_local() && (inputs.slow)(&b.name),
                    share: if b.kind().is_local() { (inputs.share)(&b.name).clamp(0.0, 1.0) } else { 1.0 },
                    nodes,
                }
            })
            .collect();
        // A hosted backend is down when every node's breaker is open, its quota is gone, or its
        // PID availability is near zero (a breaker that went half-open sees few probes once the
        // backend's weight is 0, so breakers alone would flap); then each pool that shares a
        // task with it releases its reserve for the traffic coming home.
        for b in backends.iter_mut().filter(|b| !b.is_local()) {
            b.down = (!b.nodes.is_empty() && b.nodes.iter().all(|n| n.breaker == BreakerView::Open))
                || (inputs.over_quota)(&b.name)
                || b.availability < DOWN_BELOW;
        }
        let down: Vec<&str> = backends.iter().filter(|b| b.down).map(|b| b.name.as_str()).collect();
        let released: Vec<String> = config
            .tasks
            .iter()
            .filter(|t| t.backends.iter().any(|n| down.contains(&n.as_str())))
            .flat_map(|t| t.backends.iter().cloned())
            .collect();
        for b in backends.iter_mut().filter(|b| b.is_local() && released.contains(&b.name)) {
            b.reserve_released = true;
            b.limits.reserve = 0.0;
        }
        let by_name = backends
            .iter()
            .enumerate()
            .map(|(i, b)| (BackendName::from(&b.name), BackendId::new(i)))
            .collect();
        Snapshot { version, config, backends, by_name, gate_refusals: BTreeMap::new() }
    }

    /// The local pools with no fresh reading on any node (a pool with no nodes yet included).
    /// The local nodes with no fresh reading, by their root address.
    pub fn unmeasured_nodes(&self, now: tokio::time::Instant) -> Vec<&str> {
        self.backends
            .iter()
            .filter(|b| b.is_local())
            .flat_map(|b| b.nodes.iter().map(move |n| (b, n)))
            .filter(|(b, n)| !crate::fleet::headroom::fresh(&n.signals, &b.limits, now))
            .map(|(_, n)| n.origin.as_str())
            .collect()
    }

    pub fn unmeasured_pools(&self, now: tokio::time::Instant) -> Vec<&str> {
        self.backends.iter().filter(|b| b.unmeasured(now)).map(|b| b.name.as_str()).collect()
    }

    pub(crate) fn backend_id(&self, name: &str) -> Option<BackendId> {
        self.by_name.get(name).copied()
    }
}

impl std::ops::Index<BackendId> for Vec<BackendView> {
    type Output = BackendView;
    fn index(&self, id: BackendId) -> &BackendView {
        &self[id.index()]
    }
}

impl std::ops::IndexMut<BackendId> for Vec<BackendView> {
    fn index_mut(&mut self, id: BackendId) -> &mut BackendView {
        &mut self[id.index()]
    }
}
