//! The load model: how many requests a node holds now, from what the router knows exactly (its
//! own requests in flight) and what the engine's gauges add late (other replicas, direct
//! clients, the queue).
//!
//! A node's requests now are the router's own in flight, plus the others its last reading
//! showed: the reading's `running + waiting` less the most of the router's own requests that
//! were in flight while the reading could have been taken (from the gauges' lag before the
//! scrape to its landing). So a request the router saw finish is never load, a burst sent
//! between two scrapes is counted at once, lagging gauges are not added on top of the router's
//! own requests, and what other routers send still shows. A node that reports no running
//! gauge has unknown others: the router's own count stands alone. The engine's queue, as read,
//! shrinks by every request of the router's that finished since (each freed a slot).
//!
//! The lag window is `telemetry.gauge_lag_ms` (5 s by default, at most 60 s): of each reading,
//! the router takes as its own the most of its requests in flight over that long before it.
//!
//! Worked example, one llama.cpp node with 2 slots, scraped every second: a reading at t = 1 s
//! caught one running request, the router's own (its most in flight over the lag window: 1), so
//! others are 1 − 1 = 0. Between t = 1 s and 2 s the router sends five short requests one after
//! another, and each sees the node holding 0 before it and 1 while it runs (the reading plus
//! every request sent since it, the arithmetic before this model, said 1 + 4 = 5 for the fifth:
//! a full node, a spill). Had another router kept three requests running there, the reading
//! would say 4, others 4 − 1 = 3, and each request would see 3, then 4. `/admin/backends`
//! shows each node's `load` as the model reads it (`at_node`, `others`, `queued`,
//! `counted_in_reading`).
//!
//! Counters are atomics updated by dispatch and read (as plain numbers) before planning, each
//! node's reached through the handle the snapshot holds; only the scrape loop touches a node's
//! window of past peaks.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::Notify;

use super::prefix_cache::{Held, Memory, PrefixKeys};
use super::progress::{NodeProgress, NodeRunning, Progress};
use crate::canonical::NodeKey;
use crate::config::Priority;

/// One node's load as planning sees it: plain numbers, read before planning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadView {
    /// Requests the router has in flight on the node now.
    pub in_flight: u64,
    /// Of those, the ones sent since the last reading: in none of its gauges (KV cache included).
    pub unseen: u64,
    /// Requests ever sent to the node by this router.
    pub sent: u64,
    /// The most of the router's own requests in flight while the last reading could have been
    /// taken: the share of its gauges that is the router's own, at most.
    pub counted: u64,
    /// The router's requests that finished since that reading's window began.
    pub freed: u64,
    /// The fastest the node can prefill, tokens per second, as the router's own requests
    /// showed it: one of them had no first token by its deadline (`NodeCounters::late`).
    /// `None` until one was late, and again once one gets its first token there.
    pub prefill_ceiling_tps: Option<u32>,
}

impl LoadView {
    /// Requests at the node now, `running` and `waiting` being its last reading's gauges.
    pub(crate) fn at_node(&self, running: Option<f64>, waiting: Option<f64>) -> f64 {
        self.in_flight as f64 + self.others(running, waiting).unwrap_or(0.0)
    }

    /// Requests at the node that are not this router's, as the last reading showed them;
    /// `None` when the engine reports no running gauge.
    pub fn others(&self, running: Option<f64>, waiting: Option<f64>) -> Option<f64> {
        let seen = running? + waiting.unwrap_or(0.0);
        Some((seen - self.counted as f64).max(0.0))
    }

    /// Requests queued at the node now, as far as the last reading tells.
    pub fn queued(&self, waiting: Option<f64>) -> f64 {
        (waiting.unwrap_or(0.0) - self.freed as f64).max(0.0)
    }
}

