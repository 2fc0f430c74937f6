//! The router-side queue in front of each local pool: requests whose plan says a slot frees in
//! time (`route::wait`) wait here instead of spilling (`serve::wait` holds them). It is bounded
//! (`queue.max_waiting` per pool), ordered and fair: by priority first, then in rounds across
//! sessions and client keys (a session's second waiting request goes after every other
//! session's first), then by arrival; one session or key holds at most `queue.max_share` of it.
//!
//! Only the ordering lives here, and the wake-ups: every join and leave tells each waiter to
//! look again ([`WaitQueues::changed`]). Whether a waiter goes, waits on or spills is the
//! pipeline's call, by planning again with [`Ticket::ahead`] requests before it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::config::{Priority, QueueConfig};

/// Who a waiting request belongs to, for fairness: its session (affinity hash) and client key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Holder<'a> {
    pub session: Option<u64>,
    pub key: Option<&'a str>,
}

/// Where a request stands in its pool's queue; lower goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    priority: usize,
    /// Requests of the same session or key already waiting when it joined.
    round: usize,
    seq: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    rank: Rank,
    session: Option<u64>,
    key: Option<String>,
    tokens: u32,
    /// It waits for the one node that holds its prefix while another has room: no other
    /// request waits behind it.
    warm: bool,
}

/// Why a request may not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The pool's queue holds `queue.max_waiting` requests.
    Full,
    /// Its session or client key holds its share of the queue.
    Share,
    /// The router is shutting down.
    Draining,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Full => "queue_full",
            Refused::Share => "queue_share",
            Refused::Draining => "draining",
        }
    }
}

/// Every local pool's queue, by pool name.
#[derive(Debug, Default)]
pub struct WaitQueues {
    pools: Mutex<HashMap<String, Vec<Entry>>>,
    /// Requests waiting in every pool: while none is, planning asks without a lock.
    total: AtomicUsize,
    seq: AtomicU64,
    draining: AtomicBool,
    changed: Notify,
}

fn priority_rank(p: Priority) -> usize {
    Priority::ALL.iter().position(|&q| q == p).unwrap_or(0)
}

fn same_holder(e: &Entry, holder: &Holder<'_>) -> bool {
    (holder.session.is_some() && e.session == holder.session)
        || (holder.key.is_some() && e.key.as_deref() == holder.key)
}

/// The rank a request joining `waiting` gets: its round is how many of its session's or
/// key's requests are already there.
fn rank_of(waiting: &[Entry], priority: Priority, holder: &Holder<'_>, seq: u64) -> Rank {
    let round = waiting.iter().filter(|e| same_holder(e, holder)).count();
    Rank { priority: priority_rank(priority), round, seq }
}

