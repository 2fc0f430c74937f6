//! Waiting for a local slot, placement by prefix cache, and nodes not yet read, on snapshots
//! built by hand: a pool of two 2-slot nodes (llama.cpp's shape) before a hosted provider.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use super::*;
use crate::canonical::NodeKey;
use crate::fleet::headroom::NodeSignals;
use crate::fleet::prefix_cache::Held;
use crate::fleet::progress::Running;
use crate::guard::node::NodeHandle;
use crate::route::{affinity_node, plan, Plan, Reason, RequestFacts};
use crate::snapshot::{NodeView, SnapshotInputs};

const CONFIG: &str = "
backends:
  - {name: pool, kind: local, endpoints: ['http://10.0.0.1:8000', 'http://10.0.0.2:8000'], model: m, max_running: 2, reserve: 0}
  - {name: hosted, kind: openai, base_url: 'https://api.openai.com/v1', api_key_env: K, model: gpt}
tasks:
  - {name: agent, backends: [pool, hosted], slo: {ttft_ms: 10000, margin: 0}}
";

/// Node `i` read at `now` (or never, when `read` says so), each with `running` slots busy.
fn snap(now: Instant, read: &dyn Fn(usize) -> bool, running: f64) -> Snapshot {
    let config = Arc::new(crate::config::parse(CONFIG).unwrap());
    let none = BTreeMap::new();
    let signals = |key: &NodeKey| {
        let i = usize::from(key.as_str().contains("10.0.0.2"));
        read(i).then(|| NodeSignals {
            scraped_at: Some(now),
            running: Some(running),
            waiting: Some(0.0),
            max_running: Some(2.0),
            prefill_tps: Some(1000.0),
            itl_s: Some(0.02),
            ..NodeSignals::default()
        })
    };
    let inputs = SnapshotInputs {
        discovered: &none,
        breaker: &|_| BreakerView::Closed,
        handle: &NodeHandle::detached,
        signals: &signals,
        quarantine: &|_| None,
        over_quota: &|_| false,
        availability: &|_| 1.0,
        slow: &|_| false,
        share: &|_| 1.0,
    };
    Snapshot::build(config, &inputs, 1)
}

/// The router holds both slots of every node, counted in the last reading.
fn full(_: &NodeView) -> LoadView {
    LoadView { in_flight: 2, counted: 2, sent: 2, ..LoadView::default() }
}

