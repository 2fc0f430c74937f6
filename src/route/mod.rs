//! Planning: a pure function from (request facts, snapshot, now) to an ordered list of targets.
//!
//! No I/O, no awaits, no clock reads, no hidden randomness (a weighted draw uses the seed in
//! the request facts). The server, the tests and benchmarks all call [`plan`]. Dispatch walks
//! the result; it never reorders it.

pub mod availability;
pub mod blind;
pub mod candidates;
pub mod capability;
pub mod chain;

pub mod sticky;
mod strategy;
pub mod weights;

use std::collections::HashMap;

use tokio::time::Instant;

use crate::canonical::ChatRequest;
use crate::config::{BackendId, Priority, TaskConfig};
use crate::fleet::headroom::{self, PoolLimits, SpillReason};
use crate::fleet::load::LoadView;
use crate::policy::{self, NoEligibleBackend};
use crate::snapshot::{BreakerView, NodeView, Snapshot};

/// What planning needs to know about one request.
pub struct RequestFacts<'a> {
    pub task: &'a TaskConfig,
    /// Estimated prompt size, for cost ordering and TTFT prediction.
    pub prompt_tokens: u32,
    /// Output tokens the request may produce (after the task's cap).
    pub max_output_tokens: u32,
    /// Drives every random choice of this plan: same seed, same plan.
    pub seed: u64,
    /// Hash of the affinity key (`api::affinity`: project, session, body identity, client key
    /// or prompt prefix): its prefix cache lives on one node and, with `strategy: adaptive`, it
    /// keeps one fallback chain per window.
    pub affinity: Option<u64>,
    /// The affinity window this request falls in (`route::chain::window_index` of the wall
    /// clock), so a project's chain is redrawn every window.
    pub window: u64,
    pub priority: Priority,
    /// The router's own load on a node, read while planning (live: `node.handle.load.view()`).
    pub load: &'a dyn Fn(&NodeView) -> LoadView,
    /// The request itself, for the capability and context checks ([`capability::filter`]);
    /// `None` skips them (simulations and benchmarks that model load, not content).
    pub request: Option<&'a ChatRequest>,
}

/// Why a request has no plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Policy allows no backend for the task's data.
    #[error(transparent)]
    Policy(#[from] NoEligibleBackend),
    /// Policy allows some, but none can serve this request (capability, context window).
    #[error(transparent)]
    Unfit(#[from] capability::Unfit),
}

/// Why a target is where it is in the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    /// Position in the task's preference order.
    Preferred { rank: usize },
    /// Drawn by weight.
    Weighted { weight: f64 },
    /// Ordered by estimated cost of this request, in US dollars.
    Cheapest { estimated_usd: f64 },
    /// Drawn into the affinity key's chain with this weight (from live availability).
    Chain { weight: f64 },
    /// A local node with headroom for the SLO; `affinity` when it holds the key's prefix cache.
    Headroom { predicted_ttft_ms: u32, affinity: bool },
    /// A local node without headroom, tried only after everything else (interactive requests).
    LastResort { why: SpillReason },
    /// A node of a pool none of whose nodes has fresh telemetry, served because no other
    /// eligible backend can take the request: `in_flight` of its `capacity` when planned
    /// ([`blind`]).
    Unmeasured { in_flight: u32, capacity: u32 },
    /// Its breaker is open: last resort, after every healthy target.
    BreakerOpen,
}

/// One step of a plan: a node of a backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Index into `snapshot.backends`.
    pub backend: BackendId,
    /// Index into that backend's `nodes`.
    pub node: usize,
    pub reason: Reason,
}

/// A local node that did not take the request, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Spill {
    pub backend: BackendId,
    pub node: usize,
    pub reason: SpillReason,
}

/// The ordered targets for one request, and the local nodes it spilled past.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub targets: Vec<Target>,
    pub spills: Vec<Spill>,
}

