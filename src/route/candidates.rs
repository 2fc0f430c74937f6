//! Bounded candidate sets: planning over a large pool without judging every node per request,
//! where looking at fewer nodes provably gives the same first targets.
//!
//! A [`Candidates`] index is built once per snapshot and travels with each request's facts
//! (`RequestFacts::candidates`: the simulator builds one; the server passes none, so it always
//! scans in full). Per pool it leaves out the nodes no request can take while the snapshot
//! lives (held, down, stale, or full to the reserve by the others' requests they reported, the
//! least load they can show while the snapshot lives: `fleet::load`; a second index, for
//! the requests a pool under sticky spill takes first, which may use the reserve, leaves out
//! only the nodes full without it), groups nodes whose signals are identical, and orders them,
//! per prompt-size bin `[2^b, 2^(b+1))`, by their predicted TTFT with none of the router's own
//! load at the bin's smallest prompt: a lower bound of their prediction for any request in the
//! bin, since the prediction grows with the prompt and with the router's load. A request then looks at
//! its affinity node and at nodes in that order, and stops once `k` admitted nodes are ahead of
//! everything it has not looked at. The pool's targets it returns are the full scan's, cut
//! after the last one that nothing unseen could precede (at least `k` beyond the affinity
//! node, or all of them when the scan stopped on the SLO or ran out of nodes); its spills are
//! the nodes it judged. A standard request's last resorts (nodes refused for the reserve, a
//! queue or the SLO that answer within the first-token deadline) are found the same way in a
//! third index, which leaves out only the nodes no request can use (held, down, stale), in
//! order of the same lower bound: while the pool has fewer than `k` targets with headroom, the
//! scan goes on through it until `k` last resorts are ahead of everything it has not looked at
//! or the bound passes the deadline, so its first `k` last resorts are the full scan's.
//! Interactive requests (their last resorts list every full node) and plans made before the
//! index was built scan in full.
//!
//! A node the router's own load has filled is left out of later scans of the same snapshot
//! until one of the router's requests on it ends ([`Candidates::freed`]: the simulator, which
//! rebuilds the snapshot at every scrape, says so at every end).
//!
//! The affinity node (rendezvous over the pool's nodes that are not held) is looked up in a table computed
//! once per set of nodes for the keys the caller knows (the simulator's projects).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use super::affinity_node;
use crate::config::{BackendId, Priority};
use crate::fleet::headroom::{self, NodeSignals, PoolLimits};
use crate::fleet::load::LoadView;
use crate::snapshot::{BackendView, BreakerView, NodeView, Snapshot};

/// Admitted nodes a bounded scan finds beyond the affinity node, by default: more than a
/// dispatch walk's calls (`dispatch.max_attempts`, 4 by default) can use, so that the walk
/// goes where it would have gone with the full plan.
pub(crate) const DEFAULT_K: usize = 8;

/// The affinity node of each known key over one set of nodes.
#[derive(Debug)]
pub struct AffinityTable {
    nodes: u64,
    /// Keys are hashes already: looked up as they are.
    node: HashMap<u64, Option<usize>, BuildHasherDefault<KeyHasher>>,
}

/// The identity hash of a key that is a hash.
#[derive(Debug, Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = bytes.iter().fold(self.0, |h, b| h.rotate_left(8) ^ u64::from(*b));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// The nodes and which of them are held: what the affinity nodes depend on.
fn fingerprint(nodes: &[NodeView]) -> u64 {
    nodes.iter().fold(nodes.len() as u64, |h, n| {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(n.key.as_str().as_bytes(), h);
        h ^ u64::from(n.held.is_some())
    })
}

impl AffinityTable {
    pub fn new(nodes: &[NodeView], keys: impl IntoIterator<Item = u64>) -> AffinityTable {
        let node = keys.into_iter().map(|k| (k, affinity_node(nodes, k))).collect();
        AffinityTable { nodes: fingerprint(nodes), node }
    }
}

/// A snapshot's index of its large pools.
#[derive(Debug)]
pub struct Candidates {
    k: usize,
    built_at: Instant,
    /// By backend index; `None`: scan in full.
    pools: Vec<Option<Pool>>,
    /// The same, judged without the reserve: for requests the pool takes first under sticky
    /// spill, which may use it (built only for pools whose share is below 1: no other has such
    /// requests).
    relaxed: Vec<Option<Pool>>,
    /// Every node a standard request may keep as a last resort (built for the pools `pools`
    /// covers).
    resorts: Vec<Option<Pool>>,
}

