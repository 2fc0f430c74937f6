use std::collections::BTreeSet;
use std::sync::Arc;

use super::*;
use crate::canonical::{Message, NodeKey, Role};
use crate::fleet::headroom::NodeSignals;
use crate::snapshot::BreakerView;

fn hi() -> ChatRequest {
    ChatRequest { messages: vec![Message::new(Role::User, "hi")].into(), ..Default::default() }
}

fn reported(now: Instant) -> NodeSignals {
    NodeSignals { scraped_at: Some(now), running: Some(0.0), waiting: Some(0.0), ..Default::default() }
}

/// The nodes (keys) a plan calls, in order.
fn nodes(snap: &Snapshot, plan: &Plan) -> Vec<NodeKey> {
    plan.targets.iter().map(|t| snap.backends[t.backend].nodes[t.node].key.clone()).collect()
}

#[test]
fn a_backend_is_planned_under_its_policy_capabilities_and_batch_headroom() {
    let yaml = "backends:
  - {name: pool, kind: vllm, model: m, endpoints: ['http://10.0.0.1:8000'], region: eu, max_running: 10}
  - {name: eu-api, kind: openai, model: gpt, region: eu, capabilities: {tools: false}}
  - {name: us-api, kind: anthropic, model: claude, region: us}
tasks:
  - {name: t, backends: [eu-api, pool, us-api], data_class: eu, slo: {ttft_ms: 2000}}
policy:
  data_classes:
    eu: {regions: [eu]}
";
    let config = Arc::new(crate::config::parse(yaml).unwrap());
    let task = config.tasks[0].clone();
    let mut snap = Snapshot::from_config(Arc::clone(&config));
    let now = Instant::now();
    let idle = |_: &NodeView| LoadView::default();
    let plan = |snap: &Snapshot, request: &ChatRequest, b: usize, load: &dyn Fn(&NodeView) -> LoadView| {
        plan_for(snap, &task, request, BackendId::new(b), load, now, 0)
    };
    let refused = plan(&snap, &hi(), 2, &idle).unwrap_err();
    assert_eq!(refused.class(), "refused", "{refused}");
    assert!(refused.to_string().contains("us-api: region us"), "{refused}");
    // No telemetry from the pool yet: no headroom known, but a call planned over the pool
    // alone has nothing else to go to, so it is served blind within the node's capacity.
    let blind = plan(&snap, &hi(), 0, &idle).unwrap().targets;
    assert_eq!(
        blind.iter().map(|t| t.reason).collect::<Vec<_>>(),
        [Reason::Unmeasured { in_flight: 0, capacity: 10 }]
    );
    snap.backends[0].nodes[0].signals = reported(now);
    assert_eq!(plan(&snap, &hi(), 0, &idle).unwrap().targets.len(), 1);
    // Seven of ten slots in use: batch work keeps out of the reserve.
    let busy = |_: &NodeView| LoadView { in_flight: 7, ..LoadView::default() };
    assert!(plan(&snap, &hi(), 0, &busy).unwrap().targets.is_empty(), "a pool at its reserve gets none");
    let mut tools = hi();
    tools.tools.push(crate::canonical::Tool {
        name: "f".into(),
        description: None,
        parameters: serde_json::json!({"type": "object"}).into(),
    });
    assert_eq!(plan(&snap, &tools, 1, &idle).unwrap_err().class(), "unfit", "no tools there");
    // The gate never holds a synthetic call back: its run is how a backend earns a result.
    snap.gate_refusals.insert("t".into(), [("eu-api".into(), "gate: no result".to_string())].into());
    assert_eq!(plan(&snap, &hi(), 1, &idle).unwrap().targets.len(), 1);
}

/// A pool of two nodes with ten slots each, and its one task.
fn two_node_pool() -> (Arc<crate::config::Config>, Snapshot) {
    let yaml = "backends:
  - {name: pool, kind: vllm, model: m, endpoints: ['http://10.0.0.1:8000', 'http://10.0.0.2:8000'], max_running: 10}
tasks:
  - {name: t, backends: [pool], slo: {ttft_ms: 2000}}
";
    let config = Arc::new(crate::config::parse(yaml).unwrap());
    let snap = Snapshot::from_config(Arc::clone(&config));
    (config, snap)
}