impl WaitQueues {
    pub fn new() -> Arc<WaitQueues> {
        Arc::new(WaitQueues::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Entry>>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests waiting for `pool` that a new request of `priority` from `holder` would
    /// wait behind.
    pub fn ahead(&self, pool: &str, priority: Priority, holder: Holder<'_>) -> usize {
        if self.total.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let pools = self.lock();
        let Some(waiting) = pools.get(pool) else { return 0 };
        let rank = rank_of(waiting, priority, &holder, u64::MAX);
        waiting.iter().filter(|e| e.rank < rank && !e.warm).count()
    }

    /// Join `pool`'s queue, or why not. `warm`: the request waits for the node holding its
    /// prefix while another has room (`route::Reason::Wait`), so it is not ahead of later ones.
    #[allow(clippy::too_many_arguments)]
    pub fn join(
        self: &Arc<Self>,
        pool: &str,
        priority: Priority,
        holder: Holder<'_>,
        tokens: u32,
        warm: bool,
        cfg: &QueueConfig,
    ) -> Result<Ticket, Refused> {
        if self.draining() {
            return Err(Refused::Draining);
        }
        let mut pools = self.lock();
        let waiting = pools.entry(pool.to_string()).or_default();
        if waiting.len() >= cfg.max_waiting as usize {
            return Err(Refused::Full);
        }
        let per_holder = cfg.per_holder();
        let held = |same: &dyn Fn(&Entry) -> bool| waiting.iter().filter(|e| same(e)).count();
        if holder.session.is_some_and(|s| held(&|e| e.session == Some(s)) >= per_holder)
            || holder.key.is_some_and(|k| held(&|e| e.key.as_deref() == Some(k)) >= per_holder)
        {
            return Err(Refused::Share);
        }
        let rank = rank_of(waiting, priority, &holder, self.seq.fetch_add(1, Ordering::Relaxed));
        let key = holder.key.map(str::to_string);
        waiting.push(Entry { rank, session: holder.session, key, tokens, warm });
        self.total.fetch_add(1, Ordering::Relaxed);
        drop(pools);
        self.changed.notify_waiters();
        Ok(Ticket { queues: Arc::clone(self), pool: pool.to_string(), rank })
    }

    /// Shutting down: no request joins any more, and every waiter is told to go or spill now.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Told whenever a request joins or leaves a queue, or shutdown begins.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }

    /// Each pool's waiting requests and their prompt tokens, by pool name.
    pub fn depths(&self) -> Vec<(String, usize, u64)> {
        let pools = self.lock();
        let mut out: Vec<_> = pools
            .iter()
            .map(|(pool, w)| (pool.clone(), w.len(), w.iter().map(|e| u64::from(e.tokens)).sum()))
            .collect();
        out.sort();
        out
    }
}

/// A request's place in a pool's queue; dropping it (served, spilled, or its client gone)
/// leaves the queue.
#[derive(Debug)]
pub struct Ticket {
    queues: Arc<WaitQueues>,
    pool: String,
    rank: Rank,
}

impl Ticket {
    pub fn pool(&self) -> &str {
        &self.pool
    }

    /// It now waits for the node holding its prefix while another has room (`warm`), or for
    /// any slot: only the latter makes other requests wait behind it.
    pub fn set_warm(&self, warm: bool) {
        let mut pools = self.queues.lock();
        let entries = pools.get_mut(&self.pool).into_iter().flatten();
        entries.filter(|e| e.rank == self.rank).for_each(|e| e.warm = warm);
    }

    /// Requests in its pool's queue that go before it.
    pub fn ahead(&self) -> usize {
        let pools = self.queues.lock();
        pools.get(&self.pool).map_or(0, |w| w.iter().filter(|e| e.rank < self.rank && !e.warm).count())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut pools = self.queues.lock();
        if let Some(waiting) = pools.get_mut(&self.pool) {
            let before = waiting.len();
            waiting.retain(|e| e.rank != self.rank);
            self.queues.total.fetch_sub(before - waiting.len(), Ordering::Relaxed);
            if waiting.is_empty() {
                pools.remove(&self.pool);
            }
        }
        drop(pools);
        self.queues.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max_waiting: u32, max_share: f64) -> QueueConfig {
        QueueConfig { max_waiting, max_share, ..QueueConfig::default() }
    }

    fn session(s: u64) -> Holder<'static> {
        Holder { session: Some(s), key: None }
    }

    #[test]
    fn priority_then_rounds_across_sessions_then_arrival() {
        let q = WaitQueues::new();
        let c = cfg(10, 1.0);
        let a1 = q.join("p", Priority::Standard, session(1), 10, false, &c).unwrap();
        let a2 = q.join("p", Priority::Standard, session(1), 10, false, &c).unwrap();
        let b1 = q.join("p", Priority::Standard, session(2), 10, false, &c).unwrap();
        // Session 2's first goes before session 1's second.
        assert_eq!((a1.ahead(), b1.ahead(), a2.ahead()), (0, 1, 2));
        // An interactive request goes before all of them; a batch one after.
        let i = q.join("p", Priority::Interactive, session(3), 10, false, &c).unwrap();
        assert_eq!((i.ahead(), a1.ahead(), a2.ahead()), (0, 1, 3));
        assert_eq!(q.ahead("p", Priority::Batch, session(9),), 4);
        assert_eq!(q.ahead("p", Priority::Interactive, session(9)), 1);
        assert_eq!(q.ahead("other", Priority::Batch, session(9)), 0);
        assert_eq!(q.depths(), [("p".to_string(), 4, 40)]);
        // Leaving moves the others up; an empty pool is forgotten.
        drop(i);
        drop(a1);
        assert_eq!((b1.ahead(), a2.ahead()), (0, 1));
        drop((a2, b1));
        assert!(q.depths().is_empty());
    }

    #[test]
    fn a_request_waiting_for_its_warm_node_is_not_ahead_of_later_ones() {
        let q = WaitQueues::new();
        let c = cfg(10, 1.0);
        let warm = q.join("p", Priority::Standard, session(1), 10, true, &c).unwrap();
        assert_eq!(q.ahead("p", Priority::Standard, session(2)), 0);
        let later = q.join("p", Priority::Standard, session(2), 10, false, &c).unwrap();
        // It still counts in the queue's depth.
        assert_eq!((warm.ahead(), later.ahead(), q.depths()[0].1), (0, 0, 2));
        // Waiting for any slot again, it is ahead of later requests again.
        warm.set_warm(false);
        assert_eq!((later.ahead(), q.ahead("p", Priority::Standard, session(3))), (1, 2));
    }

    #[test]
    fn bounded_per_pool_and_per_session_and_key() {
        let q = WaitQueues::new();
        let c = cfg(4, 0.5);
        let _a = q.join("p", Priority::Standard, session(1), 1, false, &c).unwrap();
        let _b = q.join("p", Priority::Standard, session(1), 1, false, &c).unwrap();
        assert_eq!(q.join("p", Priority::Standard, session(1), 1, false, &c).unwrap_err(), Refused::Share);
        let key = Holder { session: Some(2), key: Some("team-a") };
        let _c = q.join("p", Priority::Standard, key, 1, false, &c).unwrap();
        let same_key = Holder { session: Some(3), key: Some("team-a") };
        let _d = q.join("p", Priority::Standard, same_key, 1, false, &c).unwrap();
        assert_eq!(q.join("p", Priority::Standard, session(4), 1, false, &c).unwrap_err(), Refused::Full);
        assert!(
            q.join("other", Priority::Standard, session(1), 1, false, &c).is_ok(),
            "another pool's own bound"
        );
        q.drain();
        assert_eq!(
            q.join("other", Priority::Standard, session(5), 1, false, &c).unwrap_err(),
            Refused::Draining
        );
    }
}
