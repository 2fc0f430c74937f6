//! How each compared strategy is expressed as a variation of the router's config, so that the
//! real `route::plan` does the ordering in every case and nothing here re-implements planning.
//!
//! - `priority` (first seed document): the task's backends in configured order,
//!   `strategy: priority`. The fleet is planned *without headroom*: every vLLM node is shown to
//!   planning as freshly scraped and idle (and the router's own in-flight credit as zero), so
//!   a node is skipped only when its breaker is open; a saturated node is found out by its
//!   first-token deadline, as a plain failover balancer would.
//! - `weighted` (first seed document): `strategy: weighted` with the scenario's `weights`
//!   (equal when none), a fresh random seed per request (a new draw every request, as
//!   `Math.random` does), the fleet planned without headroom as above.
//! - `pid-chains` (third seed document): every backend of the task, the fleet included as one
//!   more provider without headroom signals, gets a PID availability from its outcomes
//!   (`control::availability`); `route::weights::weights` fills them in preference order and
//!   `route::chain::chain` draws the project's sticky chain for the affinity window (same key
//!   and window as `strategy: adaptive`). The task's backends are reordered to that chain and
//!   planned with `strategy: priority`, the fleet again without headroom.
//! - `spillway`: the router as configured for production: `strategy: adaptive` with live
//!   headroom (scraped signals through the real telemetry code, the router's in-flight
//!   credit), SLO spill, the failover reserve, PID availability of hosted backends, and
//!   affinity.
//!
//! Every strategy shares the same dispatch model (breakers, deadlines, retry budget, router
//! quotas) and the same node and provider models; only the plan differs.

use std::collections::BTreeMap;

use super::scenario::StrategyName;
use crate::config::{Strategy, TaskConfig};
use crate::fleet::headroom::NodeSignals;
use crate::route::availability::Availability;
use crate::route::{chain, weights};
use crate::snapshot::Snapshot;

/// Which backends a strategy's PID controller follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tracked {
    None,
    /// Hosted backends (what the router's availability loop tracks).
    Hosted,
    /// Every backend, the fleet as one more provider.
    All,
}

impl StrategyName {
    /// Does planning see the fleet's live signals and the router's own load?
    pub(crate) fn uses_headroom(self) -> bool {
        self == StrategyName::Spillway
    }

    pub(crate) fn tracked(self) -> Tracked {
        match self {
            StrategyName::Priority | StrategyName::Weighted => Tracked::None,
            StrategyName::PidChains => Tracked::All,
            StrategyName::Spillway => Tracked::Hosted,
        }
    }

    /// A fresh random seed per request (else the affinity hash, as the server does).
    pub(crate) fn random_seed(self) -> bool {
        self == StrategyName::Weighted
    }

    /// The task as this strategy configures it (before any per-request reordering).
    pub fn task(self, base: &TaskConfig, weights: &BTreeMap<String, f64>) -> TaskConfig {
        let mut task = base.clone();
        match self {
            StrategyName::Priority | StrategyName::PidChains => {
                task.strategy = Strategy::Priority;
                task.weights.clear();
            }
            StrategyName::Weighted => {
                task.strategy = Strategy::Weighted;
                task.weights = weights
                    .iter()
                    .filter(|(b, _)| task.backends.contains(b))
                    .map(|(b, w)| (b.clone(), *w))
                    .collect();
            }
            StrategyName::Spillway => {
                task.strategy = Strategy::Adaptive;
                task.weights.clear();
            }
        }
        task
    }
}

/// What an idle, just-scraped node looks like, for strategies that plan without headroom: no
/// queue, no load, and a first token predicted at once, so `admit` always says yes.
pub(crate) fn idle_signals(scraped_at: tokio::time::Instant) -> NodeSignals {
    NodeSignals {
        scraped_at: Some(scraped_at),
        running: Some(0.0),
        waiting: Some(0.0),
        prefill_tps: Some(1e15),
        itl_s: Some(0.0),
        ..NodeSignals::default()
    }
}

/// `pid-chains`: the task's backends reordered into `key`'s chain for `window`, from the
/// availabilities of the backends policy allows (in preference order). Backends policy refuses
/// keep their place at the end; planning drops them anyway.
pub(crate) fn pid_chain(
    task: &TaskConfig,
    snap: &Snapshot,
    availability: &Availability,
    key: &str,
    window: u64,
) -> Vec<String> {
    let Ok(allowed) = crate::policy::eligible(task, snap) else { return task.backends.clone() };
    let eligible: Vec<&String> = allowed.iter().map(|&i| &snap.backends[i].name).collect();
    let avail: Vec<f64> = eligible.iter().map(|b| availability.get(b)).collect();
    let w = weights::weights(&avail);
    let named: Vec<(&str, f64)> = eligible.iter().zip(&w).map(|(b, w)| (b.as_str(), *w)).collect();
    let mut order: Vec<String> =
        chain::chain(key, window, &named).into_iter().map(|i| eligible[i].clone()).collect();
    let rest: Vec<String> = task.backends.iter().filter(|b| !order.contains(b)).cloned().collect();
    order.extend(rest);
    order
}

/// The weights `pid-chains` and `spillway` would give the task's backends now, for charts.
pub(crate) fn current_weights(task: &TaskConfig, availability: &dyn Fn(&str) -> f64) -> Vec<(String, f64)> {
    let avail: Vec<f64> = task.backends.iter().map(|b| availability(b)).collect();
    task.backends.iter().cloned().zip(weights::weights(&avail)).collect()
}
