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

mod share_feedback;
pub mod slowness;
pub mod sticky;
mod strategy;
pub mod wait;
pub mod weights;

use std::collections::HashMap;

use tokio::time::Instant;

use crate::canonical::ChatRequest;
use crate::config::{BackendId, Priority, TaskConfig};
use crate::fleet::headroom::{self, PoolLimits, SpillReason};
use crate::fleet::load::LoadView;
use crate::fleet::prefix_cache::Held;
use crate::policy::{self, NoEligibleBackend};
use crate::snapshot::{BackendView, BreakerView, NodeView, Snapshot};

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
    /// The snapshot's index of its large pools, which bounds the nodes judged per request
    /// (the simulator builds one per snapshot); `None`: every node is judged (the server).
    pub candidates: Option<&'a candidates::Candidates>,
    /// What the router knows of its own requests on full nodes, for a request that may wait
    /// for a local slot ([`wait`]); `None`: it never waits (simulations, synthetic calls).
    pub waits: Option<&'a wait::Waits<'a>>,
    /// Tokens of this request a node's prefix cache likely holds (`fleet::prefix_cache`: the
    /// session's earlier turns where they ran, the shared preamble wherever it ran), read per
    /// node; `None` from it or no reader at all: unknown, the node's own hit rate stands in.
    pub cached: Option<&'a CachedOn<'a>>,
}

impl<'a> RequestFacts<'a> {
    /// The facts of the canonical `request` for `task` at `priority`: its estimated prompt, its
    /// output cap (1,024 tokens when it sets none), every node's load read through `load` and
    /// the plan's random choices drawn from `seed`. What each caller with a request plans from
    /// (the pipeline, a token count, a synthetic call), adding what it knows besides: the
    /// affinity and its window, the waits, the prefix caches.
    pub fn of(
        task: &'a TaskConfig,
        request: &'a ChatRequest,
        priority: Priority,
        seed: u64,
        load: &'a dyn Fn(&NodeView) -> LoadView,
    ) -> Self {
        RequestFacts {
            task,
            prompt_tokens: request.estimated_prompt_tokens(),
            max_output_tokens: request.max_tokens.unwrap_or(1024),
            seed,
            affinity: None,
            window: 0,
            priority,
            load,
            request: Some(request),
            candidates: None,
            waits: None,
            cached: None,
        }
    }
}

/// What a node's prefix cache likely holds of a request (`None`: unknown).
pub type CachedOn<'a> = dyn Fn(&NodeView) -> Option<Held> + 'a;

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
    /// A local node without headroom, tried only after everything else: any full node for
    /// interactive requests, one refused only for the failover reserve for standard ones.
    LastResort { why: SpillReason },
    /// A node without telemetry, on the router's own count: `in_flight` of its `capacity`
    /// when planned. Either a node of a measured pool that has not been read yet (it takes
    /// requests like any node with room), or a node of a pool none of whose nodes has fresh
    /// telemetry, served because no other eligible backend can take the request ([`blind`]).
    Unmeasured { in_flight: u32, capacity: u32 },
    /// A full local node that frees a slot soon enough for the SLO: the request waits for it
    /// in the pool's queue, its slot predicted in `start_ms` and its first token in
    /// `predicted_ttft_ms` ([`wait`]). `warm`: the node holds the request's prefix and another
    /// node has room now, cold; the pool's other waiters do not count it ahead of them.
    Wait { predicted_ttft_ms: u32, start_ms: u32, warm: bool },
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
    /// The pools that take this request's project first (`sticky`; at a share of 1, every
    /// pool while stickiness applies), and whether one of their nodes could take it: the
    /// pool's share shrinks while it refuses its own projects.
    pub kept: Vec<(BackendId, bool)>,
}

impl Plan {
    /// The plan to dispatch: waiting is over (`serve::wait`), so its wait targets go.
    pub fn without_waits(mut self) -> Plan {
        self.targets.retain(|t| !matches!(t.reason, Reason::Wait { .. }));
        self
    }

    /// The first reason the request left the fleet, if it did.
    pub(crate) fn spill_reason(&self) -> Option<SpillReason> {
        self.spills.iter().map(|s| s.reason).min()
    }
}