/// Which requests an index is for, and so which nodes it leaves out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Index {
    /// Judged with the pool's reserve: nodes full to it are left out.
    Reserve,
    /// Judged without it (the projects a pool under sticky spill takes first).
    Relaxed,
    /// Last resorts: only the nodes no request can use are left out.
    LastResorts,
}

#[derive(Debug)]
struct Pool {
    /// The limits its nodes are judged full by: the pool's, or without the reserve.
    limits: PoolLimits,
    /// Nodes no request can take while the snapshot lives.
    excluded: Vec<usize>,
    /// Each node's signals with only the others' requests it reported as running (none of
    /// the router's own, no queue): the least load it can show while the snapshot lives.
    floor: Vec<NodeSignals>,
    /// Each node's class (nodes with identical floors share one), and each class's first node.
    class_of: Vec<u32>,
    first: Vec<usize>,
    affinity: Option<Arc<AffinityTable>>,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Per prompt bin, once asked for: (lower bound, class, node), ascending.
    bins: Vec<Option<Vec<(f64, u32, usize)>>>,
    /// Nodes found full by the router's own load since the build, until one of its requests
    /// on them finishes ([`Candidates::freed`]).
    dead: Vec<bool>,
}

/// The bin of a prompt, and the smallest prompt it holds minus one (0 for the first).
fn bin(prompt: u32) -> (usize, u32) {
    match prompt {
        0 | 1 => (0, 0),
        p => {
            let b = 31 - p.leading_zeros();
            (b as usize, (1 << b) - 1)
        }
    }
}

/// Whole slots the reserve keeps free, as `headroom::admit` counts them.
fn reserved(slots: f64, reserve: f64) -> f64 {
    (slots * reserve.max(0.0) + 1e-9).floor()
}

/// No standard or batch request fits on the node with `at_node` requests on it.
fn full(sig: &NodeSignals, limits: &PoolLimits, at_node: f64) -> bool {
    let slots = headroom::slots(sig, limits);
    let reserved = reserved(slots, limits.reserve);
    (reserved >= 1.0 && at_node + 1.0 > (slots - reserved).max(1.0)) || at_node + 1.0 > slots
}

/// `sig` with the requests at the node that are not the router's (`counted` of its own were in
/// the reading) as running, and no queue: what planning sees of the node with none of the
/// router's requests in flight.
fn floor(sig: &NodeSignals, counted: u64) -> NodeSignals {
    let others = LoadView { counted, ..LoadView::default() }.others(sig.running, sig.waiting);
    NodeSignals { running: others, waiting: None, ..sig.clone() }
}

/// A hash of every signal (a new field must be added here: the pattern names them all).
fn signals_hash(sig: &NodeSignals) -> u64 {
    use std::hash::Hash;
    let NodeSignals {
        scraped_at,
        running,
        waiting,
        max_running,
        kv_usage,
        kv_blocks,
        block_size,
        kv_capacity_tokens,
        ttft_s,
        queue_s,
        prefill_tps,
        itl_s,
        service_s,
        prefix_hit_rate,
        prompt_tokens_mean,
        restarts,
    } = sig;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (scraped_at, kv_blocks, block_size, restarts).hash(&mut h);
    let floats = [
        running,
        waiting,
        max_running,
        kv_usage,
        kv_capacity_tokens,
        ttft_s,
        queue_s,
        prefill_tps,
        itl_s,
        service_s,
        prefix_hit_rate,
        prompt_tokens_mean,
    ];
    floats.iter().for_each(|f| f.map(f64::to_bits).hash(&mut h));
    h.finish()
}