impl Plan {
    /// The first reason the request left the fleet, if it did.
    pub fn spill_reason(&self) -> Option<SpillReason> {
        self.spills.iter().map(|s| s.reason).min()
    }
}

/// The node an affinity key prefers: highest rendezvous score of (key, node), so the choice
/// is stable as nodes come and go, and the same on every router replica.
fn affinity_node(nodes: &[NodeView], key: u64) -> Option<usize> {
    nodes
        .iter()
        .enumerate()
        .max_by_key(|(_, n)| xxhash_rust::xxh3::xxh3_64_with_seed(n.key.as_str().as_bytes(), key))
        .map(|(i, _)| i)
}

/// Order the backends a request may use.
pub fn plan(facts: &RequestFacts<'_>, snap: &Snapshot, now: Instant) -> Result<Plan, PlanError> {
    plan_among(facts, snap, policy::eligible(facts.task, snap)?, now)
}

/// [`plan`] over backends the caller has already found eligible (indices into
/// `snap.backends`): a synthetic call names its backend and applies the data-class policy
/// itself, since the gate it may be running for must not hold it back.
///
/// When no eligible backend can take the request (no pool has headroom, every hosted backend
/// is down), a pool none of whose nodes has fresh telemetry is served blind ([`blind`]).
pub fn plan_among(
    facts: &RequestFacts<'_>,
    snap: &Snapshot,
    mut eligible: Vec<BackendId>,
    now: Instant,
) -> Result<Plan, PlanError> {
    if let Some(request) = facts.request {
        eligible = capability::filter(eligible, request, snap)?;
    }
    let slo_s = facts.task.slo.ttft_ms as f64 / 1000.0 * (1.0 - facts.task.slo.margin);
    let mut local: HashMap<BackendId, Vec<Target>> = HashMap::new();
    let mut last_resort: Vec<(f64, Target)> = Vec::new();
    let mut spills = Vec::new();
    // Pools that take this request's project second (`sticky`): planned after the hosted chain.
    let mut second = Vec::new();
    let key = facts.affinity.unwrap_or(facts.seed);
    let hosted_up = eligible.iter().any(|&b| !snap.backends[b].is_local() && !snap.backends[b].down);
    let sticky_cfg = &snap.config.balancing.sticky_spill;
    for &backend in eligible.iter().filter(|&&b| snap.backends[b].is_local()) {
        let member =
            sticky::membership(&snap.backends[backend], sticky_cfg, facts.task.strategy, hosted_up, key);
        let stay = member == Some(true);
        let targets = pool_targets(facts, snap, backend, slo_s, stay, now, &mut spills, &mut last_resort);
        if member == Some(false) {
            if let Some(first) = targets.first() {
                spills.push(Spill { backend, node: first.node, reason: SpillReason::Sticky });
                second.push(backend);
            }
        }
        local.insert(backend, targets);
    }
    let has_headroom = |b: BackendId| local.get(&b).is_some_and(|t| !t.is_empty());
    if !eligible.iter().any(|&b| blind::alternative(snap, b, &has_headroom)) {
        for (&backend, pool) in local.iter_mut() {
            *pool = blind::targets(facts, snap, backend, now);
        }
    }
    let has_headroom = |b: BackendId| local.get(&b).is_some_and(|t| !t.is_empty()) && !second.contains(&b);
    let ordered = strategy::order(facts, snap, &eligible, &has_headroom);
    let mut targets = Vec::new();
    let mut last = Vec::new();
    for (backend, reason) in ordered {
        if let Some(pool) = local.remove(&backend) {
            targets.extend(pool);
            continue;
        }
        let nodes = &snap.backends[backend].nodes;
        let start = if nodes.is_empty() { 0 } else { (facts.seed % nodes.len() as u64) as usize };
        for offset in 0..nodes.len() {
            let node = (start + offset) % nodes.len();
            if nodes[node].held.is_some() {
                continue;
            }
            match nodes[node].breaker {
                BreakerView::Open => last.push(Target { backend, node, reason: Reason::BreakerOpen }),
                _ => targets.push(Target { backend, node, reason }),
            }
        }
    }
    last_resort.sort_by(|a, b| a.0.total_cmp(&b.0));
    targets.extend(last_resort.into_iter().map(|(_, t)| t));
    targets.extend(last);
    Ok(Plan { targets, spills })
}