#[test]
fn a_pools_calls_go_to_its_least_busy_admitting_node_and_spread_among_equals() {
    let (config, mut snap) = two_node_pool();
    let now = Instant::now();
    for node in &mut snap.backends[0].nodes {
        node.signals = reported(now);
    }
    let (first, second) = (snap.backends[0].nodes[0].key.clone(), snap.backends[0].nodes[1].key.clone());
    let first_busier =
        |n: &NodeView| LoadView { in_flight: u64::from(n.key == first), ..LoadView::default() };
    for seed in 0..4 {
        let plan =
            plan_for(&snap, &config.tasks[0], &hi(), BackendId::new(0), &first_busier, now, seed).unwrap();
        assert_eq!(nodes(&snap, &plan), [second.clone(), first.clone()], "seed {seed}");
        let target = &snap.backends[0].nodes[plan.targets[0].node];
        assert_eq!(target.base_url, "http://10.0.0.2:8000/v1");
    }
    let idle = |_: &NodeView| LoadView::default();
    let chosen: BTreeSet<NodeKey> = (0..4)
        .map(|seed| {
            nodes(
                &snap,
                &plan_for(&snap, &config.tasks[0], &hi(), BackendId::new(0), &idle, now, seed).unwrap(),
            )[0]
            .clone()
        })
        .collect();
    assert_eq!(chosen, [first.clone(), second.clone()].into_iter().collect(), "the seed spreads them");
    // An open breaker takes the node out of a pool's plan.
    snap.backends[0].nodes[1].breaker = BreakerView::Open;
    for seed in 0..4 {
        let plan = plan_for(&snap, &config.tasks[0], &hi(), BackendId::new(0), &idle, now, seed).unwrap();
        assert_eq!(nodes(&snap, &plan), std::slice::from_ref(&first));
    }
}

#[test]
fn nodes_that_differ_in_predicted_ttft_but_both_have_headroom_share_the_calls() {
    let (config, mut snap) = two_node_pool();
    let now = Instant::now();
    snap.backends[0].nodes[0].signals = reported(now);
    snap.backends[0].nodes[1].signals = NodeSignals { ttft_s: Some(0.3), ..reported(now) };
    let idle = |_: &NodeView| LoadView::default();
    let first = |seed| plan_for(&snap, &config.tasks[0], &hi(), BackendId::new(0), &idle, now, seed).unwrap();
    let predicted: Vec<Reason> = first(0).targets.iter().map(|t| t.reason).collect();
    assert_eq!(predicted.len(), 2);
    assert_ne!(predicted[0], predicted[1], "the two nodes' predictions differ: {predicted:?}");
    let chosen: BTreeSet<usize> = (0..4).map(|seed| first(seed).targets[0].node).collect();
    assert_eq!(chosen, [0, 1].into_iter().collect(), "both have headroom: the seed spreads the calls");
}

#[test]
fn a_hosted_backend_with_an_open_breaker_is_called_last_and_a_held_one_not_at_all() {
    let yaml = "backends:
  - {name: api, kind: openai, model: gpt, base_url: 'http://10.0.0.9/v1'}
tasks:
  - {name: t, backends: [api], slo: {ttft_ms: 2000}}
";
    let config = Arc::new(crate::config::parse(yaml).unwrap());
    let mut snap = Snapshot::from_config(Arc::clone(&config));
    let idle = |_: &NodeView| LoadView::default();
    snap.backends[0].nodes[0].breaker = BreakerView::Open;
    let plan = plan_for(&snap, &config.tasks[0], &hi(), BackendId::new(0), &idle, Instant::now(), 0).unwrap();
    assert_eq!(plan.targets[0].reason, Reason::BreakerOpen);
    snap.backends[0].nodes[0].held = Some("node disabled by bob".into());
    let plan = plan_for(&snap, &config.tasks[0], &hi(), BackendId::new(0), &idle, Instant::now(), 0).unwrap();
    assert!(plan.targets.is_empty());
    assert_eq!(SyntheticError::no_capacity(&snap, &plan, BackendId::new(0)), SyntheticError::Held);
    assert_eq!(SyntheticError::Held.to_string(), "every node is held by an operator");
    assert_eq!(
        plan_for(&snap, &config.tasks[0], &hi(), BackendId::new(3), &idle, Instant::now(), 0),
        Err(SyntheticError::NoTarget)
    );
}

#[test]
fn errors_say_their_class_then_what_happened() {
    let failed =
        SyntheticError::Failed { class: crate::canonical::ErrorClass::Timeout, message: "no answer".into() };
    assert_eq!(
        (failed.class(), failed.to_string(), failed.message()),
        ("timeout", "timeout: no answer".into(), "no answer".into())
    );
    let quota = SyntheticError::OverQuota("anthropic".into());
    assert_eq!(quota.to_string(), "over_quota: anthropic has no quota left for batch work this minute");
    assert_eq!(Purpose::parse("shadow"), Some(Purpose::Shadow));
    assert!(Purpose::ALL.iter().all(|p| Purpose::parse(p.as_str()) == Some(*p)));
}
