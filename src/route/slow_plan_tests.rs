//! Planning with a hosted provider written off for slowness (`route::slowness`): it waits
//! after the local pool for the projects outside the pool's share, and only then.

use super::*;
use crate::canonical::NodeKey;
use crate::config::{Config, Strategy};
use crate::fleet::headroom::NodeSignals;
use crate::guard::node::NodeHandle;
use crate::snapshot::SnapshotInputs;
use std::collections::BTreeMap;
use std::sync::Arc;

fn config(after_fleet: bool) -> Arc<Config> {
    let mut c = crate::config::parse(include_str!("../../spillway.example.yaml")).unwrap();
    c.balancing.slow_signal.after_fleet = after_fleet;
    Arc::new(c)
}

/// Idle local nodes at sticky share 0.5; anthropic at this availability and slowness.
fn snap(now: Instant, config: Arc<Config>, anthropic: f64, slow: bool) -> Snapshot {
    let none = BTreeMap::new();
    let signals = |_: &NodeKey| {
        Some(NodeSignals {
            scraped_at: Some(now),
            running: Some(0.0),
            waiting: Some(0.0),
            ..NodeSignals::default()
        })
    };
    let availability = move |b: &str| if b == "anthropic" { anthropic } else { 1.0 };
    let slow = move |b: &str| b == "anthropic" && slow;
    let inputs = SnapshotInputs {
        discovered: &none,
        breaker: &|_| BreakerView::Closed,
        handle: &NodeHandle::detached,
        signals: &signals,
        quarantine: &|_| None,
        over_quota: &|_| false,
        availability: &availability,
        slow: &slow,
        share: &|_| 0.5,
    };
    Snapshot::build(config, &inputs, 2)
}

fn no_load(_: &NodeView) -> LoadView {
    LoadView::default()
}

fn names(snap: &Snapshot, plan: &Plan) -> Vec<String> {
    plan.targets.iter().map(|t| format!("{}#{}", snap.backends[t.backend].name, t.node)).collect()
}

fn plan_for(snap: &Snapshot, task: &TaskConfig, key: u64, now: Instant) -> Plan {
    let facts = RequestFacts {
        task,
        prompt_tokens: 1000,
        max_output_tokens: 400,
        seed: key,
        affinity: Some(key),
        window: 3,
        priority: Priority::Standard,
        load: &no_load,
        request: None,
        candidates: None,
        waits: None,
        cached: None,
    };
    plan(&facts, snap, now).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_provider_written_off_for_slowness_waits_after_the_pool_for_keys_outside_its_share() {
    let now = Instant::now();
    let on = config(true);
    let mut task = on.task("summarise-ticket").unwrap().clone();
    task.strategy = Strategy::Adaptive;
    // Availability 0.02 (below the 0.1 line: down), slow or not.
    let slow = snap(now, Arc::clone(&on), 0.02, true);
    let late_errors = snap(now, Arc::clone(&on), 0.02, false);
    let anthropic = slow.backend_id("anthropic").unwrap();
    assert!(slow.backends[anthropic.index()].down && slow.backends[anthropic.index()].slow);
    assert!(late_errors.backends[anthropic.index()].down && !late_errors.backends[anthropic.index()].slow);
    assert!(!slow.backends[0].slow, "a pool is never slow");
    // A key outside the share whose chain draws anthropic first at its weight: the fill of
    // [local 0 (the key keeps its hosted chain), 0.02, 1] is [0, 0.02, 0.98].
    let outside = |k: &u64| !sticky::takes_first(*k, "local-llama", 0.5);
    let key = (0..20_000u64)
        .filter(outside)
        .find(|&k| names(&late_errors, &plan_for(&late_errors, &task, k, now))[0] == "anthropic#0")
        .expect("about 1 key in 100 draws anthropic first");
    // Down for errors (a rate limit, an outage): it keeps its place in the chain.
    let p = plan_for(&late_errors, &task, key, now);
    assert_eq!(names(&late_errors, &p), ["anthropic#0", "openai#0", "local-llama#0", "local-llama#1"]);
    assert_eq!(p.targets[0].reason, Reason::Chain { weight: 0.02 });
    // Down and slow: after the pool, with the same reason.
    let p = plan_for(&slow, &task, key, now);
    assert_eq!(names(&slow, &p), ["openai#0", "local-llama#0", "local-llama#1", "anthropic#0"]);
    assert_eq!(p.targets[3].reason, Reason::Chain { weight: 0.02 });
    assert_eq!(p.targets[0].reason, Reason::Chain { weight: 0.98 });
    assert_eq!(p.spill_reason(), Some(SpillReason::Sticky));
    // Slow but not down (availability 0.5): it keeps its place.
    let slowish = snap(now, Arc::clone(&on), 0.5, true);
    let q = plan_for(&slowish, &task, key, now);
    let r = plan_for(&snap(now, Arc::clone(&on), 0.5, false), &task, key, now);
    assert_eq!(q.targets, r.targets);
    // `after_fleet: false`: it keeps its place.
    let off = snap(now, config(false), 0.02, true);
    assert_eq!(names(&off, &plan_for(&off, &task, key, now))[0], "anthropic#0");
    // Keys in the share plan the same either way (the fleet first, then the chain).
    for k in (0..200u64).filter(|k| !outside(k)) {
        let (a, b) = (plan_for(&slow, &task, k, now), plan_for(&late_errors, &task, k, now));
        assert_eq!(a.targets, b.targets, "key {k}");
        assert!(names(&slow, &a)[0].starts_with("local-llama"), "key {k}");
    }
    // Other strategies are not affected: priority keeps the configured order.
    task.strategy = Strategy::Priority;
    let p = plan_for(&slow, &task, key, now);
    assert_eq!(names(&slow, &p), ["local-llama#0", "local-llama#1", "anthropic#0", "openai#0"]);
}