impl Pool {
    fn build(
        view: &BackendView,
        limits: PoolLimits,
        (now, load): (Instant, &dyn Fn(&NodeView) -> LoadView),
        affinity: Option<Arc<AffinityTable>>,
        index: Index,
    ) -> Pool {
        let limits = &limits;
        let floor: Vec<NodeSignals> = view.nodes.iter().map(|n| floor(&n.signals, load(n).counted)).collect();
        let full_now =
            |sig: &NodeSignals| index != Index::LastResorts && full(sig, limits, sig.running.unwrap_or(0.0));
        let mut excluded = Vec::new();
        let mut class_of = Vec::with_capacity(view.nodes.len());
        let mut first: Vec<usize> = Vec::new();
        let mut classes: HashMap<u64, Vec<u32>> = HashMap::new();
        for (i, node) in view.nodes.iter().enumerate() {
            let sig = &floor[i];
            if node.held.is_some()
                || node.breaker == BreakerView::Open
                || node.quarantine.is_some()
                || !headroom::fresh(sig, limits, now)
                || full_now(sig)
            {
                excluded.push(i);
            }
            // Identical floors, identical predictions: grouped by a hash, confirmed equal.
            let same = classes.entry(signals_hash(sig)).or_default();
            let class = match same.iter().find(|&&c| floor[first[c as usize]] == *sig) {
                Some(&c) => c,
                None => {
                    first.push(i);
                    same.push(first.len() as u32 - 1);
                    first.len() as u32 - 1
                }
            };
            class_of.push(class);
        }
        let affinity = affinity.filter(|t| t.nodes == fingerprint(&view.nodes));
        let state = PoolState { bins: vec![None; 32], dead: vec![false; view.nodes.len()] };
        Pool { limits: *limits, excluded, floor, class_of, first, affinity, state: Mutex::new(state) }
    }

    fn order(&self, view: &BackendView, state: &mut PoolState, b: usize, low: u32) {
        if state.bins[b].is_some() {
            return;
        }
        let mut out: Vec<bool> = vec![false; view.nodes.len()];
        self.excluded.iter().for_each(|&i| out[i] = true);
        let bounds: Vec<f64> = self
            .first
            .iter()
            .map(|&i| headroom::predict_ttft(&self.floor[i], LoadView::default(), &view.limits, low, None))
            .collect();
        let mut order: Vec<(f64, u32, usize)> = (0..view.nodes.len())
            .filter(|&i| !out[i])
            .map(|i| (bounds[self.class_of[i] as usize], self.class_of[i], i))
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        state.bins[b] = Some(order);
    }
}

impl Candidates {
    /// The index of `snap`'s pools of at least `min_nodes` nodes, for plans made from `now`
    /// on; `affinity`: tables by backend index, used where they match the pool's nodes.
    pub fn build(
        snap: &Snapshot,
        (now, load): (Instant, &dyn Fn(&NodeView) -> LoadView),
        k: usize,
        min_nodes: usize,
        affinity: &[Option<Arc<AffinityTable>>],
    ) -> Candidates {
        let index = |index: Index| {
            snap.backends
                .iter()
                .enumerate()
                .map(|(b, view)| {
                    let limits = PoolLimits {
                        reserve: if index == Index::Reserve { view.limits.reserve } else { 0.0 },
                        ..view.limits
                    };
                    let own_projects = index != Index::Relaxed || view.share < 1.0;
                    (view.is_local() && view.nodes.len() >= min_nodes.max(1) && own_projects).then(|| {
                        Pool::build(view, limits, (now, load), affinity.get(b).cloned().flatten(), index)
                    })
                })
                .collect()
        };
        Candidates {
            k: k.max(1),
            built_at: now,
            pools: index(Index::Reserve),
            relaxed: index(Index::Relaxed),
            resorts: index(Index::LastResorts),
        }
    }

    /// A request of the router's on `node` of `backend` ended: a node its load had filled
    /// may take requests again.
    pub(crate) fn freed(&self, backend: BackendId, node: usize) {
        for pool in [&self.pools, &self.relaxed].into_iter().filter_map(|p| p.get(backend.index())?.as_ref())
        {
            let mut state = pool.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(dead) = state.dead.get_mut(node) {
                *dead = false;
            }
        }
    }
}

/// `key`'s affinity node in `backend` from the index's table, if it has one for the key.
pub(crate) fn cached_affinity(
    index: Option<&Candidates>,
    backend: BackendId,
    key: u64,
) -> Option<Option<usize>> {
    let pool = index?.pools.get(backend.index())?.as_ref()?;
    pool.affinity.as_ref()?.node.get(&key).copied()
}

/// The nodes of one pool that planning judges for one request, in the order it judges them.
pub(crate) struct Scan<'a> {
    n: usize,
    next: usize,
    bounded: Option<Bounded<'a>>,
}