#[derive(Debug, Default)]
struct Counters {
    in_flight: AtomicU64,
    /// Of `in_flight`, by priority (in `Priority::ALL` order).
    by_priority: [AtomicU64; 3],
    sent: AtomicU64,
    /// The most in flight since the window's open interval began.
    peak: AtomicU64,
    /// What the last reading fixed: see [`LoadView`].
    sent_at_scrape: AtomicU64,
    counted: AtomicU64,
    finished_base: AtomicU64,
    window: Mutex<Window>,
    /// The router's requests in flight on the node, each with its progress.
    progress: NodeProgress,
    /// Told whenever one of them ends (a slot may have freed).
    freed: Notify,
    /// What its prefix cache likely holds.
    prefix: Mutex<Memory>,
    /// `LoadView::prefill_ceiling_tps`, 0 for none.
    prefill_ceiling: AtomicU32,
}

/// The node's past: the peak of the router's in-flight count in each interval between two
/// readings, with the count of its finished requests when the interval began.
#[derive(Debug, Default)]
struct Window {
    closed: VecDeque<Interval>,
    /// Finished requests when the open interval began.
    open_finished: u64,
}

#[derive(Debug, Clone, Copy)]
struct Interval {
    ended: Instant,
    peak: u64,
    finished_at_start: u64,
}

/// The most intervals a node keeps (readings from several replicas close more of them).
const MAX_INTERVALS: usize = 256;

/// Every node's counters, by node key: the scrape loop and the admin API reach them here;
/// dispatch and planning through the handle the snapshot holds ([`NodeCounters`]).
#[derive(Debug, Default)]
pub struct NodeLoad {
    nodes: Mutex<HashMap<NodeKey, NodeCounters>>,
}

/// One node's counters, cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct NodeCounters(Arc<Counters>);

/// Held while a request is in flight on a node; dropping it ends the request.
#[derive(Debug)]
pub struct InFlight(Arc<Counters>, usize, Arc<Progress>);

impl InFlight {
    /// The request's progress, for its events to update (`fleet::progress`).
    pub fn progress(&self) -> &Progress {
        &self.2
    }

    /// Whether it is in flight on the node whose counters these are.
    pub fn on(&self, node: &NodeCounters) -> bool {
        Arc::ptr_eq(&self.0, &node.0)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.by_priority[self.1].fetch_sub(1, Ordering::Relaxed);
        self.0.progress.end(&self.2);
        if let Some((touch, tokens, reported)) = self.2.learnt() {
            // A request got its first token: the node's measured speed speaks again.
            self.0.prefill_ceiling.store(0, Ordering::Relaxed);
            let mut memory = self.0.prefix.lock().unwrap_or_else(|e| e.into_inner());
            memory.served(&touch.keys, tokens, touch.generation);
            if let Some(actual) = reported {
                memory.reported(touch.predicted_cached, actual);
            }
        }
        self.0.freed.notify_waiters();
    }
}

fn priority_index(p: Priority) -> usize {
    Priority::ALL.iter().position(|&q| q == p).unwrap_or(0)
}

impl NodeCounters {
    /// A request of `priority` is being sent to the node.
    pub fn start(&self, priority: Priority) -> InFlight {
        let c = &self.0;
        let now = c.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let p = priority_index(priority);
        c.by_priority[p].fetch_add(1, Ordering::Relaxed);
        c.peak.fetch_max(now, Ordering::Relaxed);
        c.sent.fetch_add(1, Ordering::Relaxed);
        let progress = Arc::new(Progress::new(Instant::now()));
        c.progress.start(Arc::clone(&progress));
        InFlight(Arc::clone(c), p, progress)
    }

    /// The router's requests in flight on the node, and the usual length of its answers.
    pub fn running(&self) -> NodeRunning {
        self.0.progress.read()
    }

    /// Tokens of a request of `prompt` tokens with these keys the node's prefix cache likely
    /// holds, its engine in its `generation`-th run (`fleet::prefix_cache`); `None`: no keys.
    pub fn cached(&self, keys: &PrefixKeys, prompt: u32, generation: u32) -> Option<Held> {
        self.0.prefix.lock().unwrap_or_else(|e| e.into_inner()).cached(keys, prompt, generation)
    }

    /// Told whenever one of the router's requests on the node ends.
    pub fn freed(&self) -> &Notify {
        &self.0.freed
    }

    /// The router's requests in flight on the node now, of `priority`.
    pub fn in_flight_of(&self, priority: Priority) -> u64 {
        self.0.by_priority[priority_index(priority)].load(Ordering::Relaxed)
    }

