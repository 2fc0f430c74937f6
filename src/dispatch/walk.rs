//! The walk over a plan as a pure state machine: which target is called next, which are
//! skipped and why, when the walk stops, how long to back off before a call, and what a
//! failure before the first token means (for the request, and for the node's breaker and its
//! `Retry-After` hold). [`Dispatcher::dispatch`](super::Dispatcher) drives
//! it with the live guards and a real upstream; the simulator drives it on virtual time with
//! modelled ones, so both walk a plan exactly the same way.
//!
//! The guards are asked in one order for each target: the node's slot and breaker permit
//! ([`Guards::take_node`]), the retry budget for every call after the first, then the
//! backend's quota. Only the quota may wait (a shared counter); the simulator's answers at
//! once.

use std::future::Future;
use std::time::Duration;

use rand::Rng;

use crate::canonical::ErrorClass;
use crate::config::{BackendId, DispatchConfig};
use crate::outcome::Skip;
use crate::route::Target;

/// What the walk asks before it calls a target. `Node` is what an admitted call holds on its
/// node (slot, breaker permit) and `Charge` what it took from the quota; both are handed back
/// through [`Guards::release`] when a later guard refuses.
pub trait Guards {
    type Node;
    type Charge;
    /// The node's slot and its breaker's permit, or why not.
    fn take_node(&mut self, target: &Target) -> Result<Self::Node, Skip>;
    /// One retry from the budget (asked for every call after the first).
    fn withdraw_retry(&mut self) -> bool;
    /// Charge the backend's quota, or why not.
    fn take_quota(&mut self, target: &Target) -> impl Future<Output = Result<Self::Charge, Skip>> + Send;
    /// A later guard refused: give the node back unused.
    fn release(&mut self, node: Self::Node);
    /// The call on `node` failed before its first token: feed its breaker when the failure
    /// counts against the backend (else give the permit back), and hold the node for as long
    /// as the upstream asked (`Retry-After`).
    fn failed(&mut self, node: Self::Node, counts_against_backend: bool, retry_after: Option<Duration>);
    /// `target` is passed over (or, for [`Skip::MaxAttempts`] and [`Skip::RetryBudget`], the
    /// walk ends at it).
    fn skipped(&mut self, target: &Target, why: Skip);
}

/// Why the walk ended without a first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every target was called or skipped.
    Exhausted,
    /// `max_attempts` calls were made.
    MaxAttempts,
    /// The retry budget refused another call.
    RetryBudget,
}

/// What a failure before the first token means for the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try the next target.
    FailOver,
    /// The request itself is refused (a client mistake): no other backend would do better.
    Reject,
}

/// A call the guards admitted.
pub struct Admitted<N, C> {
    pub target: Target,
    pub node: N,
    pub charge: C,
    /// Wait this long before the call; see [`Backoff::draw`].
    pub backoff: Backoff,
    /// The backend of the previous failed call and how it failed: this call fails
    /// over from it.
    pub failover_from: Option<(BackendId, ErrorClass)>,
}

/// The jittered wait before a call to a target of the same class (local or hosted) as the
/// one that just failed: uniform in zero to `base × 2^retries`, capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub cap_ms: u64,
}

impl Backoff {
    pub fn draw(self, rng: &mut impl Rng) -> Duration {
        if self.cap_ms == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(rng.gen_range(0..=self.cap_ms))
    }
}

/// One request's walk.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// The plan's targets, each with whether its backend is local.
    targets: Vec<(Target, bool)>,
    next: usize,
    calls: u32,
    max_attempts: u32,
    backoff_base_ms: u64,
    backoff_max_ms: u64,
    last_local: Option<bool>,
    retries_in_class: u32,
    last_failure: Option<(BackendId, ErrorClass)>,
    /// The backend of the target called last, and whether it is local.
    current: (BackendId, bool),
}

impl Walk {
    pub fn new(targets: impl IntoIterator<Item = (Target, bool)>, cfg: &DispatchConfig) -> Walk {
        Walk {
            targets: targets.into_iter().collect(),
            max_attempts: cfg.max_attempts,
            backoff_base_ms: cfg.backoff_base_ms,
            backoff_max_ms: cfg.backoff_max_ms,
            ..Walk::default()
        }
    }

