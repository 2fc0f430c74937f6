use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::canonical::NodeKey;
use crate::config::{Priority, TaskConfig};
use crate::fleet::headroom::{NodeSignals, SpillReason};
use crate::fleet::load::LoadView;
use crate::guard::node::NodeHandle;
use crate::route::{plan, Plan, Spill};
use crate::snapshot::{NodeView, SnapshotInputs};

/// `pool` (two nodes, unread unless a test says otherwise), `other` (one node), `hosted`.
const YAML: &str = r#"
backends:
  - name: pool
    kind: vllm
    endpoints: ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    model: m
    max_running: 4
    reserve: 0.5
  - {name: capped, kind: vllm, endpoints: ["http://10.0.2.1:8000"], model: m, max_running: 4, max_inflight_per_node: 3}
  - {name: other, kind: vllm, endpoints: ["http://10.0.1.1:8000"], model: m}
  - {name: hosted, kind: openai, model: gpt}
tasks:
  - {name: alone, backends: [pool], slo: {ttft_ms: 1000}}
  - {name: capped, backends: [capped], slo: {ttft_ms: 1000}}
  - {name: spill, backends: [pool, hosted], strategy: priority, slo: {ttft_ms: 1000}}
  - {name: pools, backends: [other, pool], slo: {ttft_ms: 1000}}
"#;

