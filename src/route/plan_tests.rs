//! Planning: the order of targets, spill reasons, strategies and sticky spill, on snapshots
//! built by hand.

use super::*;
use crate::canonical::NodeKey;
use crate::config::Strategy;
use crate::fleet::headroom::NodeSignals;
use crate::guard::node::NodeHandle;
use crate::snapshot::SnapshotInputs;
use std::collections::BTreeMap;
use std::sync::Arc;

fn config() -> Arc<crate::config::Config> {
    Arc::new(crate::config::parse(include_str!("../../spillway.example.yaml")).unwrap())
}

/// Every local node reported just now: idle, or as `tweak` says.
fn snap_with(
    now: Instant,
    tweak: impl Fn(&str) -> NodeSignals,
    breaker: impl Fn(&NodeKey) -> BreakerView,
) -> Snapshot {
    snap_shared(now, tweak, breaker, 1.0)
}

/// As [`snap_with`], with every local pool at this sticky-spill share.
fn snap_shared(
    now: Instant,
    tweak: impl Fn(&str) -> NodeSignals,
    breaker: impl Fn(&NodeKey) -> BreakerView,
    share: f64,
) -> Snapshot {
    let none = BTreeMap::new();
    let signals = |key: &NodeKey| Some(NodeSignals { scraped_at: Some(now), ..tweak(key) });
    let inputs = SnapshotInputs {
        discovered: &none,
        breaker: &breaker,
        handle: &NodeHandle::detached,
        signals: &signals,
        quarantine: &|_| None,
        over_quota: &|_| false,
        availability: &|_| 1.0,
        slow: &|_| false,
        share: &|_| share,
    };
    Snapshot::build(config(), &inputs, 2)
}

fn idle(_: &str) -> NodeSignals {
    NodeSignals { running: Some(0.0), waiting: Some(0.0), ..NodeSignals::default() }
}

fn closed(_: &NodeKey) -> BreakerView {
    BreakerView::Closed
}

fn names(snap: &Snapshot, plan: &Plan) -> Vec<String> {
    plan.targets.iter().map(|t| format!("{}#{}", snap.backends[t.backend].name, t.node)).collect()
}

fn no_load(_: &NodeView) -> LoadView {
    LoadView::default()
}

fn facts(task: &TaskConfig, seed: u64) -> RequestFacts<'_> {
    RequestFacts {
        task,
        prompt_tokens: 1000,
        max_output_tokens: 400,
        seed,
        affinity: None,
        window: 0,
        priority: Priority::Standard,
        load: &no_load,
        request: None,
        candidates: None,
        waits: None,
        cached: None,
    }
}

#[tokio::test(start_paused = true)]
async fn local_nodes_with_headroom_come_first_then_the_hosted_chain() {
    let now = Instant::now();
    let snap = snap_with(now, idle, closed);
    let task = snap.config.task("summarise-ticket").unwrap();
    let p = plan(&facts(task, 0), &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["local-llama#0", "local-llama#1", "anthropic#0", "openai#0"]);
    assert!(matches!(p.targets[0].reason, Reason::Headroom { affinity: false, .. }));
    assert_eq!(p.targets[2].reason, Reason::Preferred { rank: 1 });
    assert!(p.spills.is_empty());
}