    /// Upstream calls made so far.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// The next call the guards admit, or why the walk ends.
    pub async fn next<G: Guards>(&mut self, guards: &mut G) -> Result<Admitted<G::Node, G::Charge>, Stop> {
        loop {
            let Some((target, local)) = self.targets.get(self.next).cloned() else {
                return Err(Stop::Exhausted);
            };
            self.next += 1;
            if self.calls >= self.max_attempts {
                guards.skipped(&target, Skip::MaxAttempts);
                return Err(Stop::MaxAttempts);
            }
            let node = match guards.take_node(&target) {
                Ok(node) => node,
                Err(why) => {
                    guards.skipped(&target, why);
                    continue;
                }
            };
            if self.calls > 0 && !guards.withdraw_retry() {
                guards.release(node);
                guards.skipped(&target, Skip::RetryBudget);
                return Err(Stop::RetryBudget);
            }
            let charge = match guards.take_quota(&target).await {
                Ok(charge) => charge,
                Err(why) => {
                    guards.release(node);
                    guards.skipped(&target, why);
                    continue;
                }
            };
            let mut backoff = Backoff { cap_ms: 0 };
            if self.last_local == Some(local) {
                let exp = self.backoff_base_ms.saturating_mul(1 << self.retries_in_class.min(16));
                backoff.cap_ms = exp.min(self.backoff_max_ms);
                self.retries_in_class += 1;
            }
            self.calls += 1;
            self.current = (target.backend, local);
            let failover_from = self.last_failure.take();
            return Ok(Admitted { target, node, charge, backoff, failover_from });
        }
    }

