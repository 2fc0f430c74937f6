//! Circuit breakers, one per node (backend, model and endpoint).
//!
//! Closed → open after `consecutive_failures` failures in a row, or when the failure share over
//! the window reaches `error_rate` with at least `min_requests`; open → half-open after
//! `open_secs`, letting exactly one probe through; the probe's success closes it, its failure
//! opens it again. Time is always passed in, so tests run exactly under paused tokio time.
//! Only failures that count against a backend (see `ErrorClass`) are recorded here.
//!
//! An upstream's `Retry-After` holds the node's breaker: no call before that time (capped at
//! [`RETRY_AFTER_CAP`]), whatever the state machine says: the floor on how long it stays open.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::canonical::NodeKey;
use crate::config::BreakerConfig;

/// A breaker's state as planning sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakerView {
    #[default]
    Closed,
    /// Failing: planning puts the node last; dispatch will not send to it.
    Open,
    /// One probe may go through.
    HalfOpen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// The longest an upstream's `Retry-After` holds a node.
pub(crate) const RETRY_AFTER_CAP: Duration = Duration::from_secs(300);

/// One breaker's state machine.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    state: State,
    /// No call before this: the upstream asked (`Retry-After`).
    not_before: Option<Instant>,
    consecutive_failures: u32,
    /// Per-second buckets of (second, successes, failures) within the window.
    window: VecDeque<(u64, u32, u32)>,
    origin: Instant,
}

impl Breaker {
    pub fn new(now: Instant) -> Self {
        Breaker {
            state: State::Closed,
            not_before: None,
            consecutive_failures: 0,
            window: VecDeque::new(),
            origin: now,
        }
    }

    /// How much longer the upstream's `Retry-After` holds this node, if it does.
    pub fn held_for(&self, now: Instant) -> Option<Duration> {
        self.not_before.filter(|t| *t > now).map(|t| t - now)
    }

    /// Hold the node for `retry_after` (capped at [`RETRY_AFTER_CAP`]) from `now`; a longer
    /// hold already in place stays.
    pub fn hold(&mut self, now: Instant, retry_after: Duration) {
        let until = now + retry_after.min(RETRY_AFTER_CAP);
        self.not_before = Some(self.not_before.map_or(until, |t| t.max(until)));
    }

    pub fn view(&self, now: Instant) -> BreakerView {
        if self.held_for(now).is_some() {
            return BreakerView::Open;
        }
        match self.state {
            State::Closed => BreakerView::Closed,
            State::Open { until } if now >= until => BreakerView::HalfOpen,
            State::Open { .. } => BreakerView::Open,
            State::HalfOpen { .. } => BreakerView::HalfOpen,
        }
    }

    /// May a request go through now? In half-open, only the first caller gets through.
    pub fn try_acquire(&mut self, now: Instant) -> bool {
        if self.held_for(now).is_some() {
            return false;
        }
        match self.state {
            State::Closed => true,
            State::Open { until } if now >= until => {
                self.state = State::HalfOpen { probing: true };
                true
            }
            State::Open { .. } => false,
            State::HalfOpen { probing: false } => {
                self.state = State::HalfOpen { probing: true };
                true
            }
            State::HalfOpen { probing: true } => false,
        }
    }

    /// The node answers again after it could not be reached (its metrics page reads again):
    /// an open breaker lets its probe through now rather than after the rest of `open_secs`.
    pub(crate) fn node_back(&mut self, now: Instant) {
        if let State::Open { until } = &mut self.state {
            *until = (*until).min(now);
        }
    }

    /// A permit ended without a verdict (the client went away): free the probe slot.
    pub fn release(&mut self) {
        if self.state == (State::HalfOpen { probing: true }) {
            self.state = State::HalfOpen { probing: false };
        }
    }

    pub(crate) fn on_success(&mut self, now: Instant, cfg: &BreakerConfig) {
        self.count(now, cfg, false);
        self.consecutive_failures = 0;
        if matches!(self.state, State::HalfOpen { .. }) {
            self.state = State::Closed;
            self.window.clear();
        }
    }