/// The node an affinity key prefers: highest rendezvous score of (key, node) among the nodes
/// no operator holds, so the choice is stable as nodes come and go, and the same on every
/// router replica (holds are shared state; a drained node's projects move to their next node
/// by the same hash everywhere, not to whichever node one replica sees least loaded).
fn affinity_node(nodes: &[NodeView], key: u64) -> Option<usize> {
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.held.is_none())
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
pub(crate) fn plan_among(
    facts: &RequestFacts<'_>,
    snap: &Snapshot,
    mut eligible: Vec<BackendId>,
    now: Instant,
) -> Result<Plan, PlanError> {
    if let Some(request) = facts.request {
        eligible = capability::filter(eligible, request, snap)?;
    }
    // The SLO left: a request re-planned after waiting has spent some of it.
    let waited_s = facts.waits.map_or(0.0, |w| w.waited_s);
    let slo_s = facts.task.slo.ttft_ms as f64 / 1000.0 * (1.0 - facts.task.slo.margin) - waited_s;
    let mut local: HashMap<BackendId, Vec<Target>> = HashMap::new();
    let mut last_resort: Vec<(f64, Target)> = Vec::new();
    let mut spills = Vec::new();
    // Pools that take this request's project second (`sticky`): planned after the hosted chain.
    let mut second = Vec::new();
    let mut kept = Vec::new();
    let key = facts.affinity.unwrap_or(facts.seed);
    let hosted_up = eligible.iter().any(|&b| !snap.backends[b].is_local() && !snap.backends[b].down);
    let sticky = sticky::applies(&snap.config.balancing.sticky_spill, facts.task.strategy, hosted_up);
    for &backend in eligible.iter().filter(|&&b| snap.backends[b].is_local()) {
        let member = sticky::membership(&snap.backends[backend], sticky, key);
        let stay = member == Some(true);
        let targets = pool_targets(facts, snap, backend, slo_s, stay, now, &mut spills, &mut last_resort);
        if sticky && member != Some(false) {
            kept.push((backend, !targets.is_empty()));
        }
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
    // A project outside a pool's share keeps its hosted chain, but not a provider written off
    // for slowness (`slowness`): that one waits after the pool, so the chains that draw it at
    // its bias weight do not send it a burst of late answers. One down for errors stays.
    let after_fleet = !second.is_empty() && snap.config.balancing.slow_signal.after_fleet;
    let mut deferred = Vec::new();
    for (backend, reason) in ordered {
        if let Some(pool) = local.remove(&backend) {
            targets.extend(pool);
            continue;
        }
        let view = &snap.backends[backend];
        let out = if after_fleet && view.down && view.slow { &mut deferred } else { &mut targets };
        let nodes = &view.nodes;
        let start = if nodes.is_empty() { 0 } else { (facts.seed % nodes.len() as u64) as usize };
        for offset in 0..nodes.len() {
            let node = (start + offset) % nodes.len();
            if nodes[node].held.is_some() {
                continue;
            }
            match nodes[node].breaker {
                BreakerView::Open => last.push(Target { backend, node, reason: Reason::BreakerOpen }),
                _ => out.push(Target { backend, node, reason }),
            }
        }
    }
    targets.extend(deferred);
    last_resort.sort_by(|a, b| {
        a.0.total_cmp(&b.0).then(a.1.backend.cmp(&b.1.backend)).then(a.1.node.cmp(&b.1.node))
    });
    targets.extend(last_resort.into_iter().map(|(_, t)| t));
    targets.extend(last);
    Ok(Plan { targets, spills, kept })
}

/// The nodes of one local pool that may take the request, affinity node first while it has
/// headroom, then the soonest predicted first token. The others are recorded as spills, and
/// some as last resorts ([`Judge::node`]). `stay`: the pool takes this project first
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
    let open = PoolLimits { reserve: 0.0, ..view.limits };
    let deadline_s = slo_s * snap.config.dispatch.ttft_deadline_factor;
    let affinity = facts.affinity.and_then(|k| {
        candidates::cached_affinity(facts.candidates, backend, k)
            .unwrap_or_else(|| affinity_node(&view.nodes, k))
    });
    let mut admitted: Vec<(bool, f64, usize)> = Vec::new();
    let judge = Judge { facts, view, backend, limits, open, slo_s, deadline_s, now };
    let preferred = judge.warmest(affinity);
    let mut mine = Vec::new();
    let mut scan = candidates::Scan::new(facts, snap, backend, preferred, slo_s, stay, now);
    let mut unread = Vec::new();
    let measured = !view.unmeasured(now);
    while let Some(i) = scan.next(&admitted) {
        if measured && view.nodes[i].signals.scraped_at.is_none() {
            unread.extend(judge.unread(i, spills));
        } else if let Some(ttft) = judge.node(i, spills, &mut mine) {
            admitted.push((preferred != Some(i), ttft, i));
        }
    }
    admitted.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    scan.cut(&mut admitted);
    if let Some(mut more) = scan.last_resorts(admitted.len(), deadline_s) {
        let mut found: Vec<f64> = mine.iter().map(|r| r.0).collect();
        found.sort_by(f64::total_cmp);
        while let Some(i) = more.next(&found) {
            judge.node(i, spills, &mut mine);
            // One judgement keeps at most one last resort.
            if let Some(&(ttft, _)) = mine.get(found.len()) {
                found.insert(found.partition_point(|&f| f < ttft), ttft);
            }
        }
    }
    last_resort.extend(mine);
    // Requests already wait for this pool before this one: its free slots are theirs.
    if facts.waits.is_some_and(|w| (w.ahead)(backend) > 0) {
        let taken = admitted.drain(..).map(|(_, _, i)| i).chain(unread.drain(..).map(|t| t.node));
        spills.extend(
            taken.map(|node| Spill { backend, node, reason: SpillReason::Queue }).collect::<Vec<_>>(),
        );
    }
    unread.sort_by_key(|t| match t.reason {
        Reason::Unmeasured { in_flight, .. } => (preferred != Some(t.node), in_flight, t.node),
        _ => (true, u32::MAX, t.node),
    });
    let (warm, waits) = match admitted.first() {
        None if unread.is_empty() => (None, wait::targets(facts, snap, backend, &limits, spills, slo_s, now)),
        Some(&(_, _, first)) => {
            let warm = preferred.filter(|&p| p != first).and_then(|p| judge.warm_wait(snap, spills, p));
            (warm, Vec::new())
        }
        None => (None, Vec::new()),
    };
    warm.into_iter().chain(headroom_targets(backend, admitted)).chain(unread).chain(waits).collect()
}

