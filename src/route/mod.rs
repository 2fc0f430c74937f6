//! Planning: a pure function from (request facts, snapshot, now) to an ordered list of targets.
//!
//! No I/O, no awaits, no clock reads, no hidden randomness (a weighted draw uses the seed in
//! the request facts). The server, the tests and benchmarks all call [`plan`]. Dispatch walks
//! the result; it never reorders it.

pub mod snapshot;
mod strategy;

use tokio::time::Instant;

use crate::config::TaskConfig;
use crate::policy::{self, NoEligibleBackend};
pub use snapshot::{BackendView, BreakerView, NodeView, Snapshot};

/// What planning needs to know about one request.
#[derive(Debug, Clone)]
pub struct RequestFacts<'a> {
    pub task: &'a TaskConfig,
    /// Estimated prompt size, for cost ordering.
    pub prompt_tokens: u32,
    /// Output tokens the request may produce (after the task's cap).
    pub max_output_tokens: u32,
    /// Drives every random choice of this plan: same seed, same plan.
    pub seed: u64,
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
    /// Its breaker is open: last resort, after every healthy target.
    BreakerOpen,
}

/// One step of a plan: a node of a backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Index into `snapshot.backends`.
    pub backend: usize,
    /// Index into that backend's `nodes`.
    pub node: usize,
    pub reason: Reason,
}

/// The ordered targets for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub targets: Vec<Target>,
}

/// Order the backends a request may use.
pub fn plan(facts: &RequestFacts<'_>, snap: &Snapshot, _now: Instant) -> Result<Plan, NoEligibleBackend> {
    let eligible = policy::eligible(facts.task, snap)?;
    let ordered = strategy::order(facts, snap, &eligible);
    let mut healthy = Vec::new();
    let mut open = Vec::new();
    for (backend, reason) in ordered {
        let nodes = &snap.backends[backend].nodes;
        // Spread a pool's requests over its nodes: start at a node chosen by the seed.
        let start = if nodes.is_empty() { 0 } else { (facts.seed % nodes.len() as u64) as usize };
        for offset in 0..nodes.len() {
            let node = (start + offset) % nodes.len();
            match nodes[node].breaker {
                BreakerView::Open => open.push(Target { backend, node, reason: Reason::BreakerOpen }),
                _ => healthy.push(Target { backend, node, reason }),
            }
        }
    }
    healthy.extend(open);
    Ok(Plan { targets: healthy })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Strategy;
    use std::sync::Arc;

    fn snap() -> Snapshot {
        let config = crate::config::parse(include_str!("../../spillway.example.yaml")).unwrap();
        Snapshot::from_config(Arc::new(config))
    }

    fn names(snap: &Snapshot, plan: &Plan) -> Vec<String> {
        plan.targets.iter().map(|t| format!("{}#{}", snap.backends[t.backend].name, t.node)).collect()
    }

    fn facts(task: &TaskConfig, seed: u64) -> RequestFacts<'_> {
        RequestFacts { task, prompt_tokens: 1000, max_output_tokens: 400, seed }
    }

    #[test]
    fn priority_keeps_preference_and_spreads_over_nodes() {
        let snap = snap();
        let task = snap.config.task("summarise-ticket").unwrap();
        let p0 = plan(&facts(task, 0), &snap, Instant::now()).unwrap();
        let p1 = plan(&facts(task, 1), &snap, Instant::now()).unwrap();
        assert_eq!(names(&snap, &p0), ["local-llama#0", "local-llama#1", "anthropic#0", "openai#0"]);
        assert_eq!(names(&snap, &p1), ["local-llama#1", "local-llama#0", "anthropic#0", "openai#0"]);
        assert_eq!(p0.targets[2].reason, Reason::Preferred { rank: 1 });
    }

    #[test]
    fn open_breakers_go_last() {
        let snap = snap().with_breakers(|key| {
            if key.starts_with("anthropic/") || key.ends_with("10.0.0.5:8000/v1") {
                BreakerView::Open
            } else {
                BreakerView::Closed
            }
        });
        let task = snap.config.task("summarise-ticket").unwrap();
        let p = plan(&facts(task, 0), &snap, Instant::now()).unwrap();
        assert_eq!(names(&snap, &p), ["local-llama#1", "openai#0", "local-llama#0", "anthropic#0"]);
        assert_eq!(p.targets[3].reason, Reason::BreakerOpen);
    }

    #[test]
    fn cost_strategy_puts_the_cheapest_estimate_first() {
        let snap = snap();
        let mut task = snap.config.task("summarise-ticket").unwrap().clone();
        task.strategy = Strategy::Cost;
        task.backends = vec!["openai".into(), "anthropic".into()];
        let p = plan(&facts(&task, 0), &snap, Instant::now()).unwrap();
        // anthropic: 1000×3 + 400×15 = 9000 µ$; openai: 1000×5 + 400×20 = 13000 µ$.
        assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0"]);
        assert_eq!(p.targets[0].reason, Reason::Cheapest { estimated_usd: 0.009 });
        assert_eq!(p.targets[1].reason, Reason::Cheapest { estimated_usd: 0.013 });
    }

    #[test]
    fn weighted_draw_follows_weights_and_is_repeatable() {
        let snap = snap();
        let mut task = snap.config.task("summarise-ticket").unwrap().clone();
        task.strategy = Strategy::Weighted;
        task.backends = vec!["openai".into(), "anthropic".into()];
        task.weights = [("openai".to_string(), 3.0), ("anthropic".to_string(), 1.0)].into();
        let mut openai_first = 0;
        for seed in 0..4000 {
            let p = plan(&facts(&task, seed), &snap, Instant::now()).unwrap();
            assert_eq!(p, plan(&facts(&task, seed), &snap, Instant::now()).unwrap());
            assert_eq!(p.targets.len(), 2);
            if snap.backends[p.targets[0].backend].name == "openai" {
                openai_first += 1;
            }
        }
        let share = openai_first as f64 / 4000.0;
        assert!((share - 0.75).abs() < 0.03, "openai first in {share}");
    }

    #[test]
    fn policy_applies_before_ordering_even_when_local_nodes_are_down() {
        let snap = snap().with_breakers(|key| {
            if key.starts_with("local-llama/") {
                BreakerView::Open
            } else {
                BreakerView::Closed
            }
        });
        let task = snap.config.task("triage-restricted").unwrap();
        let p = plan(&facts(task, 0), &snap, Instant::now()).unwrap();
        assert!(p.targets.iter().all(|t| snap.backends[t.backend].name == "local-llama"));
        assert!(p.targets.iter().all(|t| t.reason == Reason::BreakerOpen));
    }
}