    pub(crate) fn on_failure(&mut self, now: Instant, cfg: &BreakerConfig) {
        self.count(now, cfg, true);
        self.consecutive_failures += 1;
        let open = match self.state {
            State::HalfOpen { .. } => true,
            State::Open { .. } => false,
            State::Closed => {
                let (ok, failed) =
                    self.window.iter().fold((0u32, 0u32), |(s, f), (_, bs, bf)| (s + bs, f + bf));
                let total = ok + failed;
                self.consecutive_failures >= cfg.consecutive_failures
                    || (total >= cfg.min_requests && f64::from(failed) / f64::from(total) >= cfg.error_rate)
            }
        };
        if open {
            self.state = State::Open { until: now + Duration::from_secs(cfg.open_secs) };
            self.window.clear();
        }
    }

    fn count(&mut self, now: Instant, cfg: &BreakerConfig, failed: bool) {
        let second = now.duration_since(self.origin).as_secs();
        while self.window.front().is_some_and(|(s, _, _)| s + cfg.window_secs <= second) {
            self.window.pop_front();
        }
        match self.window.back_mut() {
            Some((s, ok, bad)) if *s == second => {
                if failed {
                    *bad += 1
                } else {
                    *ok += 1
                }
            }
            _ => self.window.push_back((second, u32::from(!failed), u32::from(failed))),
        }
    }
}

/// Every node's breaker, by node key: what the snapshot loop reads (views) and the admin API
/// forces. Dispatch reaches a node's breaker through the handle the snapshot holds
/// ([`NodeBreaker`], see `guard::node`), not through this map.
#[derive(Debug)]
pub struct BreakerBoard {
    cfg: Arc<BreakerConfig>,
    breakers: Mutex<HashMap<NodeKey, Arc<NodeBreaker>>>,
}

/// An operator's override of a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forced {
    Open,
    Closed,
}

/// One node's breaker: its state machine and an operator's override. While forced, the state
/// machine still counts outcomes but its verdict is overridden.
#[derive(Debug)]
pub struct NodeBreaker {
    cfg: Arc<BreakerConfig>,
    state: Mutex<Breaker>,
    forced: Mutex<Option<Forced>>,
}