/// The admitted nodes of a pool as targets: (not the preferred node, predicted TTFT, node).
fn headroom_targets(backend: BackendId, admitted: Vec<(bool, f64, usize)>) -> impl Iterator<Item = Target> {
    admitted.into_iter().map(move |(other, ttft, node)| Target {
        backend,
        node,
        reason: Reason::Headroom { predicted_ttft_ms: (ttft * 1000.0).round() as u32, affinity: !other },
    })
}

/// How [`pool_targets`] judges one node of its pool for one request.
struct Judge<'a, 'f> {
    facts: &'a RequestFacts<'f>,
    view: &'a BackendView,
    backend: BackendId,
    /// The limits it is judged by, and those without the reserve (for last resorts).
    limits: PoolLimits,
    open: PoolLimits,
    slo_s: f64,
    deadline_s: f64,
    now: Instant,
}

impl Judge<'_, '_> {
    /// What node `i` likely holds of the request, if the router knows.
    fn held(&self, i: usize) -> Option<Held> {
        self.facts.cached.and_then(|cached| cached(&self.view.nodes[i]))
    }

    /// Tokens of the request node `i` likely holds, if the router knows.
    fn cached(&self, i: usize) -> Option<u32> {
        self.held(i).map(|h| h.tokens)
    }

    /// Node `i`, full and holding the session's earlier turns, as a wait target when it frees
    /// a slot in time for the SLO: in time, the cheaper prefill wins over a cold node with room
    /// now (the fleet spends less on the turn, and the session stays where it is warm). The
    /// cold node stays the next target.
    fn warm_wait(&self, snap: &Snapshot, spills: &[Spill], i: usize) -> Option<Target> {
        if !self.held(i).is_some_and(|h| h.own) {
            return None;
        }
        let waits = wait::targets(self.facts, snap, self.backend, &self.limits, spills, self.slo_s, self.now);
        let target = waits.into_iter().find(|t| t.node == i)?;
        match target.reason {
            Reason::Wait { predicted_ttft_ms, start_ms, .. } => {
                Some(Target { reason: Reason::Wait { predicted_ttft_ms, start_ms, warm: true }, ..target })
            }
            _ => None,
        }
    }