struct Bounded<'a> {
    k: usize,
    view: &'a BackendView,
    pool: &'a Pool,
    state: MutexGuard<'a, PoolState>,
    load: &'a dyn Fn(&NodeView) -> LoadView,
    prompt: u32,
    slo_s: f64,
    bin: usize,
    /// Position in the bin's order.
    pos: usize,
    affinity: Option<usize>,
    /// The `k` best (TTFT, node) admitted so far, the affinity node's apart.
    best: Vec<(f64, usize)>,
    /// Admitted entries already read, and the node last handed out.
    read: usize,
    last: Option<usize>,
    /// Whether any node was handed out.
    judged: bool,
    /// The class being looked at, and its lower bound at this request's prompt.
    class: Option<(u32, f64)>,
    /// The nodes handed out, and the index of this pool's last resorts (standard requests).
    handed: Vec<usize>,
    resorts: Option<&'a Pool>,
    /// No node left unjudged that could be admitted comes before this (TTFT, node).
    cut: (f64, usize),
    done: bool,
}

fn min_pair(a: (f64, usize), b: (f64, usize)) -> (f64, usize) {
    if b < a {
        b
    } else {
        a
    }
}

impl<'a> Scan<'a> {
    /// The scan of `backend` for a request (`facts`), whose affinity node is `preferred`.
    /// `relaxed`: the request is judged without the pool's reserve (sticky spill): its nodes
    /// are left out only when full without it.
    pub fn new<'f: 'a>(
        facts: &super::RequestFacts<'f>,
        snap: &'a Snapshot,
        backend: BackendId,
        preferred: Option<usize>,
        slo_s: f64,
        relaxed: bool,
        now: Instant,
    ) -> Scan<'a> {
        let view = &snap.backends[backend];
        let n = view.nodes.len();
        let bounded = facts
            .candidates
            // Its bounds price the whole prompt: a request that may find part of it cached
            // on some node is judged on every node.
            .filter(|c| {
                now >= c.built_at && facts.priority != Priority::Interactive && facts.cached.is_none()
            })
            .and_then(|c| {
                let pools = if relaxed { &c.relaxed } else { &c.pools };
                let resorts = c.resorts.get(backend.index()).and_then(Option::as_ref);
                let resorts = resorts.filter(|_| facts.priority == Priority::Standard);
                Some((c.k, pools.get(backend.index())?.as_ref()?, resorts))
            })
            .map(|(k, pool, resorts)| {
                let mut state = pool.state.lock().unwrap_or_else(|e| e.into_inner());
                let (bin, low) = bin(facts.prompt_tokens);
                pool.order(view, &mut state, bin, low);
                Bounded {
                    k,
                    view,
                    pool,
                    state,
                    load: facts.load,
                    prompt: facts.prompt_tokens,
                    slo_s,
                    bin,
                    pos: 0,
                    affinity: preferred,
                    best: Vec::with_capacity(k + 1),
                    read: 0,
                    last: None,
                    judged: false,
                    class: None,
                    handed: Vec::new(),
                    resorts,
                    cut: (f64::INFINITY, usize::MAX),
                    done: false,
                }
            });
        Scan { n, next: 0, bounded }
    }

    /// The next node to judge; `admitted` is the pool's list of (not the affinity node,
    /// predicted TTFT, node) so far.
    pub fn next(&mut self, admitted: &[(bool, f64, usize)]) -> Option<usize> {
        match &mut self.bounded {
            None => {
                self.next += 1;
                (self.next <= self.n).then_some(self.next - 1)
            }
            Some(b) => b.next(admitted),
        }
    }

    /// Cut the pool's sorted admitted list after what the nodes not judged could precede.
    pub fn cut(&self, admitted: &mut Vec<(bool, f64, usize)>) {
        if let Some(b) = &self.bounded {
            admitted.retain(|&(other, ttft, i)| !other || (ttft, i) < b.cut);
        }
    }

    /// After the scan, with `targets` the pool's targets with headroom (cut): the nodes it did
    /// not judge that may still be among a standard request's first `k` last resorts, for a
    /// bounded scan whose pool has fewer than `k` targets (more would come first in the plan,
    /// beyond what a walk's calls use). `None`: nothing more to judge (a full scan judged
    /// every node).
    pub(crate) fn last_resorts(self, targets: usize, deadline_s: f64) -> Option<LastResorts<'a>> {
        let b = self.bounded?;
        let pool = b.resorts.filter(|_| targets < b.k)?;
        let mut state = pool.state.lock().unwrap_or_else(|e| e.into_inner());
        let (bin, low) = bin(b.prompt);
        pool.order(b.view, &mut state, bin, low);
        Some(LastResorts { k: b.k, deadline_s, state, bin, pos: 0, judged: b.handed })
    }
}