/// The nodes of one local pool that may take the request, affinity node first while it has
/// headroom, then the soonest predicted first token. The others are recorded as spills, and
/// (for interactive requests) as last resorts. `stay`: the pool takes this project first
/// while it cannot take them all (`sticky`), so the failover reserve is not held against it.
#[allow(clippy::too_many_arguments)]
fn pool_targets(
    facts: &RequestFacts<'_>,
    snap: &Snapshot,
    backend: BackendId,
    slo_s: f64,
    stay: bool,
    now: Instant,
    spills: &mut Vec<Spill>,
    last_resort: &mut Vec<(f64, Target)>,
) -> Vec<Target> {
    let view = &snap.backends[backend];
    let pool = view.limits.reserve;
    let reserve = facts.priority.local_reserve(pool) - if stay { pool } else { 0.0 };
    let limits = PoolLimits { reserve: reserve.max(0.0), ..view.limits };
    let preferred = facts.affinity.and_then(|k| {
        candidates::cached_affinity(snap, backend, k).unwrap_or_else(|| affinity_node(&view.nodes, k))
    });
    let mut admitted: Vec<(bool, f64, usize)> = Vec::new();
    let mut scan = candidates::Scan::new(facts, snap, backend, preferred, slo_s, stay, now);
    while let Some(i) = scan.next(&admitted) {
        let node = &view.nodes[i];
        let load = (facts.load)(node);
        let verdict = if node.held.is_some() {
            Err(SpillReason::Drained)
        } else if node.breaker == BreakerView::Open || node.quarantine.is_some() {
            Err(SpillReason::Down)
        } else {
            headroom::admit(&node.signals, load, &limits, facts.prompt_tokens, slo_s, now)
        };
        match verdict {
            Ok(ttft) => admitted.push((preferred != Some(i), ttft, i)),
            Err(why) => {
                spills.push(Spill { backend, node: i, reason: why });
                if facts.priority == Priority::Interactive && why > SpillReason::Stale {
                    let ttft = headroom::predict_ttft(&node.signals, load, &limits, facts.prompt_tokens);
                    last_resort.push((ttft, Target { backend, node: i, reason: Reason::LastResort { why } }));
                }
            }
        }
    }
    admitted.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    scan.cut(&mut admitted);
    admitted
        .into_iter()
        .map(|(other, ttft, node)| Target {
            backend,
            node,
            reason: Reason::Headroom { predicted_ttft_ms: (ttft * 1000.0).round() as u32, affinity: !other },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::NodeKey;
    use crate::config::Strategy;
    use crate::fleet::headroom::NodeSignals;
    use crate::guard::node::NodeHandle;
    use crate::snapshot::SnapshotInputs;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn config() -> Arc<crate::config::Config> {
        Arc::new(crate::config::parse(include_str!("../../spillway.example.yaml")).unwrap())
    }

    /// Every local node reported just now: idle, or as `tweak` says.
    fn snap_with(
        now: Instant,
        tweak: impl Fn(&str) -> NodeSignals,
        breaker: impl Fn(&NodeKey) -> BreakerView,
    ) -> Snapshot {
        let none = BTreeMap::new();
        let signals = |key: &NodeKey| Some(NodeSignals { scraped_at: Some(now), ..tweak(key) });
        let inputs = SnapshotInputs {
            discovered: &none,
            breaker: &breaker,
            handle: &NodeHandle::detached,
            signals: &signals,
            quarantine: &|_| None,
            over_quota: &|_| false,
            availability: &|_| 1.0,
            share: &|_| 1.0,
        };
        Snapshot::build(config(), &inputs, 2)
    }

    fn idle(_: &str) -> NodeSignals {
        NodeSignals { running: Some(0.0), waiting: Some(0.0), ..NodeSignals::default() }
    }

    fn closed(_: &NodeKey) -> BreakerView {
        BreakerView::Closed
    }

    fn names(snap: &Snapshot, plan: &Plan) -> Vec<String> {
        plan.targets.iter().map(|t| format!("{}#{}", snap.backends[t.backend].name, t.node)).collect()
    }

    fn no_load(_: &NodeView) -> LoadView {
        LoadView::default()
    }

    fn facts(task: &TaskConfig, seed: u64) -> RequestFacts<'_> {
        RequestFacts {
            task,
            prompt_tokens: 1000,
            max_output_tokens: 400,
            seed,
            affinity: None,
            window: 0,
            priority: Priority::Standard,
            load: &no_load,
            request: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn local_nodes_with_headroom_come_first_then_the_hosted_chain() {
        let now = Instant::now();
        let snap = snap_with(now, idle, closed);
        let task = snap.config.task("summarise-ticket").unwrap();
        let p = plan(&facts(task, 0), &snap, now).unwrap();
        assert_eq!(names(&snap, &p), ["local-llama#0", "local-llama#1", "anthropic#0", "openai#0"]);
        assert!(matches!(p.targets[0].reason, Reason::Headroom { affinity: false, .. }));
        assert_eq!(p.targets[2].reason, Reason::Preferred { rank: 1 });
        assert!(p.spills.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn affinity_wins_while_its_node_has_headroom() {
        let now = Instant::now();
        let snap = snap_with(now, idle, closed);
        let task = snap.config.task("summarise-ticket").unwrap();
        let prefers = |node: usize| {
            (0..100u64).find(|k| affinity_node(&snap.backends[0].nodes, *k) == Some(node)).unwrap()
        };
        // Both nodes idle: the key's node goes first.
        let f = RequestFacts { affinity: Some(prefers(1)), ..facts(task, 0) };
        let p = plan(&f, &snap, now).unwrap();
        assert_eq!(names(&snap, &p)[..2], ["local-llama#1", "local-llama#0"]);
        assert_eq!(p.targets[0].reason, Reason::Headroom { predicted_ttft_ms: 120, affinity: true });
        // The router has just sent node 1 so much that it is full: the other node serves.
        let heavy = |node: &NodeView| LoadView {
            unseen: if node.key.as_str().contains("10.0.0.6") { 300 } else { 0 },
            ..LoadView::default()
        };
        let f = RequestFacts { affinity: Some(prefers(1)), load: &heavy, ..facts(task, 0) };
        let p = plan(&f, &snap, now).unwrap();
        assert_eq!(names(&snap, &p)[0], "local-llama#0");
        assert_eq!(
            p.spills,
            vec![Spill { backend: BackendId::new(0), node: 1, reason: SpillReason::Reserve }]
        );
        // The same key maps to the same node in every replica (pure function of key and nodes).
        assert_eq!(affinity_node(&snap.backends[0].nodes, prefers(1)), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn stale_and_full_nodes_spill_with_their_reasons() {
        let now = Instant::now();
        let snap = snap_with(now, idle, closed);
        let task = snap.config.task("summarise-ticket").unwrap();
        let later = now + std::time::Duration::from_secs(6);
        let p = plan(&facts(task, 0), &snap, later).unwrap();
        assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0"]);
        assert_eq!(p.spill_reason(), Some(SpillReason::Stale));
        assert_eq!(p.spills.len(), 2);
        // Full to the reserve (256 × 0.8 = 204.8 → 204 + this one fits, 205 does not).
        let full =
            |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
        let snap = snap_with(now, full, closed);
        let p = plan(&facts(task, 0), &snap, now).unwrap();
        assert_eq!(p.spill_reason(), Some(SpillReason::Reserve));
        assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0"]);
    }

    #[tokio::test(start_paused = true)]
    async fn interactive_requests_keep_full_nodes_as_a_last_resort_and_batch_spills_sooner() {
        let now = Instant::now();
        let full =
            |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
        let snap = snap_with(now, full, closed);
        let task = snap.config.task("summarise-ticket").unwrap();
        let f = RequestFacts { priority: Priority::Interactive, ..facts(task, 0) };
        let p = plan(&f, &snap, now).unwrap();
        assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0", "local-llama#0", "local-llama#1"]);
        assert_eq!(p.targets[2].reason, Reason::LastResort { why: SpillReason::Reserve });
        // Batch may fill a pool only to (1 − 0.2) × 0.8 = 64 %: 164 running is too many.
        let busy =
            |_: &str| NodeSignals { running: Some(164.0), waiting: Some(0.0), ..NodeSignals::default() };
        let snap = snap_with(now, busy, closed);
        let standard = plan(&facts(task, 0), &snap, now).unwrap();
        assert_eq!(names(&snap, &standard)[0], "local-llama#0");
        let batch = plan(&RequestFacts { priority: Priority::Batch, ..facts(task, 0) }, &snap, now).unwrap();
        assert_eq!(names(&snap, &batch), ["anthropic#0", "openai#0"]);
    }

    #[tokio::test(start_paused = true)]
    async fn open_breakers_go_last_and_a_down_hosted_backend_releases_the_reserve() {
        let now = Instant::now();
        let anthropic_open = |key: &NodeKey| {
            if key.starts_with("anthropic/") {
                BreakerView::Open
            } else {
                BreakerView::Closed
            }
        };
        let full =
            |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
        let snap = snap_with(now, full, anthropic_open);
        assert!(snap.backends[0].reserve_released);
        assert_eq!(snap.backends[0].limits.reserve, 0.0);
        let task = snap.config.task("summarise-ticket").unwrap();
        let p = plan(&facts(task, 0), &snap, now).unwrap();
        // The pool now fills to capacity, so the local nodes take the traffic again.
        assert_eq!(names(&snap, &p), ["local-llama#0", "local-llama#1", "openai#0", "anthropic#0"]);
        assert_eq!(p.targets[3].reason, Reason::BreakerOpen);
        // A local node whose breaker is open is down, not tried.
        let local_open = |key: &NodeKey| {
            if key.contains("10.0.0.5") {
                BreakerView::Open
            } else {
                BreakerView::Closed
            }
        };
        let snap = snap_with(now, idle, local_open);
        assert!(!snap.backends[0].reserve_released);
        let p = plan(&facts(task, 0), &snap, now).unwrap();
        assert_eq!(names(&snap, &p), ["local-llama#1", "anthropic#0", "openai#0"]);
        assert_eq!(p.spills, vec![Spill { backend: BackendId::new(0), node: 0, reason: SpillReason::Down }]);
    }

    #[tokio::test(start_paused = true)]
    async fn cost_strategy_puts_the_cheapest_estimate_first() {
        let now = Instant::now();
        let snap = snap_with(now, idle, closed);
        let mut task = snap.config.task("summarise-ticket").unwrap().clone();
        task.strategy = Strategy::Cost;
        task.backends = vec!["openai".into(), "anthropic".into()];
        let p = plan(&facts(&task, 0), &snap, now).unwrap();
        // anthropic: 1000×3 + 400×15 = 9000 µ$; openai: 1000×5 + 400×20 = 13000 µ$.
        assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0"]);
        assert_eq!(p.targets[0].reason, Reason::Cheapest { estimated_usd: 0.009 });
        assert_eq!(p.targets[1].reason, Reason::Cheapest { estimated_usd: 0.013 });
    }

    #[tokio::test(start_paused = true)]
    async fn weighted_draw_follows_weights_and_is_repeatable() {
        let now = Instant::now();
        let snap = snap_with(now, idle, closed);
        let mut task = snap.config.task("summarise-ticket").unwrap().clone();
        task.strategy = Strategy::Weighted;
        task.backends = vec!["openai".into(), "anthropic".into()];
        task.weights = [("openai".to_string(), 3.0), ("anthropic".to_string(), 1.0)].into();
        let mut openai_first = 0;
        for seed in 0..4000 {
            let p = plan(&facts(&task, seed), &snap, now).unwrap();
            assert_eq!(p, plan(&facts(&task, seed), &snap, now).unwrap());
            assert_eq!(p.targets.len(), 2);
            if snap.backends[p.targets[0].backend].name == "openai" {
                openai_first += 1;
            }
        }
        let share = openai_first as f64 / 4000.0;
        assert!((share - 0.75).abs() < 0.03, "openai first in {share}");
    }

    #[tokio::test(start_paused = true)]
    async fn policy_applies_before_ordering_even_when_local_nodes_are_down() {
        let now = Instant::now();
        let local_open = |key: &NodeKey| {
            if key.starts_with("local-llama/") {
                BreakerView::Open
            } else {
                BreakerView::Closed
            }
        };
        let snap = snap_with(now, idle, local_open);
        let task = snap.config.task("triage-restricted").unwrap();
        let f = RequestFacts { priority: Priority::Interactive, ..facts(task, 0) };
        let p = plan(&f, &snap, now).unwrap();
        assert!(p.targets.is_empty(), "nothing hosted, nothing down: {:?}", p.targets);
        assert_eq!(p.spills.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn adaptive_chains_follow_availability_and_stick_to_the_key_within_a_window() {
        let now = Instant::now();
        let none = BTreeMap::new();
        let availability = |b: &str| if b == "anthropic" { 0.3 } else { 1.0 };
        let inputs = SnapshotInputs {
            discovered: &none,
            breaker: &closed,
            handle: &NodeHandle::detached,
            signals: &|_| None, // the pool is stale: no headroom, availability 0
            quarantine: &|_| None,
            over_quota: &|_| false,
            availability: &availability,
            share: &|_| 1.0,
        };
        let snap = Snapshot::build(config(), &inputs, 2);
        let mut task = snap.config.task("summarise-ticket").unwrap().clone();
        task.strategy = Strategy::Adaptive;
        // Preference [local 0, anthropic 0.3, openai 1.0] → weights [0, 0.3, 0.7].
        let mut anthropic_first = 0;
        for key in 0..2000u64 {
            let f = RequestFacts { affinity: Some(key), window: 7, ..facts(&task, key) };
            let p = plan(&f, &snap, now).unwrap();
            let again = plan(&RequestFacts { seed: key + 99, ..f }, &snap, now).unwrap();
            assert_eq!(p.targets, again.targets, "the key, not the request, picks the chain");
            let first = &snap.backends[p.targets[0].backend].name;
            if first == "anthropic" {
                anthropic_first += 1;
                assert_eq!(p.targets[0].reason, Reason::Chain { weight: 0.3 });
            }
        }
        let share = anthropic_first as f64 / 2000.0;
        assert!((share - 0.3).abs() < 0.04, "{share}");
        // With every availability at 1 and headroom, the chain is the preference order.
        let snap = snap_with(now, idle, closed);
        let p = plan(&RequestFacts { affinity: Some(5), ..facts(&task, 5) }, &snap, now).unwrap();
        assert_eq!(names(&snap, &p), ["local-llama#0", "local-llama#1", "anthropic#0", "openai#0"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_pool_takes_a_fixed_share_of_projects_first_and_the_rest_keep_their_hosted_chain() {
        let now = Instant::now();
        let none = BTreeMap::new();
        // Both nodes past the reserve line (205 of 256, the line at 204.8 → 204).
        let busy = |_: &NodeKey| {
            Some(NodeSignals {
                scraped_at: Some(now),
                running: Some(205.0),
                waiting: Some(0.0),
                ..NodeSignals::default()
            })
        };
        let build = |share: f64| {
            let share = move |_: &str| share;
            let inputs = SnapshotInputs {
                discovered: &none,
                breaker: &closed,
                handle: &NodeHandle::detached,
                signals: &busy,
                quarantine: &|_| None,
                over_quota: &|_| false,
                availability: &|_| 1.0,
                share: &share,
            };
            Snapshot::build(config(), &inputs, 2)
        };
        let snap = build(0.5);
        assert_eq!(snap.backends[0].share, 0.5);
        let mut task = snap.config.task("summarise-ticket").unwrap().clone();
        task.strategy = Strategy::Adaptive;
        let (mut inside, mut outside) = (0, 0);
        for key in 0..400u64 {
            let f = RequestFacts { affinity: Some(key), window: 3, ..facts(&task, key) };
            let p = plan(&f, &snap, now).unwrap();
            if sticky::takes_first(key, "local-llama", 0.5) {
                inside += 1;
                // In the share: the fleet first, past the reserve (the node is within its SLO).
                assert!(names(&snap, &p)[..2].iter().all(|n| n.starts_with("local-llama")), "key {key}");
                assert!(p.spills.is_empty(), "{:?}", p.spills);
            } else {
                outside += 1;
                // Outside: the hosted chain first, the pool after it as a fallback (held to the
                // reserve, which these nodes are past: nothing of the pool is left to try).
                assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0"], "key {key}");
                assert_eq!(p.spill_reason(), Some(SpillReason::Reserve));
            }
        }
        assert!(inside > 150 && outside > 150, "{inside} in, {outside} out");
        // Below the reserve line, keys outside the share still go hosted first, with the pool
        // after the hosted chain and the reason `sticky`.
        let idle_snap = {
            let share = |_: &str| 0.5;
            let idle = |_: &NodeKey| Some(NodeSignals { scraped_at: Some(now), ..idle("") });
            let inputs = SnapshotInputs {
                discovered: &none,
                breaker: &closed,
                handle: &NodeHandle::detached,
                signals: &idle,
                quarantine: &|_| None,
                over_quota: &|_| false,
                availability: &|_| 1.0,
                share: &share,
            };
            Snapshot::build(config(), &inputs, 2)
        };
        let key = (0..100u64).find(|&k| !sticky::takes_first(k, "local-llama", 0.5)).unwrap();
        let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &idle_snap, now).unwrap();
        let order = names(&idle_snap, &p);
        assert_eq!(order[0], "anthropic#0");
        assert!(order[1..3].iter().all(|n| n.starts_with("local-llama")), "{order:?}");
        assert_eq!(p.spill_reason(), Some(SpillReason::Sticky));
        // A share of 1 is planning without stickiness: the reserve holds for every key.
        let full = build(1.0);
        let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &full, now).unwrap();
        assert_eq!(names(&full, &p), ["anthropic#0", "openai#0"]);
        // Sticky spill only shapes adaptive tasks.
        task.strategy = Strategy::Priority;
        let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &idle_snap, now).unwrap();
        assert_eq!(names(&idle_snap, &p)[0], "local-llama#0");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hosted_backend_the_pid_has_written_off_releases_the_reserve() {
        let none = BTreeMap::new();
        let build = |anthropic: f64| {
            let availability = move |b: &str| if b == "anthropic" { anthropic } else { 1.0 };
            let inputs = SnapshotInputs {
                discovered: &none,
                breaker: &closed,
                handle: &NodeHandle::detached,
                signals: &|_| None,
                quarantine: &|_| None,
                over_quota: &|_| false,
                availability: &availability,
                share: &|_| 1.0,
            };
            Snapshot::build(config(), &inputs, 2)
        };
        assert!(build(0.05).backends[0].reserve_released, "availability below 0.1: down");
        assert!(!build(0.5).backends[0].reserve_released);
    }
}