fn facts<'a>(
    task: &'a crate::config::TaskConfig,
    load: &'a dyn Fn(&NodeView) -> LoadView,
) -> RequestFacts<'a> {
    RequestFacts {
        task,
        prompt_tokens: 500,
        max_output_tokens: 100,
        seed: 0,
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

/// Two requests on each node, `streamed` tokens into answers of 1000 at most.
fn running_on(now: Instant, streamed: [u32; 2]) -> impl Fn(&NodeView) -> NodeRunning {
    move |_: &NodeView| {
        let r = |s: u32| Running {
            started: now,
            prefill_tokens: 500,
            max_tokens: 1000,
            streamed: s,
            first_token: true,
        };
        (vec![r(streamed[0]), r(streamed[1])], None)
    }
}

fn reasons(p: &Plan) -> Vec<(usize, Reason)> {
    p.targets.iter().map(|t| (t.backend.index(), t.reason)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_full_node_that_frees_in_time_is_waited_for_before_the_hosted_chain() {
    let now = Instant::now();
    let snap = snap(now, &|_| true, 2.0);
    let task = snap.config.task("agent").unwrap();
    // Each node's sooner request has 100 tokens left at 20 ms: a slot in 2 s; then this
    // request's 500 tokens at 1000/s plus a step: 2.52 s, within 10 s.
    let running = running_on(now, [900, 0]);
    let none_ahead = |_: BackendId| 0;
    let waits = Waits { running: &running, ahead: &none_ahead, waited_s: 0.0 };
    let f = RequestFacts { waits: Some(&waits), ..facts(task, &full) };
    let p = plan(&f, &snap, now).unwrap();
    let wait = Reason::Wait { predicted_ttft_ms: 2520, start_ms: 2000, warm: false };
    assert_eq!(reasons(&p)[..2], [(0, wait), (0, wait)]);
    assert_eq!(p.targets[2].backend.index(), 1, "then the hosted provider");
    assert!(p.spills.iter().all(|s| s.reason == SpillReason::Queue));
    // Without waits (a synthetic call, the simulator): the pool spills at once, as before.
    let p = plan(&facts(task, &full), &snap, now).unwrap();
    assert_eq!(p.targets[0].backend.index(), 1);
    // Dispatch never calls a wait target: the pipeline drops them once waiting is over.
    let p = plan(&f, &snap, now).unwrap().without_waits();
    assert_eq!(p.targets[0].backend.index(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_slot_too_late_for_the_slo_means_spill_and_waiting_spends_the_slo() {
    let now = Instant::now();
    let snap = snap(now, &|_| true, 2.0);
    let task = snap.config.task("agent").unwrap();
    // 500 tokens left: 10 s, past the SLO.
    let late = running_on(now, [500, 0]);
    let none_ahead = |_: BackendId| 0;
    let waits = Waits { running: &late, ahead: &none_ahead, waited_s: 0.0 };
    let p = plan(&RequestFacts { waits: Some(&waits), ..facts(task, &full) }, &snap, now).unwrap();
    assert_eq!(p.targets[0].backend.index(), 1, "{p:?}");
    // In time from arrival, but not after 8 s already waited.
    let soon = running_on(now, [900, 0]);
    let waited = Waits { running: &soon, ahead: &none_ahead, waited_s: 8.0 };
    let p = plan(&RequestFacts { waits: Some(&waited), ..facts(task, &full) }, &snap, now).unwrap();
    assert_eq!(p.targets[0].backend.index(), 1, "{p:?}");
}

#[tokio::test(start_paused = true)]
async fn the_requests_ahead_take_the_slots_first() {
    let now = Instant::now();
    let snap = snap(now, &|_| true, 2.0);
    let task = snap.config.task("agent").unwrap();
    // Slots free at 2 s (both nodes' sooner requests), then 20 s.
    let running = running_on(now, [900, 0]);
    let f = |n: usize| {
        let ahead = move |_: BackendId| n;
        let waits = Waits { running: &running, ahead: &ahead, waited_s: 0.0 };
        plan(&RequestFacts { waits: Some(&waits), ..facts(task, &full) }, &snap, now).unwrap()
    };
    // One ahead: it takes one of the 2 s slots, this request the other.
    assert!(matches!(f(1).targets[0].reason, Reason::Wait { start_ms: 2000, .. }));
    // Two ahead: they take both 2 s slots and hold them as long as this request would (its
    // 500-token prefill and 100 tokens: 2.52 s); the sooner frees again at 4.52 s.
    assert!(matches!(f(2).targets[0].reason, Reason::Wait { start_ms: 4520, .. }), "{:?}", f(2));
    // Six ahead: the sooner slots have turned over three times, the start at 9.56 s, the first
    // token past the SLO.
    assert_eq!(f(6).targets[0].backend.index(), 1);
    // A pool with room still goes to those waiting: this request waits behind them.
    let idle = snap_with_room(now);
    let room = |_: &NodeView| LoadView { in_flight: 1, counted: 1, sent: 1, ..LoadView::default() };
    let one = |_: &NodeView| {
        let r =
            Running { started: now, prefill_tokens: 500, max_tokens: 1000, streamed: 900, first_token: true };
        (vec![r], None)
    };
    let ahead = |_: BackendId| 1;
    let waits = Waits { running: &one, ahead: &ahead, waited_s: 0.0 };
    let p = plan(&RequestFacts { waits: Some(&waits), ..facts(task, &room) }, &idle, now).unwrap();
    // The one waiting takes a free slot now; this one the other node's free slot.
    assert!(matches!(p.targets[0].reason, Reason::Wait { start_ms: 0, .. }), "{p:?}");
    let nobody = |_: BackendId| 0;
    let waits = Waits { running: &one, ahead: &nobody, waited_s: 0.0 };
    let p = plan(&RequestFacts { waits: Some(&waits), ..facts(task, &room) }, &idle, now).unwrap();
    assert!(matches!(p.targets[0].reason, Reason::Headroom { .. }), "{p:?}");
}

fn snap_with_room(now: Instant) -> Snapshot {
    snap(now, &|_| true, 1.0)
}

#[tokio::test(start_paused = true)]
async fn a_node_not_yet_read_in_a_measured_pool_takes_requests_on_the_routers_count() {
    let now = Instant::now();
    // Node 0 read and full; node 1 never read.
    let snap = snap(now, &|i| i == 0, 2.0);
    let task = snap.config.task("agent").unwrap();
    let load = |n: &NodeView| match n.signals.scraped_at {
        Some(_) => full(n),
        None => LoadView { in_flight: 1, sent: 1, ..LoadView::default() },
    };
    let p = plan(&facts(task, &load), &snap, now).unwrap();
    assert_eq!(p.targets[0].node, 1);
    assert_eq!(p.targets[0].reason, Reason::Unmeasured { in_flight: 1, capacity: 2 });
    assert!(!p.spills.iter().any(|s| s.node == 1), "not counted full: {p:?}");
    // At its capacity by the router's own count, it spills like a full node.
    let at_capacity = |n: &NodeView| LoadView { in_flight: 2, sent: 2, ..load(n) };
    let p = plan(&facts(task, &at_capacity), &snap, now).unwrap();
    assert_eq!(p.targets[0].backend.index(), 1);
    assert!(p.spills.contains(&Spill { backend: BackendId::new(0), node: 1, reason: SpillReason::Queue }));
}

/// Node 0 (10.0.0.1) holds 4900 tokens of the request, its session's earlier turns; node 1
/// only its 300-token preamble, which many sessions share.
fn warm_on_0(node: &NodeView) -> Option<Held> {
    let on_0 = node.key.as_str().contains("10.0.0.1");
    Some(Held { tokens: if on_0 { 4900 } else { 300 }, own: on_0 })
}

#[tokio::test(start_paused = true)]
async fn a_turn_goes_where_its_prefix_is_warm_and_waits_for_it_while_in_time_for_the_slo() {
    let now = Instant::now();
    let snap = snap(now, &|_| true, 2.0);
    let task = snap.config.task("agent").unwrap();
    let f = |load, waits| RequestFacts {
        prompt_tokens: 5000,
        cached: Some(&warm_on_0),
        waits,
        ..facts(task, load)
    };
    // Both nodes have room: the warm one first, though the affinity key's node is the other.
    let key = (0..100u64).find(|k| affinity_node(&snap.backends[0].nodes, *k) == Some(1)).unwrap();
    let room = |_: &NodeView| LoadView { in_flight: 1, counted: 2, sent: 1, ..LoadView::default() };
    let p = plan(&RequestFacts { affinity: Some(key), ..f(&room, None) }, &snap, now).unwrap();
    // Warm: 100 tokens at 1000/s and a step; cold but for the preamble: 4700 tokens.
    let warm = Reason::Headroom { predicted_ttft_ms: 120, affinity: true };
    let cold = Reason::Headroom { predicted_ttft_ms: 4720, affinity: false };
    assert_eq!((p.targets[0].node, p.targets[0].reason), (0, warm));
    assert_eq!((p.targets[1].node, p.targets[1].reason), (1, cold));
    // The warm node full, a slot there in 6 s: waiting for it (6.12 s, within the SLO) costs
    // the fleet less than a cold prefill now (4.72 s); the cold node is the next target.
    let warm_full = |n: &NodeView| match n.key.as_str().contains("10.0.0.1") {
        true => full(n),
        false => room(n),
    };
    let running = running_on(now, [700, 0]);
    let none_ahead = |_: BackendId| 0;
    let waits = Waits { running: &running, ahead: &none_ahead, waited_s: 0.0 };
    let p = plan(&f(&warm_full, Some(&waits)), &snap, now).unwrap();
    let wait = Reason::Wait { predicted_ttft_ms: 6120, start_ms: 6000, warm: true };
    assert_eq!((p.targets[0].node, p.targets[0].reason), (0, wait));
    assert_eq!((p.targets[1].node, p.targets[1].reason), (1, cold));
    // Once it has waited 4 s, waiting on would break the SLO: it goes cold now.
    let waited = Waits { waited_s: 4.0, ..waits };
    let p = plan(&f(&warm_full, Some(&waited)), &snap, now).unwrap();
    assert_eq!((p.targets[0].node, p.targets[0].reason), (1, cold), "{p:?}");
    // Without the router's knowledge of the caches, the free node serves at once.
    let p = plan(&RequestFacts { cached: None, ..f(&warm_full, Some(&waits)) }, &snap, now).unwrap();
    assert_eq!(p.targets[0].node, 1);
    // A preamble many sessions share moves no session off its affinity node: it is warm
    // wherever any of them ran.
    let preamble_on_0 = |node: &NodeView| {
        Some(Held { tokens: if node.key.as_str().contains("10.0.0.1") { 300 } else { 0 }, own: false })
    };
    let shared = RequestFacts { affinity: Some(key), cached: Some(&preamble_on_0), ..f(&room, None) };
    assert_eq!(plan(&shared, &snap, now).unwrap().targets[0].node, 1);
}
