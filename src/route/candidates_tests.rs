use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::canonical::NodeKey;
use crate::config::TaskConfig;
use crate::guard::node::NodeHandle;
use crate::route::{plan, Plan, Reason, RequestFacts};
use crate::snapshot::SnapshotInputs;

const NODES: usize = 300;

fn config() -> Arc<crate::config::Config> {
    let endpoints: Vec<String> =
        (0..NODES).map(|i| format!("\"http://10.1.{}.{}:8000\"", i / 200, i % 200)).collect();
    let yaml = format!(
        r#"
backends:
  - {{name: pool, kind: vllm, endpoints: [{}], model: m, max_running: 32, reserve: 0.2}}
  - {{name: hosted, kind: openai, model: gpt}}
tasks:
  - {{name: chat, backends: [pool, hosted], slo: {{ttft_ms: 1000}}}}
"#,
        endpoints.join(", ")
    );
    Arc::new(crate::config::parse(&yaml).unwrap())
}

/// A pool of varied nodes: some idle, some busy or full, some queueing, a few stale or down,
/// and groups of identical ones; `busy`: nearly every node at or past its reserve line.
fn snap(now: Instant, rng: &mut StdRng, busy: bool) -> Snapshot {
    let mut by_key: HashMap<NodeKey, (Option<NodeSignals>, BreakerView)> = HashMap::new();
    for (i, node) in Snapshot::from_config(config()).backends[0].nodes.iter().enumerate() {
        let signals = NodeSignals {
            scraped_at: Some(if i % 37 == 5 { now - Duration::from_secs(60) } else { now }),
            running: Some(match (busy, i % 10 < 3) {
                (true, _) => f64::from(rng.gen_range(24..33)),
                (false, true) => 4.0,
                (false, false) => f64::from(rng.gen_range(0..34)),
            }),
            waiting: Some(if i % 23 == 0 || (busy && i % 7 == 0) { 2.0 } else { 0.0 }),
            kv_usage: Some(rng.gen_range(0.0..0.9)),
            kv_blocks: Some(25_000),
            block_size: Some(16),
            ttft_s: (i % 10 >= 3).then(|| rng.gen_range(0.05..0.9)),
            queue_s: Some(0.0),
            prefill_tps: Some(if i % 10 < 3 { 8000.0 } else { rng.gen_range(4000.0..12000.0) }),
            itl_s: Some(0.03),
            service_s: Some(rng.gen_range(1.0..6.0)),
            prefix_hit_rate: Some(if i % 10 < 3 { 0.5 } else { rng.gen_range(0.0..0.8) }),
            prompt_tokens_mean: Some(1500.0),
            ..NodeSignals::default()
        };
        let breaker = if i % 41 == 7 { BreakerView::Open } else { BreakerView::Closed };
        by_key.insert(node.key.clone(), (Some(signals), breaker));
    }
    let none = BTreeMap::new();
    let inputs = SnapshotInputs {
        discovered: &none,
        breaker: &|k| by_key.get(k).map_or(BreakerView::Closed, |e| e.1),
        handle: &NodeHandle::detached,
        signals: &|k| by_key.get(k).and_then(|e| e.0.clone()),
        quarantine: &|_| None,
        over_quota: &|_| false,
        availability: &|_| 1.0,
        slow: &|_| false,
        share: &|_| 1.0,
    };
    Snapshot::build(config(), &inputs, 2)
}

fn facts<'a>(
    task: &'a TaskConfig,
    load: &'a dyn Fn(&NodeView) -> LoadView,
    rng: &mut StdRng,
) -> RequestFacts<'a> {
    let priority =
        [Priority::Standard, Priority::Standard, Priority::Batch, Priority::Interactive][rng.gen_range(0..4)];
    RequestFacts {
        task,
        prompt_tokens: rng.gen_range(0..9000),
        max_output_tokens: 200,
        seed: rng.gen(),
        affinity: rng.gen_bool(0.8).then(|| rng.gen_range(0..500u64)),
        window: 0,
        priority,
        load,
        request: None,
        candidates: None,
        waits: None,
        cached: None,
    }
}

/// The pool's targets with headroom (its last resorts apart).
fn pool_targets(p: &Plan) -> Vec<(usize, Reason)> {
    p.targets
        .iter()
        .filter(|t| t.backend.index() == 0 && !matches!(t.reason, Reason::LastResort { .. }))
        .map(|t| (t.node, t.reason))
        .collect()
}