impl NodeBreaker {
    /// A closed breaker of its own (the board makes the shared ones).
    pub fn new(cfg: Arc<BreakerConfig>) -> Arc<NodeBreaker> {
        Arc::new(NodeBreaker {
            cfg,
            state: Mutex::new(Breaker::new(Instant::now())),
            forced: Mutex::new(None),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Breaker) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn forced(&self) -> Option<Forced> {
        *self.forced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for one call to the node, or `None` while its breaker is open.
    pub fn try_acquire(self: &Arc<Self>, now: Instant) -> Option<BreakerPermit> {
        let allowed = match self.forced() {
            Some(Forced::Open) => false,
            Some(Forced::Closed) => true,
            None => self.with(|b| b.try_acquire(now)),
        };
        allowed.then(|| BreakerPermit { breaker: Arc::clone(self), done: false })
    }

    /// The upstream answered `Retry-After`: no call to the node before then.
    pub fn hold(&self, now: Instant, retry_after: Duration) {
        self.with(|b| b.hold(now, retry_after));
    }

    /// How much longer a `Retry-After` holds the node, if it does.
    pub fn held_for(&self, now: Instant) -> Option<Duration> {
        self.with(|b| b.held_for(now))
    }

    /// See [`Breaker::node_back`].
    pub(crate) fn node_back(&self, now: Instant) {
        self.with(|b| b.node_back(now));
    }

    pub fn view(&self, now: Instant) -> BreakerView {
        match self.forced() {
            Some(Forced::Open) => BreakerView::Open,
            Some(Forced::Closed) => BreakerView::Closed,
            None => self.with(|b| b.view(now)),
        }
    }
}

impl BreakerBoard {
    pub fn new(cfg: BreakerConfig) -> Arc<Self> {
        Arc::new(BreakerBoard { cfg: Arc::new(cfg), breakers: Mutex::new(HashMap::new()) })
    }

    /// The node's breaker (a closed one the first time the node is met).
    pub fn node(&self, key: &NodeKey) -> Arc<NodeBreaker> {
        let mut map = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(breaker) = map.get(key) {
            return Arc::clone(breaker);
        }
        let breaker = NodeBreaker::new(Arc::clone(&self.cfg));
        map.insert(key.clone(), Arc::clone(&breaker));
        breaker
    }

    fn existing(&self, key: &str) -> Option<Arc<NodeBreaker>> {
        self.breakers.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    /// Force the node's breaker open or closed, or (`None`) hand it back to its state machine.
    pub fn force(&self, key: &str, forced: Option<Forced>) {
        let breaker = self.node(&NodeKey::from(key));
        *breaker.forced.lock().unwrap_or_else(|e| e.into_inner()) = forced;
    }

    /// Force exactly the breakers in `forced`; every other breaker goes back to its state
    /// machine (the shared state as read from the store).
    pub(crate) fn force_all(&self, forced: &std::collections::BTreeMap<NodeKey, Forced>) {
        for key in forced.keys() {
            self.node(key);
        }
        let map = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        for (key, breaker) in map.iter() {
            *breaker.forced.lock().unwrap_or_else(|e| e.into_inner()) = forced.get(key).copied();
        }
    }

    pub fn forced(&self, key: &str) -> Option<Forced> {
        self.existing(key).and_then(|b| b.forced())
    }

    /// A permit for one call to the node, or `None` while its breaker is open.
    pub fn try_acquire(&self, key: &str, now: Instant) -> Option<BreakerPermit> {
        self.node(&NodeKey::from(key)).try_acquire(now)
    }

    /// The upstream answered `Retry-After`: no call to the node before then.
    pub fn hold(&self, key: &str, now: Instant, retry_after: Duration) {
        self.node(&NodeKey::from(key)).hold(now, retry_after);
    }

    /// How much longer a `Retry-After` holds the node, if it does.
    pub fn held_for(&self, key: &str, now: Instant) -> Option<Duration> {
        self.existing(key).and_then(|b| b.held_for(now))
    }

    pub fn view(&self, key: &str, now: Instant) -> BreakerView {
        self.existing(key).map_or(BreakerView::Closed, |b| b.view(now))
    }
}

/// The right to make one call; report how it went, or drop it to give the slot back.
#[derive(Debug)]
pub struct BreakerPermit {
    breaker: Arc<NodeBreaker>,
    done: bool,
}

impl BreakerPermit {
    /// The upstream answered `Retry-After`: no call to the node before then.
    pub fn hold(&self, now: Instant, retry_after: Duration) {
        self.breaker.hold(now, retry_after);
    }

    pub fn success(mut self, now: Instant) {
        self.done = true;
        let cfg = Arc::clone(&self.breaker.cfg);
        self.breaker.with(|b| b.on_success(now, &cfg));
    }

    pub fn failure(mut self, now: Instant) {
        self.done = true;
        let cfg = Arc::clone(&self.breaker.cfg);
        self.breaker.with(|b| b.on_failure(now, &cfg));
    }
}

impl Drop for BreakerPermit {
    fn drop(&mut self) {
        if !self.done {
            self.breaker.with(|b| b.release());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: 3,
            error_rate: 0.5,
            min_requests: 10,
            window_secs: 10,
            open_secs: 5,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_then_probes_once_and_recovers() {
        let board = BreakerBoard::new(cfg());
        let t0 = Instant::now();
        for _ in 0..3 {
            board.try_acquire("n", t0).unwrap().failure(t0);
        }
        assert_eq!(board.view("n", t0), BreakerView::Open);
        assert!(board.try_acquire("n", t0 + Duration::from_millis(4999)).is_none());
        let t5 = t0 + Duration::from_secs(5);
        assert_eq!(board.view("n", t5), BreakerView::HalfOpen);
        let probe = board.try_acquire("n", t5).expect("one probe");
        assert!(board.try_acquire("n", t5).is_none(), "only one probe at a time");
        probe.success(t5);
        assert_eq!(board.view("n", t5), BreakerView::Closed);
        assert!(board.try_acquire("n", t5).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_back_after_being_unreachable_is_probed_at_once() {
        let board = BreakerBoard::new(cfg());
        let t0 = Instant::now();
        board.node(&NodeKey::from("n")).node_back(t0);
        assert_eq!(board.view("n", t0), BreakerView::Closed, "a closed breaker stays closed");
        for _ in 0..3 {
            board.try_acquire("n", t0).unwrap().failure(t0);
        }
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(board.view("n", t1), BreakerView::Open);
        board.node(&NodeKey::from("n")).node_back(t1);
        assert_eq!(board.view("n", t1), BreakerView::HalfOpen, "not 4 s more");
        let probe = board.try_acquire("n", t1).expect("one probe");
        assert!(board.try_acquire("n", t1).is_none(), "still one at a time");
        probe.success(t1);
        assert_eq!(board.view("n", t1), BreakerView::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probe_reopens_and_dropped_probe_frees_the_slot() {
        let board = BreakerBoard::new(cfg());
        let t0 = Instant::now();
        for _ in 0..3 {
            board.try_acquire("n", t0).unwrap().failure(t0);
        }
        let t5 = t0 + Duration::from_secs(5);
        drop(board.try_acquire("n", t5).unwrap());
        let probe = board.try_acquire("n", t5).expect("slot freed by drop");
        probe.failure(t5);
        assert_eq!(board.view("n", t5 + Duration::from_secs(4)), BreakerView::Open);
        assert_eq!(board.view("n", t5 + Duration::from_secs(5)), BreakerView::HalfOpen);
    }

    #[tokio::test(start_paused = true)]
    async fn opens_on_error_rate_without_a_streak() {
        let board = BreakerBoard::new(cfg());
        let t0 = Instant::now();
        // ok, fail, ok, fail, ...: never 3 in a row, but half of 10 fail.
        for i in 0..10 {
            let p = board.try_acquire("n", t0).unwrap();
            if i % 2 == 0 {
                p.success(t0)
            } else {
                p.failure(t0)
            }
        }
        assert_eq!(board.view("n", t0), BreakerView::Open);
        // Old outcomes leave the window: the same pattern spread over time stays closed.
        let other = BreakerBoard::new(cfg());
        for i in 0..20u64 {
            let t = t0 + Duration::from_secs(i * 2);
            let p = other.try_acquire("m", t).unwrap();
            if i % 2 == 0 {
                p.success(t)
            } else {
                p.failure(t)
            }
        }
        assert_eq!(other.view("m", t0 + Duration::from_secs(40)), BreakerView::Closed);
    }

    #[test]
    fn an_operator_can_force_a_breaker_either_way() {
        let board = BreakerBoard::new(cfg());
        let now = Instant::now();
        board.force("n", Some(Forced::Open));
        assert_eq!(board.view("n", now), BreakerView::Open);
        assert!(board.try_acquire("n", now).is_none());
        for _ in 0..10 {
            board.force("m", Some(Forced::Closed));
            board.try_acquire("m", now).unwrap().failure(now);
        }
        assert_eq!(board.view("m", now), BreakerView::Closed, "forced closed despite failures");
        board.force("m", None);
        assert_eq!(board.view("m", now), BreakerView::Open, "back to its own state machine");
        board.force("n", None);
        assert_eq!(board.view("n", now), BreakerView::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_holds_the_node_and_floors_the_open_time() {
        let board = BreakerBoard::new(cfg());
        let t0 = Instant::now();
        board.hold("n", t0, Duration::from_secs(30));
        assert!(board.try_acquire("n", t0 + Duration::from_secs(29)).is_none(), "held");
        assert_eq!(board.view("n", t0 + Duration::from_secs(29)), BreakerView::Open);
        assert_eq!(board.held_for("n", t0 + Duration::from_secs(20)), Some(Duration::from_secs(10)));
        // A shorter hold does not cut a longer one.
        board.hold("n", t0, Duration::from_secs(5));
        assert!(board.try_acquire("n", t0 + Duration::from_secs(10)).is_none());
        assert!(board.try_acquire("n", t0 + Duration::from_secs(30)).is_some(), "the hold is over");

        // Failures that open the breaker with a hold longer than open_secs: open for the hold,
        // then one probe.
        let board = BreakerBoard::new(cfg());
        for _ in 0..3 {
            board.try_acquire("m", t0).unwrap().failure(t0);
        }
        board.hold("m", t0, Duration::from_secs(30));
        let after_open_secs = t0 + Duration::from_secs(10);
        assert_eq!(board.view("m", after_open_secs), BreakerView::Open);
        assert!(board.try_acquire("m", after_open_secs).is_none());
        let t30 = t0 + Duration::from_secs(30);
        assert_eq!(board.view("m", t30), BreakerView::HalfOpen);
        let _probe = board.try_acquire("m", t30).unwrap();
        assert!(board.try_acquire("m", t30).is_none(), "one probe at a time");

        // Holds are capped.
        let board = BreakerBoard::new(cfg());
        board.hold("c", t0, Duration::from_secs(86_400));
        assert_eq!(board.held_for("c", t0), Some(RETRY_AFTER_CAP));
    }
}