/// The rest of a bounded scan, for a standard request's last resorts.
pub(crate) struct LastResorts<'a> {
    k: usize,
    deadline_s: f64,
    state: MutexGuard<'a, PoolState>,
    bin: usize,
    pos: usize,
    /// The nodes the scan already judged.
    judged: Vec<usize>,
}

impl LastResorts<'_> {
    /// The next node to judge, given the predicted TTFTs of the pool's last resorts so far
    /// (ascending); `None` once nothing unjudged could come before the `k`-th of them.
    pub fn next(&mut self, found: &[f64]) -> Option<usize> {
        let order = self.state.bins[self.bin].as_ref().expect("ordered in Scan::last_resorts");
        while let Some(&(low, _, i)) = order.get(self.pos) {
            self.pos += 1;
            if low > self.deadline_s || found.get(self.k - 1).is_some_and(|&kth| low > kth) {
                return None;
            }
            if !self.judged.contains(&i) {
                return Some(i);
            }
        }
        None
    }
}

impl Bounded<'_> {
    fn next(&mut self, admitted: &[(bool, f64, usize)]) -> Option<usize> {
        self.read_back(admitted);
        if !self.judged {
            if let Some(a) = self.affinity {
                return self.hand_out(a);
            }
        }
        while !self.done {
            let order = self.state.bins[self.bin].as_ref().expect("ordered in Scan::new");
            let Some(&(low, class, i)) = order.get(self.pos) else {
                self.done = true;
                break;
            };
            if self.state.dead[i] {
                self.pos += 1;
                continue;
            }
            if Some(i) == self.affinity {
                self.pos += 1;
                continue;
            }
            let kth = (self.best.len() >= self.k).then(|| self.best[self.k - 1]);
            if low > self.slo_s || kth.is_some_and(|(t, _)| low > t) {
                // Nothing from here on is admitted, or can come before the k best.
                if low <= self.slo_s {
                    self.cut = min_pair(self.cut, (low, 0));
                }
                self.done = true;
                break;
            }
            let bound = match self.class {
                Some((c, bound)) if c == class => bound,
                _ => {
                    let first = &self.pool.floor[self.pool.first[class as usize]];
                    let limits = &self.view.limits;
                    let bound = headroom::predict_ttft(first, LoadView::default(), limits, self.prompt, None);
                    self.class = Some((class, bound));
                    bound
                }
            };
            if bound > self.slo_s || kth.is_some_and(|kth| (bound, i) > kth) {
                // Neither this node nor the rest of its class (same bound, later nodes).
                if bound <= self.slo_s {
                    self.cut = min_pair(self.cut, (bound, i));
                }
                let order = self.state.bins[self.bin].as_ref().expect("ordered");
                self.pos += order[self.pos..].iter().take_while(|e| e.1 == class).count();
                continue;
            }
            self.pos += 1;
            return self.hand_out(i);
        }
        // Nothing judged at all: one node that cannot take the request, so the plan still
        // records that the pool spilled.
        if !self.judged {
            let left_out = self.pool.excluded.first().copied();
            let dead = self.state.dead.iter().position(|d| *d);
            if let Some(i) = left_out.or(dead) {
                return self.hand_out(i);
            }
        }
        None
    }

    fn hand_out(&mut self, i: usize) -> Option<usize> {
        self.judged = true;
        self.handed.push(i);
        self.last = Some(i);
        Some(i)
    }

    /// Take in what the loop admitted since the last call; a node it did not admit that the
    /// router's own load has filled stays out of this snapshot's later scans.
    fn read_back(&mut self, admitted: &[(bool, f64, usize)]) {
        let fresh = &admitted[self.read.min(admitted.len())..];
        let took_last = fresh.iter().any(|e| Some(e.2) == self.last);
        for &(other, ttft, i) in fresh {
            if other {
                let at = self.best.partition_point(|b| *b < (ttft, i));
                self.best.insert(at, (ttft, i));
                self.best.truncate(self.k);
            }
        }
        self.read = admitted.len();
        if let Some(last) = self.last.take().filter(|_| !took_last) {
            let node = &self.view.nodes[last];
            let at_node = (self.load)(node).at_node(node.signals.running, node.signals.waiting);
            if full(&node.signals, &self.pool.limits, at_node) {
                self.state.dead[last] = true;
            }
        }
    }
}

#[cfg(test)]
#[path = "candidates_tests.rs"]
mod tests;