/// What the control loops know: nodes (by a part of their key) with a fresh scrape of
/// `running` sequences, nodes whose breaker is open, quarantined nodes, hosted over quota.
#[derive(Default)]
struct World {
    fresh: Vec<(&'static str, f64)>,
    open: Vec<&'static str>,
    quarantined: Vec<&'static str>,
    over_quota: bool,
}

impl World {
    fn snap(&self, now: Instant) -> Snapshot {
        let config = Arc::new(crate::config::parse(YAML).unwrap());
        let none = BTreeMap::new();
        let signals = |key: &NodeKey| {
            self.fresh.iter().find(|(part, _)| key.contains(part)).map(|&(_, running)| NodeSignals {
                scraped_at: Some(now),
                running: Some(running),
                waiting: Some(0.0),
                ..NodeSignals::default()
            })
        };
        let breaker = |key: &NodeKey| match self.open.iter().any(|part| key.contains(part)) {
            true => BreakerView::Open,
            false => BreakerView::Closed,
        };
        let quarantine = |key: &NodeKey| {
            self.quarantined.iter().any(|part| key.contains(part)).then(|| "weights differ".to_string())
        };
        let inputs = SnapshotInputs {
            discovered: &none,
            breaker: &breaker,
            handle: &NodeHandle::detached,
            signals: &signals,
            quarantine: &quarantine,
            over_quota: &|_| self.over_quota,
            availability: &|_| 1.0,
            slow: &|_| false,
            share: &|_| 1.0,
        };
        Snapshot::build(config, &inputs, 1)
    }
}

fn idle(_: &NodeView) -> LoadView {
    LoadView::default()
}

fn facts<'a>(task: &'a TaskConfig, seed: u64, load: &'a dyn Fn(&NodeView) -> LoadView) -> RequestFacts<'a> {
    RequestFacts {
        task,
        prompt_tokens: 100,
        max_output_tokens: 100,
        seed,
        affinity: None,
        window: 0,
        priority: Priority::Standard,
        load,
        request: None,
        candidates: None,
        waits: None,
        cached: None,
    }
}

fn plan_for(
    snap: &Snapshot,
    task: &str,
    seed: u64,
    load: &dyn Fn(&NodeView) -> LoadView,
    now: Instant,
) -> Plan {
    plan(&facts(snap.config.task(task).unwrap(), seed, load), snap, now).unwrap()
}

fn names(snap: &Snapshot, plan: &Plan) -> Vec<String> {
    plan.targets.iter().map(|t| format!("{}#{}", snap.backends[t.backend].name, t.node)).collect()
}

fn blind(in_flight: u32, capacity: u32) -> Reason {
    Reason::Unmeasured { in_flight, capacity }
}

/// The router's own requests in flight, by a part of the node's key.
fn in_flight(counts: &'static [(&'static str, u64)]) -> impl Fn(&NodeView) -> LoadView {
    move |node: &NodeView| LoadView {
        in_flight: counts.iter().find(|(part, _)| node.key.contains(part)).map_or(0, |c| c.1),
        ..LoadView::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_pool_nobody_can_read_is_served_blind_only_when_nothing_else_is_eligible() {
    let now = Instant::now();
    let snap = World::default().snap(now);
    let pool = BackendId::new(0);
    let stale = |node| Spill { backend: pool, node, reason: SpillReason::Stale };
    // Alone in its task: both nodes, within max_running (the reserve does not apply).
    let p = plan_for(&snap, "alone", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1"]);
    assert_eq!(p.targets[0].reason, blind(0, 4));
    assert_eq!(p.targets[1].reason, blind(0, 4));
    assert_eq!(p.spills, vec![stale(0), stale(1)], "still recorded as stale: they had no headroom");
    // The seed rotates equally loaded nodes.
    assert_eq!(names(&snap, &plan_for(&snap, "alone", 1, &idle, now)), ["pool#1", "pool#0"]);
    // A hosted backend that can take it: stale still means spill, as before.
    let p = plan_for(&snap, "spill", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["hosted#0"]);
    assert_eq!(p.targets[0].reason, Reason::Preferred { rank: 1 });
    assert_eq!(p.spill_reason(), Some(SpillReason::Stale));
    // A hosted backend that is down (breaker open) is no alternative: the pool first, the
    // open breaker last as ever.
    let snap = World { open: vec!["hosted/"], ..World::default() }.snap(now);
    let p = plan_for(&snap, "spill", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1", "hosted#0"]);
    assert_eq!(p.targets[0].reason, blind(0, 4));
    assert_eq!(p.targets[2].reason, Reason::BreakerOpen);
    // Nor is one whose quota is used up; it keeps its place (a new minute may free it).
    let snap = World { over_quota: true, ..World::default() }.snap(now);
    let p = plan_for(&snap, "spill", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1", "hosted#0"]);
    assert_eq!(p.targets[2].reason, Reason::Preferred { rank: 1 });
}

#[tokio::test(start_paused = true)]
async fn blind_targets_keep_to_capacity_by_in_flight_count() {
    let now = Instant::now();
    let snap = World::default().snap(now);
    // The fewest in flight first; a node at max_running (4) is left out.
    let p = plan_for(&snap, "alone", 0, &in_flight(&[("10.0.0.1", 3), ("10.0.0.2", 1)]), now);
    assert_eq!(names(&snap, &p), ["pool#1", "pool#0"]);
    assert_eq!((p.targets[0].reason, p.targets[1].reason), (blind(1, 4), blind(3, 4)));
    let p = plan_for(&snap, "alone", 0, &in_flight(&[("10.0.0.1", 4), ("10.0.0.2", 2)]), now);
    assert_eq!(names(&snap, &p), ["pool#1"]);
    // Every node full: no target, so dispatch sheds it (429) with the spills' reasons.
    let p = plan_for(&snap, "alone", 0, &in_flight(&[("10.0.0.1", 4), ("10.0.0.2", 9)]), now);
    assert!(p.targets.is_empty());
    assert_eq!(p.spill_reason(), Some(SpillReason::Stale));
    // max_inflight_per_node below max_running is the capacity.
    let p = plan_for(&snap, "capped", 0, &in_flight(&[("10.0.2.1", 2)]), now);
    assert_eq!(p.targets.iter().map(|t| t.reason).collect::<Vec<_>>(), [blind(2, 3)]);
    assert!(plan_for(&snap, "capped", 0, &in_flight(&[("10.0.2.1", 3)]), now).targets.is_empty());
    // The affinity node goes first while it has room, busier or not.
    let task = snap.config.task("alone").unwrap();
    let load = in_flight(&[("10.0.0.1", 3)]);
    let key = (0..100u64).find(|k| affinity_node(&snap.backends[0].nodes, *k) == Some(0)).unwrap();
    let p = plan(&RequestFacts { affinity: Some(key), ..facts(task, 0, &load) }, &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1"]);
}

#[tokio::test(start_paused = true)]
async fn held_down_quarantined_and_breaker_open_nodes_are_not_served_blind() {
    let now = Instant::now();
    let mut snap = World::default().snap(now);
    snap.backends[0].nodes[0].held = Some("drained".into());
    let p = plan_for(&snap, "alone", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#1"]);
    assert_eq!(p.spills[0], Spill { backend: BackendId::new(0), node: 0, reason: SpillReason::Drained });
    let snap = World { open: vec!["10.0.0.2"], ..World::default() }.snap(now);
    assert_eq!(names(&snap, &plan_for(&snap, "alone", 0, &idle, now)), ["pool#0"]);
    let snap = World { quarantined: vec!["10.0.0.1"], ..World::default() }.snap(now);
    assert_eq!(names(&snap, &plan_for(&snap, "alone", 0, &idle, now)), ["pool#1"]);
    let snap = World { open: vec!["10.0.0.1"], quarantined: vec!["10.0.0.2"], ..World::default() }.snap(now);
    let p = plan_for(&snap, "alone", 0, &idle, now);
    assert!(p.targets.is_empty(), "{:?}", p.targets);
    assert_eq!(p.spills.iter().map(|s| s.reason).collect::<Vec<_>>(), [SpillReason::Down; 2]);
}

#[tokio::test(start_paused = true)]
async fn one_fresh_node_makes_a_pool_measured_and_its_unread_nodes_serve_on_the_routers_count() {
    let now = Instant::now();
    // Node 0 is read and idle: it serves by headroom first; node 1, not yet read, is not
    // full: it takes requests up to its capacity on the router's own count, after it.
    let snap = World { fresh: vec![("10.0.0.1", 0.0)], ..World::default() }.snap(now);
    let p = plan_for(&snap, "alone", 1, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1"]);
    assert!(matches!(p.targets[0].reason, Reason::Headroom { .. }));
    assert_eq!(p.targets[1].reason, blind(0, 4));
    // Node 0 is read and full, its queue past the first-token deadline (5 ahead × 2 s / 4
    // slots = 2.5 s against 1.6 s): node 1 serves on its count.
    let snap = World { fresh: vec![("10.0.0.1", 8.0)], ..World::default() }.snap(now);
    let p = plan_for(&snap, "alone", 1, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#1"]);
    // Node 1 at its capacity too: nothing is served blind, the request is shed.
    let four = |_: &NodeView| LoadView { in_flight: 4, sent: 4, ..LoadView::default() };
    let p = plan_for(&snap, "alone", 1, &four, now);
    assert!(p.targets.is_empty(), "{:?}", p.targets);
    // A fresh scrape ages out: once nothing is fresh, the pool is unmeasured again, and both
    // nodes are served blind when nothing else can take the request.
    let snap = World { fresh: vec![("10.0.0.1", 4.0)], ..World::default() }.snap(now);
    let later = now + std::time::Duration::from_secs(6);
    let p = plan_for(&snap, "alone", 1, &idle, later);
    assert_eq!(names(&snap, &p), ["pool#1", "pool#0"]);
}

#[tokio::test(start_paused = true)]
async fn another_pool_with_headroom_keeps_an_unmeasured_pool_out() {
    let now = Instant::now();
    let snap = World { fresh: vec![("10.0.1.1", 0.0)], ..World::default() }.snap(now);
    let p = plan_for(&snap, "pools", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["other#0"]);
    // `other` is past its reserve (256 × 0.8 of its default capacity): the unmeasured pool
    // serves, and the measured node, which has room outside the reserve, is the last resort.
    let snap = World { fresh: vec![("10.0.1.1", 250.0)], ..World::default() }.snap(now);
    let p = plan_for(&snap, "pools", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1", "other#0"]);
    assert_eq!(p.targets[0].reason, blind(0, 4));
    assert_eq!(p.targets[2].reason, Reason::LastResort { why: SpillReason::Reserve });
    // `other` queues past the first-token deadline (345 ahead × 2 s / 256 slots = 2.7 s):
    // standard requests leave it out; interactive keeps it last, after the blind ones.
    let snap = World { fresh: vec![("10.0.1.1", 600.0)], ..World::default() }.snap(now);
    let p = plan_for(&snap, "pools", 0, &idle, now);
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1"]);
    let task = snap.config.task("pools").unwrap();
    let f = RequestFacts { priority: Priority::Interactive, ..facts(task, 0, &idle) };
    let p = plan(&f, &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["pool#0", "pool#1", "other#0"]);
    assert!(matches!(p.targets[2].reason, Reason::LastResort { .. }));
}