    /// A good reading of the node landed at `now`, its gauges taken at `taken_at` and trailing
    /// the engine's true state by up to `lag`: the open interval closes, and the reading's
    /// share of the router's own requests is fixed.
    pub(crate) fn mark_scraped(&self, now: Instant, taken_at: Instant, lag: Duration) {
        let c = &self.0;
        let mut w = c.window.lock().unwrap_or_else(|e| e.into_inner());
        let sent = c.sent.load(Ordering::Relaxed);
        let in_flight = c.in_flight.load(Ordering::Relaxed);
        let peak = c.peak.swap(in_flight, Ordering::Relaxed).max(in_flight);
        let finished_at_start = std::mem::replace(&mut w.open_finished, sent.saturating_sub(in_flight));
        w.closed.push_back(Interval { ended: now, peak, finished_at_start });
        let from = taken_at.checked_sub(lag).unwrap_or(taken_at);
        // Intervals that ended before the window are kept as long again, for a late reading.
        let keep_from = from.checked_sub(lag).unwrap_or(from);
        while w.closed.len() > MAX_INTERVALS || w.closed.front().is_some_and(|i| i.ended < keep_from) {
            w.closed.pop_front();
        }
        // The interval just closed always overlaps the window.
        let overlapping = || w.closed.iter().filter(|i| i.ended >= from);
        let counted = overlapping().map(|i| i.peak).max().unwrap_or(peak);
        let base = overlapping().map(|i| i.finished_at_start).next().unwrap_or(finished_at_start);
        c.sent_at_scrape.store(sent, Ordering::Relaxed);
        c.counted.store(counted, Ordering::Relaxed);
        c.finished_base.store(base, Ordering::Relaxed);
    }

    pub fn view(&self) -> LoadView {
        let c = &self.0;
        let sent = c.sent.load(Ordering::Relaxed);
        let in_flight = c.in_flight.load(Ordering::Relaxed);
        let finished = sent.saturating_sub(in_flight);
        LoadView {
            in_flight,
            unseen: sent.saturating_sub(c.sent_at_scrape.load(Ordering::Relaxed)).min(in_flight),
            sent,
            counted: c.counted.load(Ordering::Relaxed),
            freed: finished.saturating_sub(c.finished_base.load(Ordering::Relaxed)),
            prefill_ceiling_tps: Some(c.prefill_ceiling.load(Ordering::Relaxed)).filter(|&t| t > 0),
        }
    }

    /// A request of the router's here had no first token `waited` after it was sent, though
    /// the node is up: the node prefills at most the tokens its requests still waiting for
    /// their first token have to prefill (this one's included), in that time. Call it while
    /// the late request is still in flight.
    pub fn late(&self, waited: Duration) {
        let prefilling: u64 =
            self.running().0.iter().filter(|r| !r.first_token).map(|r| u64::from(r.prefill_tokens)).sum();
        let ceiling =
            (prefilling as f64 / waited.as_secs_f64().max(1e-3)).ceil().clamp(1.0, f64::from(u32::MAX));
        let c = &self.0.prefill_ceiling;
        let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(if old == 0 { ceiling as u32 } else { old.min(ceiling as u32) })
        });
    }

    /// Whether both are the same node's counters.
    pub fn same(&self, other: &NodeCounters) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl NodeLoad {
    pub fn new() -> Arc<Self> {
        Arc::new(NodeLoad::default())
    }

    /// The node's counters (zero the first time the node is met).
    pub fn node(&self, key: &NodeKey) -> NodeCounters {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.entry(key.clone()).or_default().clone()
    }

    /// A request of `priority` is being sent to the node.
    pub fn start(&self, key: &NodeKey, priority: Priority) -> InFlight {
        self.node(key).start(priority)
    }

    /// A good reading of the node landed (see [`NodeCounters::mark_scraped`]).
    pub(crate) fn mark_scraped(&self, key: &NodeKey, now: Instant, taken_at: Instant, lag: Duration) {
        self.node(key).mark_scraped(now, taken_at, lag);
    }

    pub fn view(&self, key: &str) -> LoadView {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.get(key).map_or(LoadView::default(), NodeCounters::view)
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