    /// The call last admitted, on `node`, failed before its first token with `class` (and the
    /// upstream's `Retry-After`, if it sent one).
    pub fn failed<G: Guards>(
        &mut self,
        guards: &mut G,
        node: G::Node,
        class: ErrorClass,
        retry_after: Option<Duration>,
    ) -> AfterFailure {
        guards.failed(node, class.counts_against_backend(), retry_after);
        if !class.may_fail_over() {
            return AfterFailure::Reject;
        }
        let (backend, local) = self.current;
        self.last_local = Some(local);
        self.last_failure = Some((backend, class));
        AfterFailure::FailOver
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Reason;
    use futures::FutureExt;

    /// Guards that answer from fixed sets, and log what the walk asked.
    #[derive(Default)]
    struct Scripted {
        full: Vec<usize>,
        over_quota: Vec<usize>,
        retries: u32,
        log: Vec<String>,
    }

    impl Guards for Scripted {
        type Node = usize;
        type Charge = ();
        fn take_node(&mut self, t: &Target) -> Result<usize, Skip> {
            if self.full.contains(&t.backend.index()) {
                return Err(Skip::NodeFull);
            }
            self.log.push(format!("node {}", t.backend.index()));
            Ok(t.backend.index())
        }
        fn withdraw_retry(&mut self) -> bool {
            let ok = self.retries > 0;
            self.retries = self.retries.saturating_sub(1);
            ok
        }
        fn take_quota(&mut self, t: &Target) -> impl Future<Output = Result<(), Skip>> + Send {
            let over = self.over_quota.contains(&t.backend.index());
            std::future::ready(if over { Err(Skip::OverQuota) } else { Ok(()) })
        }
        fn release(&mut self, node: usize) {
            self.log.push(format!("release {node}"));
        }
        fn failed(&mut self, node: usize, counts: bool, retry_after: Option<Duration>) {
            self.log.push(format!("failed {node} counts={counts} hold={retry_after:?}"));
        }
        fn skipped(&mut self, t: &Target, why: Skip) {
            self.log.push(format!("skip {} {}", t.backend.index(), why.as_str()));
        }
    }

    fn walk(local: &[bool], max_attempts: u32) -> Walk {
        let cfg =
            DispatchConfig { max_attempts, backoff_base_ms: 10, backoff_max_ms: 25, ..Default::default() };
        let targets = local.iter().enumerate().map(|(backend, &l)| {
            (
                Target {
                    backend: BackendId::new(backend),
                    node: 0,
                    reason: Reason::Preferred { rank: backend },
                },
                l,
            )
        });
        Walk::new(targets, &cfg)
    }

    fn next(w: &mut Walk, g: &mut Scripted) -> Result<Admitted<usize, ()>, Stop> {
        w.next(g).now_or_never().expect("scripted guards never wait")
    }

    #[test]
    fn skips_full_and_over_quota_targets_and_gives_back_the_node() {
        let mut w = walk(&[true, true, false, false], 5);
        let mut g = Scripted { full: vec![0], over_quota: vec![1], ..Default::default() };
        let a = next(&mut w, &mut g).unwrap();
        assert_eq!((a.target.backend.index(), a.backoff.cap_ms, a.failover_from), (2, 0, None));
        assert_eq!(g.log, ["skip 0 node_full", "node 1", "release 1", "skip 1 over_quota", "node 2"]);
        assert_eq!(w.calls(), 1);
    }

    /// Call the next target and fail it with `class`.
    fn fail_next(w: &mut Walk, g: &mut Scripted, class: ErrorClass) -> (Admitted<usize, ()>, AfterFailure) {
        let a = next(w, g).unwrap();
        let after = w.failed(g, a.node, class, None);
        (a, after)
    }

    #[test]
    fn a_failure_fails_over_with_backoff_within_its_class_only() {
        let mut w = walk(&[true, true, false, false], 5);
        let mut g = Scripted { retries: 10, ..Default::default() };
        assert_eq!(fail_next(&mut w, &mut g, ErrorClass::Overloaded).1, AfterFailure::FailOver);
        // Local after local: backoff, capped at base × 2^0.
        let (b, _) = fail_next(&mut w, &mut g, ErrorClass::Timeout);
        assert_eq!((b.target.backend.index(), b.backoff.cap_ms), (1, 10));
        assert_eq!(b.failover_from, Some((BackendId::new(0), ErrorClass::Overloaded)));
        // Hosted after local: no backoff.
        let (c, _) = fail_next(&mut w, &mut g, ErrorClass::Connect);
        assert_eq!((c.target.backend.index(), c.backoff.cap_ms), (2, 0));
        // Hosted after hosted: the second retry of its class, capped at the maximum.
        let (d, _) = fail_next(&mut w, &mut g, ErrorClass::Connect);
        assert_eq!((d.target.backend.index(), d.backoff.cap_ms), (3, 20));
        assert_eq!(next(&mut w, &mut g).err(), Some(Stop::Exhausted));
        assert_eq!(w.calls(), 4);
    }

    #[test]
    fn a_failure_feeds_the_breaker_only_when_it_is_the_backends_and_holds_for_retry_after() {
        let mut w = walk(&[false, false, false], 5);
        let mut g = Scripted { retries: 10, ..Default::default() };
        let a = next(&mut w, &mut g).unwrap();
        let hold = Some(Duration::from_secs(7));
        assert_eq!(w.failed(&mut g, a.node, ErrorClass::RateLimited, hold), AfterFailure::FailOver);
        let b = next(&mut w, &mut g).unwrap();
        assert_eq!(w.failed(&mut g, b.node, ErrorClass::InvalidRequest, None), AfterFailure::Reject);
        let failed: Vec<&String> = g.log.iter().filter(|l| l.starts_with("failed")).collect();
        assert_eq!(failed, ["failed 0 counts=true hold=Some(7s)", "failed 1 counts=false hold=None"]);
    }

    #[test]
    fn a_client_mistake_is_rejected_and_limits_end_the_walk() {
        let mut w = walk(&[false, false, false], 5);
        let mut g = Scripted { retries: 10, ..Default::default() };
        assert_eq!(fail_next(&mut w, &mut g, ErrorClass::InvalidRequest).1, AfterFailure::Reject);

        let mut w = walk(&[false, false, false], 1);
        fail_next(&mut w, &mut g, ErrorClass::Overloaded);
        g.log.clear();
        assert_eq!(next(&mut w, &mut g).err(), Some(Stop::MaxAttempts));
        assert_eq!(g.log, ["skip 1 max_attempts"]);

        let mut w = walk(&[false, false, false], 5);
        let mut g = Scripted { retries: 0, ..Default::default() };
        fail_next(&mut w, &mut g, ErrorClass::Overloaded);
        g.log.clear();
        assert_eq!(next(&mut w, &mut g).err(), Some(Stop::RetryBudget));
        assert_eq!(g.log, ["node 1", "release 1", "skip 1 retry_budget_exhausted"]);
    }

    #[test]
    fn the_backoff_draw_stays_within_its_cap() {
        let mut rng = rand::thread_rng();
        assert_eq!(Backoff { cap_ms: 0 }.draw(&mut rng), Duration::ZERO);
        for _ in 0..100 {
            assert!(Backoff { cap_ms: 7 }.draw(&mut rng) <= Duration::from_millis(7));
        }
    }
}