    /// The node the request goes to first while it has room: the one holding the most of the
    /// session's earlier turns when that is more than the affinity node holds (a session
    /// deflected from its affinity node is warm where it last ran), else the affinity node. A
    /// preamble many sessions share moves nobody: it is warm wherever any of them ran.
    fn warmest(&self, affinity: Option<usize>) -> Option<usize> {
        if self.facts.cached.is_none() {
            return affinity;
        }
        let own = |i: usize| self.held(i).filter(|h| h.own).map_or(0, |h| h.tokens);
        let floor = affinity.map_or(0, own);
        let nodes = self.view.nodes.iter().enumerate().filter(|(_, n)| n.held.is_none());
        let warmest = nodes.map(|(i, _)| (own(i), std::cmp::Reverse(i))).filter(|&(n, _)| n > floor).max();
        warmest.map(|(_, i)| i.0).or(affinity)
    }

    /// Node `i` of a measured pool has no reading yet: it is not full, it takes requests up
    /// to its capacity (the pool's `max_running` and `max_inflight_per_node`) on the router's
    /// own count, as a pool none of whose nodes is measured does ([`blind`]). A held, down or
    /// full one is recorded as a spill.
    fn unread(&self, i: usize, spills: &mut Vec<Spill>) -> Option<Target> {
        let node = &self.view.nodes[i];
        let why = if node.held.is_some() {
            SpillReason::Drained
        } else if node.breaker == BreakerView::Open || node.quarantine.is_some() {
            SpillReason::Down
        } else {
            let capacity = blind::capacity(self.view);
            let in_flight = (self.facts.load)(node).in_flight;
            if in_flight < u64::from(capacity) {
                let in_flight = in_flight as u32;
                let reason = Reason::Unmeasured { in_flight, capacity };
                return Some(Target { backend: self.backend, node: i, reason });
            }
            SpillReason::Queue
        };
        spills.push(Spill { backend: self.backend, node: i, reason: why });
        None
    }

    /// Node `i`'s predicted TTFT if it may take the request; else the spill is recorded, and
    /// the node kept as a last resort where the request's priority allows: every full node
    /// for interactive requests; for standard ones a node that would take it without the
    /// failover reserve (what the reserve is for: its hosted chain failed) and with the
    /// first-token deadline for its SLO, or would queue it with its first token predicted
    /// within that deadline, for when every hosted target failed or was passed over before
    /// the snapshot shows the provider down. Not a node short of KV cache.
    fn node(&self, i: usize, spills: &mut Vec<Spill>, last_resort: &mut Vec<(f64, Target)>) -> Option<f64> {
        let (facts, backend) = (self.facts, self.backend);
        let node = &self.view.nodes[i];
        let load = (facts.load)(node);
        let prompt = facts.prompt_tokens;
        let verdict = if node.held.is_some() {
            Err(SpillReason::Drained)
        } else if node.breaker == BreakerView::Open || node.quarantine.is_some() {
            Err(SpillReason::Down)
        } else {
            headroom::admit(&node.signals, load, &self.limits, prompt, self.cached(i), self.slo_s, self.now)
        };
        let why = match verdict {
            Ok(ttft) => return Some(ttft),
            Err(why) => why,
        };
        spills.push(Spill { backend, node: i, reason: why });
        let ttft = match facts.priority {
            Priority::Interactive if why > SpillReason::Stale => {
                Some(headroom::predict_ttft(&node.signals, load, &self.limits, prompt, self.cached(i)))
            }
            Priority::Standard
                if matches!(why, SpillReason::Reserve | SpillReason::Queue | SpillReason::Ttft) =>
            {
                let cached = self.cached(i);
                match headroom::admit(
                    &node.signals,
                    load,
                    &self.open,
                    prompt,
                    cached,
                    self.deadline_s,
                    self.now,
                ) {
                    Ok(ttft) => Some(ttft),
                    Err(SpillReason::Queue) => {
                        let ttft = headroom::predict_ttft(&node.signals, load, &self.open, prompt, cached);
                        (ttft <= self.deadline_s).then_some(ttft)
                    }
                    Err(_) => None,
                }
            }
            _ => None,
        };
        if let Some(ttft) = ttft {
            last_resort.push((ttft, Target { backend, node: i, reason: Reason::LastResort { why } }));
        }
        None
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "slow_plan_tests.rs"]
mod slow_tests;