/// The pool's last resorts, in order.
fn last_resorts(p: &Plan) -> Vec<(usize, Reason)> {
    p.targets
        .iter()
        .filter(|t| matches!(t.reason, Reason::LastResort { .. }))
        .map(|t| (t.node, t.reason))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn bounded_plans_begin_as_the_full_scan_does() {
    let mut rng = StdRng::seed_from_u64(17);
    let (mut cut_short, mut judged_fewer, mut resorts_kept) = (0, 0, 0);
    for round in 0..9 {
        let now = Instant::now();
        let full = snap(now, &mut rng, round >= 6);
        let keys: Vec<u64> = (0..250).collect();
        let table = Arc::new(AffinityTable::new(&full.backends[0].nodes, keys));
        let k = [1, 2, DEFAULT_K][round % 3];
        // The router's own requests in flight grow as it sends (none finish in this test).
        let unseen: RefCell<HashMap<NodeKey, u64>> = RefCell::default();
        let load = |n: &NodeView| {
            let sent = unseen.borrow().get(&n.key).copied().unwrap_or(0);
            LoadView { in_flight: sent, unseen: sent, sent, ..LoadView::default() }
        };
        let index = Candidates::build(&full, (now, &load), k, 64, &[Some(table), None]);
        let task = full.config.task("chat").unwrap().clone();
        for _ in 0..400 {
            let f = facts(&task, &load, &mut rng);
            let at = now + Duration::from_millis(rng.gen_range(0..900));
            let bounded = RequestFacts { candidates: Some(&index), ..f };
            let (a, b) = (plan(&f, &full, at).unwrap(), plan(&bounded, &full, at).unwrap());
            let (pa, pb) = (pool_targets(&a), pool_targets(&b));
            assert!(pb.len() <= pa.len() && pa[..pb.len()] == pb[..], "{pa:?}\n{pb:?}");
            let beyond_affinity =
                pb.iter().filter(|(_, r)| !matches!(r, Reason::Headroom { affinity: true, .. }));
            assert!(beyond_affinity.count() >= k.min(pa.len()) || pa.len() == pb.len());
            assert_eq!(a.targets.first(), b.targets.first());
            assert!(b.spills.iter().all(|s| a.spills.contains(s)));
            // Last resorts are the full scan's, in its order, or fewer; a standard request
            // whose pool has fewer than k targets has the full scan's first k.
            let (ra, rb) = (last_resorts(&a), last_resorts(&b));
            let mut full_resorts = ra.iter();
            assert!(rb.iter().all(|r| full_resorts.any(|f| f == r)));
            if f.priority == Priority::Standard && pb.len() < k {
                let n = k.min(ra.len());
                assert_eq!(ra[..n], rb[..n.min(rb.len())], "the first {n} last resorts");
                resorts_kept += usize::from(n > 0);
            }
            if pb.is_empty() {
                assert_eq!(a.spills.is_empty(), b.spills.is_empty(), "the pool spilled in both");
            }
            let hosted = |p: &Plan| p.targets.iter().filter(|t| t.backend.index() == 1).count();
            assert_eq!(hosted(&a), hosted(&b));
            cut_short += usize::from(pb.len() < pa.len());
            judged_fewer += usize::from(b.spills.len() + pb.len() < a.spills.len() + pa.len());
            if let Some(t) = b.targets.first().filter(|t| t.backend.index() == 0) {
                let key = full.backends[0].nodes[t.node].key.clone();
                *unseen.borrow_mut().entry(key).or_default() += rng.gen_range(1..6);
            }
        }
    }
    assert!(cut_short > 500 && judged_fewer > 1000, "{cut_short} cut short, {judged_fewer} judged fewer");
    assert!(resorts_kept > 100, "{resorts_kept} plans with last resorts checked");
}

#[test]
fn prompt_bins_and_full_nodes() {
    assert_eq!([bin(0), bin(1), bin(2), bin(3), bin(4)], [(0, 0), (0, 0), (1, 1), (1, 1), (2, 3)]);
    assert_eq!(bin(1500), (10, 1023));
    assert_eq!(bin(u32::MAX), (31, (1 << 31) - 1));
    let limits = PoolLimits { max_running: 10, reserve: 0.2, stale_after: Duration::from_secs(5) };
    let sig = NodeSignals::default();
    // 10 slots, 2 reserved: a 9th request does not fit, an 8th does.
    assert!(!full(&sig, &limits, 7.0) && full(&sig, &limits, 8.0));
    // 20 % of 4 slots reserves none: only the slots count.
    let small = PoolLimits { max_running: 4, ..limits };
    assert!(!full(&sig, &small, 3.0) && full(&sig, &small, 4.0));
    assert_eq!(reserved(10.0, 0.2), 2.0);
    assert_eq!(reserved(4.0, 0.2), 0.0);
}