#[tokio::test(start_paused = true)]
async fn affinity_wins_while_its_node_has_headroom() {
    let now = Instant::now();
    let snap = snap_with(now, idle, closed);
    let task = snap.config.task("summarise-ticket").unwrap();
    let prefers =
        |node: usize| (0..100u64).find(|k| affinity_node(&snap.backends[0].nodes, *k) == Some(node)).unwrap();
    // Both nodes idle: the key's node goes first.
    let f = RequestFacts { affinity: Some(prefers(1)), ..facts(task, 0) };
    let p = plan(&f, &snap, now).unwrap();
    assert_eq!(names(&snap, &p)[..2], ["local-llama#1", "local-llama#0"]);
    assert_eq!(p.targets[0].reason, Reason::Headroom { predicted_ttft_ms: 120, affinity: true });
    // The router has just sent node 1 so much that it is full: the other node serves.
    let heavy = |node: &NodeView| {
        let sent = if node.key.as_str().contains("10.0.0.6") { 300 } else { 0 };
        LoadView { in_flight: sent, unseen: sent, sent, ..LoadView::default() }
    };
    let f = RequestFacts { affinity: Some(prefers(1)), load: &heavy, ..facts(task, 0) };
    let p = plan(&f, &snap, now).unwrap();
    assert_eq!(names(&snap, &p)[0], "local-llama#0");
    assert_eq!(p.spills, vec![Spill { backend: BackendId::new(0), node: 1, reason: SpillReason::Reserve }]);
    // The same key maps to the same node in every replica (pure function of key and nodes).
    assert_eq!(affinity_node(&snap.backends[0].nodes, prefers(1)), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_held_node_passes_its_keys_to_their_next_node_by_the_same_hash() {
    let now = Instant::now();
    let snap = snap_with(now, idle, closed);
    let mut nodes = snap.backends[0].nodes.clone();
    let key = (0..100u64).find(|k| affinity_node(&nodes, *k) == Some(1)).unwrap();
    // Drained (a hold every replica shares): the key's next node by rendezvous, not by load.
    nodes[1].held = Some("node drained by alice".into());
    assert_eq!(affinity_node(&nodes, key), Some(0));
    nodes[0].held = Some("backend drained by alice".into());
    assert_eq!(affinity_node(&nodes, key), None);
}

#[tokio::test(start_paused = true)]
async fn stale_and_full_nodes_spill_with_their_reasons() {
    let now = Instant::now();
    let snap = snap_with(now, idle, closed);
    let task = snap.config.task("summarise-ticket").unwrap();
    let later = now + std::time::Duration::from_secs(6);
    let p = plan(&facts(task, 0), &snap, later).unwrap();
    assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0"]);
    assert_eq!(p.spill_reason(), Some(SpillReason::Stale));
    assert_eq!(p.spills.len(), 2);
    // Full to the reserve (256 × 0.8 = 204.8 → 204 + this one fits, 205 does not): the
    // hosted backends first, the nodes only as last resorts.
    let full = |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
    let snap = snap_with(now, full, closed);
    let p = plan(&facts(task, 0), &snap, now).unwrap();
    assert_eq!(p.spill_reason(), Some(SpillReason::Reserve));
    assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0", "local-llama#0", "local-llama#1"]);
    assert_eq!(p.targets[2].reason, Reason::LastResort { why: SpillReason::Reserve });
}

#[tokio::test(start_paused = true)]
async fn standard_requests_keep_nodes_that_answer_within_the_first_token_deadline_as_a_last_resort() {
    let now = Instant::now();
    let task = snap_with(now, idle, closed).config.task("summarise-ticket").unwrap().clone();
    let at = |running: f64, waiting: f64| NodeSignals {
        running: Some(running),
        waiting: Some(waiting),
        ..NodeSignals::default()
    };
    // SLO 800 ms with its 0.2 margin: 640 ms to be admitted; the deadline factor 2 makes
    // 1,280 ms for a last resort. A 1,000-token prompt takes 1000 / 10,000 tok/s + 20 ms.
    // Node 0 is past the reserve (205 of 256): 120 ms without it. Node 1 queues 100:
    // (256 + 100 + 1 − 256) × 2 s / 256 = 789 ms, + 120 = 909 ms.
    let two = |r0: NodeSignals, r1: NodeSignals| {
        move |key: &str| if key.contains("10.0.0.5") { r0.clone() } else { r1.clone() }
    };
    let snap = snap_with(now, two(at(205.0, 0.0), at(256.0, 100.0)), closed);
    let p = plan(&facts(&task, 0), &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0", "local-llama#0", "local-llama#1"]);
    // Both were refused first for the reserve (the check that comes first).
    assert_eq!(p.targets[2].reason, Reason::LastResort { why: SpillReason::Reserve });
    assert_eq!(p.targets[3].reason, Reason::LastResort { why: SpillReason::Reserve });
    // With node 0 now measured at 470 ms: a queue of 140 on node 1 is 1,102 + 120 =
    // 1,222 ms, a last resort after node 0; 160 is 1,258 + 120 = 1,378 ms, past the deadline.
    let slow = NodeSignals { ttft_s: Some(0.47), prompt_tokens_mean: Some(1000.0), ..at(205.0, 0.0) };
    let snap = snap_with(now, two(slow.clone(), at(256.0, 140.0)), closed);
    let p = plan(&facts(&task, 0), &snap, now).unwrap();
    assert_eq!(names(&snap, &p)[2..], ["local-llama#0", "local-llama#1"]);
    let snap = snap_with(now, two(slow, at(256.0, 160.0)), closed);
    let p = plan(&facts(&task, 0), &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0", "local-llama#0"]);
    assert_eq!(p.spills.len(), 2);
    // Short of KV cache, a node is no last resort (its queue would not move), nor is any
    // node for batch requests.
    let kv = NodeSignals { kv_usage: Some(0.95), kv_capacity_tokens: Some(100_000.0), ..at(0.0, 0.0) };
    let snap = snap_with(now, two(kv, at(256.0, 100.0)), closed);
    let p = plan(&facts(&task, 0), &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0", "local-llama#1"]);
    assert_eq!(p.spills[0], Spill { backend: BackendId::new(0), node: 0, reason: SpillReason::Kv });
    let batch = plan(&RequestFacts { priority: Priority::Batch, ..facts(&task, 0) }, &snap, now).unwrap();
    assert_eq!(names(&snap, &batch), ["anthropic#0", "openai#0"]);
}

#[tokio::test(start_paused = true)]
async fn interactive_requests_keep_full_nodes_as_a_last_resort_and_batch_spills_sooner() {
    let now = Instant::now();
    let full = |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
    let snap = snap_with(now, full, closed);
    let task = snap.config.task("summarise-ticket").unwrap();
    let f = RequestFacts { priority: Priority::Interactive, ..facts(task, 0) };
    let p = plan(&f, &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0", "local-llama#0", "local-llama#1"]);
    assert_eq!(p.targets[2].reason, Reason::LastResort { why: SpillReason::Reserve });
    // Batch may fill a pool only to (1 − 0.2) × 0.8 = 64 %: 164 running is too many.
    let busy = |_: &str| NodeSignals { running: Some(164.0), waiting: Some(0.0), ..NodeSignals::default() };
    let snap = snap_with(now, busy, closed);
    let standard = plan(&facts(task, 0), &snap, now).unwrap();
    assert_eq!(names(&snap, &standard)[0], "local-llama#0");
    let batch = plan(&RequestFacts { priority: Priority::Batch, ..facts(task, 0) }, &snap, now).unwrap();
    assert_eq!(names(&snap, &batch), ["anthropic#0", "openai#0"]);
}

#[tokio::test(start_paused = true)]
async fn open_breakers_go_last_and_a_down_hosted_backend_releases_the_reserve() {
    let now = Instant::now();
    let anthropic_open = |key: &NodeKey| {
        if key.starts_with("anthropic/") {
            BreakerView::Open
        } else {
            BreakerView::Closed
        }
    };
    let full = |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
    let snap = snap_with(now, full, anthropic_open);
    assert!(snap.backends[0].reserve_released);
    assert_eq!(snap.backends[0].limits.reserve, 0.0);
    let task = snap.config.task("summarise-ticket").unwrap();
    let p = plan(&facts(task, 0), &snap, now).unwrap();
    // The pool now fills to capacity, so the local nodes take the traffic again.
    assert_eq!(names(&snap, &p), ["local-llama#0", "local-llama#1", "openai#0", "anthropic#0"]);
    assert_eq!(p.targets[3].reason, Reason::BreakerOpen);
    // A local node whose breaker is open is down, not tried.
    let local_open = |key: &NodeKey| {
        if key.contains("10.0.0.5") {
            BreakerView::Open
        } else {
            BreakerView::Closed
        }
    };
    let snap = snap_with(now, idle, local_open);
    assert!(!snap.backends[0].reserve_released);
    let p = plan(&facts(task, 0), &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["local-llama#1", "anthropic#0", "openai#0"]);
    assert_eq!(p.spills, vec![Spill { backend: BackendId::new(0), node: 0, reason: SpillReason::Down }]);
}

#[tokio::test(start_paused = true)]
async fn cost_strategy_puts_the_cheapest_estimate_first() {
    let now = Instant::now();
    let snap = snap_with(now, idle, closed);
    let mut task = snap.config.task("summarise-ticket").unwrap().clone();
    task.strategy = Strategy::Cost;
    task.backends = vec!["openai".into(), "anthropic".into()];
    let p = plan(&facts(&task, 0), &snap, now).unwrap();
    // anthropic: 1000×3 + 400×15 = 9000 µ$; openai: 1000×5 + 400×20 = 13000 µ$.
    assert_eq!(names(&snap, &p), ["anthropic#0", "openai#0"]);
    assert_eq!(p.targets[0].reason, Reason::Cheapest { estimated_usd: 0.009 });
    assert_eq!(p.targets[1].reason, Reason::Cheapest { estimated_usd: 0.013 });
}

#[tokio::test(start_paused = true)]
async fn weighted_draw_follows_weights_and_is_repeatable() {
    let now = Instant::now();
    let snap = snap_with(now, idle, closed);
    let mut task = snap.config.task("summarise-ticket").unwrap().clone();
    task.strategy = Strategy::Weighted;
    task.backends = vec!["openai".into(), "anthropic".into()];
    task.weights = [("openai".to_string(), 3.0), ("anthropic".to_string(), 1.0)].into();
    let mut openai_first = 0;
    for seed in 0..4000 {
        let p = plan(&facts(&task, seed), &snap, now).unwrap();
        assert_eq!(p, plan(&facts(&task, seed), &snap, now).unwrap());
        assert_eq!(p.targets.len(), 2);
        if snap.backends[p.targets[0].backend].name == "openai" {
            openai_first += 1;
        }
    }
    let share = openai_first as f64 / 4000.0;
    assert!((share - 0.75).abs() < 0.03, "openai first in {share}");
}

#[tokio::test(start_paused = true)]
async fn policy_applies_before_ordering_even_when_local_nodes_are_down() {
    let now = Instant::now();
    let local_open = |key: &NodeKey| {
        if key.starts_with("local-llama/") {
            BreakerView::Open
        } else {
            BreakerView::Closed
        }
    };
    let snap = snap_with(now, idle, local_open);
    let task = snap.config.task("triage-restricted").unwrap();
    let f = RequestFacts { priority: Priority::Interactive, ..facts(task, 0) };
    let p = plan(&f, &snap, now).unwrap();
    assert!(p.targets.is_empty(), "nothing hosted, nothing down: {:?}", p.targets);
    assert_eq!(p.spills.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn adaptive_chains_follow_availability_and_stick_to_the_key_within_a_window() {
    let now = Instant::now();
    let none = BTreeMap::new();
    let availability = |b: &str| if b == "anthropic" { 0.3 } else { 1.0 };
    let inputs = SnapshotInputs {
        discovered: &none,
        breaker: &closed,
        handle: &NodeHandle::detached,
        signals: &|_| None, // the pool is stale: no headroom, availability 0
        quarantine: &|_| None,
        over_quota: &|_| false,
        availability: &availability,
        slow: &|_| false,
        share: &|_| 1.0,
    };
    let snap = Snapshot::build(config(), &inputs, 2);
    let mut task = snap.config.task("summarise-ticket").unwrap().clone();
    task.strategy = Strategy::Adaptive;
    // Preference [local 0, anthropic 0.3, openai 1.0] → weights [0, 0.3, 0.7].
    let mut anthropic_first = 0;
    for key in 0..2000u64 {
        let f = RequestFacts { affinity: Some(key), window: 7, ..facts(&task, key) };
        let p = plan(&f, &snap, now).unwrap();
        let again = plan(&RequestFacts { seed: key + 99, ..f }, &snap, now).unwrap();
        assert_eq!(p.targets, again.targets, "the key, not the request, picks the chain");
        let first = &snap.backends[p.targets[0].backend].name;
        if first == "anthropic" {
            anthropic_first += 1;
            assert_eq!(p.targets[0].reason, Reason::Chain { weight: 0.3 });
        }
    }
    let share = anthropic_first as f64 / 2000.0;
    assert!((share - 0.3).abs() < 0.04, "{share}");
    // With every availability at 1 and headroom, the chain is the preference order.
    let snap = snap_with(now, idle, closed);
    let p = plan(&RequestFacts { affinity: Some(5), ..facts(&task, 5) }, &snap, now).unwrap();
    assert_eq!(names(&snap, &p), ["local-llama#0", "local-llama#1", "anthropic#0", "openai#0"]);
}

#[tokio::test(start_paused = true)]
async fn a_full_pool_takes_a_fixed_share_of_projects_first_and_the_rest_keep_their_hosted_chain() {
    let now = Instant::now();
    // Both nodes past the reserve line (205 of 256, the line at 204.8 → 204).
    let busy = |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
    let snap = snap_shared(now, busy, closed, 0.5);
    assert_eq!(snap.backends[0].share, 0.5);
    let mut task = snap.config.task("summarise-ticket").unwrap().clone();
    task.strategy = Strategy::Adaptive;
    let (mut inside, mut outside) = (0, 0);
    let feedback = sticky::ShareFeedback::default();
    for key in 0..400u64 {
        let f = RequestFacts { affinity: Some(key), window: 3, ..facts(&task, key) };
        let p = plan(&f, &snap, now).unwrap();
        feedback.record(&snap, &p, f.prompt_tokens);
        if sticky::takes_first(key, "local-llama", 0.5) {
            inside += 1;
            // In the share: the fleet first, past the reserve (the node is within its SLO),
            // and the plan says the pool took its own project.
            assert!(names(&snap, &p)[..2].iter().all(|n| n.starts_with("local-llama")), "key {key}");
            assert!(p.spills.is_empty(), "{:?}", p.spills);
            assert_eq!(p.kept, [(BackendId::new(0), true)]);
        } else {
            outside += 1;
            // Outside: the hosted chain first, the pool after it as a fallback (held to the
            // reserve, which these nodes are past: only as last resorts).
            let order = names(&snap, &p);
            assert_eq!(order, ["anthropic#0", "openai#0", "local-llama#0", "local-llama#1"], "key {key}");
            assert_eq!(p.targets[2].reason, Reason::LastResort { why: SpillReason::Reserve });
            assert_eq!(p.spill_reason(), Some(SpillReason::Reserve));
        }
    }
    assert!(inside > 150 && outside > 150, "{inside} in, {outside} out");
    // The feedback counted every in-share plan as taken, then starts afresh.
    let counted = feedback.take();
    let prompt_tokens = u64::from(facts(&task, 0).prompt_tokens) * inside;
    assert_eq!(counted["local-llama"], sticky::Kept { taken: inside, refused: 0, prompt_tokens });
    assert!(feedback.take().is_empty());
    // Nodes that cannot take even the share's projects (every slot busy): they are refused
    // (last resorts only, their short queue within the first-token deadline), and the
    // feedback says so.
    let packed = |_: &str| NodeSignals { running: Some(256.0), waiting: Some(3.0), ..NodeSignals::default() };
    let packed_snap = snap_shared(now, packed, closed, 0.5);
    let key = (0..100u64).find(|&k| sticky::takes_first(k, "local-llama", 0.5)).unwrap();
    let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &packed_snap, now).unwrap();
    assert_eq!(names(&packed_snap, &p)[..2], ["anthropic#0", "openai#0"]);
    assert!(p.targets[2..].iter().all(|t| matches!(t.reason, Reason::LastResort { .. })));
    assert_eq!(p.kept, [(BackendId::new(0), false)]);
    feedback.record(&packed_snap, &p, 300);
    assert_eq!(feedback.take()["local-llama"], sticky::Kept { taken: 0, refused: 1, prompt_tokens: 300 });
    // Below the reserve line, keys outside the share still go hosted first, with the pool
    // after the hosted chain and the reason `sticky`.
    let idle_snap = snap_shared(now, idle, closed, 0.5);
    let key = (0..100u64).find(|&k| !sticky::takes_first(k, "local-llama", 0.5)).unwrap();
    let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &idle_snap, now).unwrap();
    let order = names(&idle_snap, &p);
    assert_eq!(order[0], "anthropic#0");
    assert!(order[1..3].iter().all(|n| n.starts_with("local-llama")), "{order:?}");
    assert_eq!(p.spill_reason(), Some(SpillReason::Sticky));
    // A share of 1 is planning without stickiness: the reserve holds for every key. Every
    // project is the pool's own there, so the plan reports the refusal (for the cut).
    let full = snap_with(now, busy, closed);
    let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &full, now).unwrap();
    assert_eq!(names(&full, &p)[..2], ["anthropic#0", "openai#0"]);
    assert_eq!(p.targets[2].reason, Reason::LastResort { why: SpillReason::Reserve });
    assert_eq!(p.kept, [(BackendId::new(0), false)]);
    let p =
        plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &snap_with(now, idle, closed), now);
    assert_eq!(p.unwrap().kept, [(BackendId::new(0), true)]);
    // Sticky spill only shapes adaptive tasks, and counts only theirs.
    task.strategy = Strategy::Priority;
    let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &idle_snap, now).unwrap();
    assert_eq!(names(&idle_snap, &p)[0], "local-llama#0");
    assert!(p.kept.is_empty());
    let p = plan(&RequestFacts { affinity: Some(key), ..facts(&task, key) }, &full, now).unwrap();
    assert!(p.kept.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_hosted_backend_the_pid_has_written_off_releases_the_reserve() {
    let none = BTreeMap::new();
    let build = |anthropic: f64| {
        let availability = move |b: &str| if b == "anthropic" { anthropic } else { 1.0 };
        let inputs = SnapshotInputs {
            discovered: &none,
            breaker: &closed,
            handle: &NodeHandle::detached,
            signals: &|_| None,
            quarantine: &|_| None,
            over_quota: &|_| false,
            availability: &availability,
            slow: &|_| false,
            share: &|_| 1.0,
        };
        Snapshot::build(config(), &inputs, 2)
    };
    assert!(build(0.05).backends[0].reserve_released, "availability below 0.1: down");
    assert!(!build(0.5).backends[0].reserve_released);
}

#[tokio::test(start_paused = true)]
async fn shares_step_once_a_second_and_weigh_the_refusals_of_the_whole_second() {
    let t0 = Instant::now();
    // Both nodes past the reserve line: full at a share of 1, and every plan is a refusal.
    let busy = |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
    let snap = snap_with(t0, busy, closed);
    let mut task = snap.config.task("summarise-ticket").unwrap().clone();
    task.strategy = Strategy::Adaptive;
    let (mut shares, feedback) = (sticky::PoolShares::default(), sticky::ShareFeedback::default());
    let load = |_: &crate::snapshot::NodeView| crate::fleet::load::LoadView::default();
    shares.step(&snap, &load, &feedback, t0);
    // Rebuilt every 100 ms (as the live loop does): nothing moves inside the second, and the
    // refusals add up.
    for tenth in 1..10u64 {
        let p = plan(&RequestFacts { affinity: Some(tenth), ..facts(&task, tenth) }, &snap, t0).unwrap();
        assert_eq!(p.kept, [(BackendId::new(0), false)]);
        feedback.record(&snap, &p, 100);
        shares.step(&snap, &load, &feedback, t0 + std::time::Duration::from_millis(100 * tenth));
        assert_eq!(shares.get("local-llama"), 1.0);
    }
    // At the second it steps once, by the whole second, and takes the nine refusals.
    shares.step(&snap, &load, &feedback, t0 + std::time::Duration::from_secs(1));
    let down = snap.config.balancing.sticky_spill.down_per_sec;
    assert!((shares.get("local-llama") - (1.0 - down)).abs() < 1e-12, "{}", shares.get("local-llama"));
    assert!(feedback.take().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_pool_whose_engines_report_no_prompt_sizes_is_judged_by_the_prompts_the_router_sends_it() {
    let t0 = Instant::now();
    // Idle nodes prefilling 100 tokens a second, with no prompt-size histogram (llama.cpp).
    let slow = |_: &str| NodeSignals {
        running: Some(0.0),
        waiting: Some(0.0),
        prefill_tps: Some(100.0),
        ..NodeSignals::default()
    };
    let snap = snap_with(t0, slow, closed);
    let load = |_: &crate::snapshot::NodeView| crate::fleet::load::LoadView::default();
    let pool = &snap.backends[0];
    // Unknown sizes are taken as 1000 tokens: ten seconds of prefill, past a 2 s target, so the
    // idle pool would count as refusing; at the 50 tokens the router sends it, it is not.
    assert!(sticky::pool_load(pool, &load, 2.0, None, t0).unwrap().refusing);
    assert!(!sticky::pool_load(pool, &load, 2.0, Some(50.0), t0).unwrap().refusing);
    // The shares learn that size from the plans' feedback, so the idle pool keeps its share.
    let mut task = snap.config.task("summarise-ticket").unwrap().clone();
    task.strategy = Strategy::Adaptive;
    let (mut shares, feedback) = (sticky::PoolShares::default(), sticky::ShareFeedback::default());
    shares.step(&snap, &load, &feedback, t0);
    let p =
        plan(&RequestFacts { prompt_tokens: 50, affinity: Some(1), ..facts(&task, 1) }, &snap, t0).unwrap();
    assert_eq!(p.kept, [(BackendId::new(0), true)]);
    feedback.record(&snap, &p, 50);
    shares.step(&snap, &load, &feedback, t0 + std::time::Duration::from_secs(1));
    assert_eq!(shares.get("local-llama"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn with_the_queue_on_a_full_pool_that_refused_nobody_keeps_its_share() {
    let t0 = Instant::now();
    // Both nodes past the reserve line, and no plan refused in the second: its requests all
    // found a slot in time (waiting for one where they had to).
    let busy = |_: &str| NodeSignals { running: Some(205.0), waiting: Some(0.0), ..NodeSignals::default() };
    let load = |_: &crate::snapshot::NodeView| crate::fleet::load::LoadView::default();
    let share_after_a_second = |queue: bool| {
        let mut snap = snap_with(t0, busy, closed);
        let mut config = (*snap.config).clone();
        config.queue.enabled = queue;
        snap.config = Arc::new(config);
        let (mut shares, feedback) = (sticky::PoolShares::default(), sticky::ShareFeedback::default());
        shares.step(&snap, &load, &feedback, t0);
        shares.step(&snap, &load, &feedback, t0 + std::time::Duration::from_secs(1));
        shares.get("local-llama")
    };
    assert_eq!(share_after_a_second(true), 1.0);
    // Without the queue, full is full: the share shrinks.
    assert!(share_after_a_second(false) < 1.0);
}
