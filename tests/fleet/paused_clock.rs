//! The timing of the guards and the loops that publish them, in process under tokio's paused
//! clock: a breaker opens and lets one probe through `open_secs` later, an upstream's
//! `Retry-After` holds it open for longer; an operator's hold lands in the next snapshot and
//! stays until released; canary rounds go out on their interval and not before; a quota window
//! starts over at the minute boundary. Time moves only by `tokio::time::advance`, so each test
//! checks the exact instant a thing changes, and takes no real time to wait for it.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use spillway::canonical::NodeKey;
use spillway::config::{self, Config, Priority};
use spillway::control::balancing::AvailabilityBoard;
use spillway::control::canary::Canaries;
use spillway::control::discovery::DiscoveredNodes;
use spillway::control::snapshot_loop::{self, Sources};
use spillway::dispatch::{Dispatcher, Keys};
use spillway::fleet::load::{LoadView, NodeLoad};
use spillway::fleet::telemetry::TelemetryBoard;
use spillway::guard::breaker::BreakerBoard;
use spillway::guard::holds::{HoldBoard, HoldKind, Scope};
use spillway::guard::node::NodeBoard;
use spillway::guard::quota::{Clock, QuotaBoard, QuotaDecision, QuotaOptions};
use spillway::metrics::Metrics;
use spillway::route::{self, RequestFacts};
use spillway::snapshot::{BreakerView, Snapshot};
use tokio::sync::watch;
use tokio::time::Instant;

/// The snapshot loop's period, as the router runs it.
const PERIOD: Duration = Duration::from_millis(100);

/// Two hosted backends, tried in order; breakers open after two failures, for one second.
const HOSTED: &str = r#"
backends:
  - {name: first, kind: openai, model: gpt}
  - {name: second, kind: anthropic, model: claude}
tasks:
  - {name: hosted, backends: [first, second], strategy: priority, slo: {ttft_ms: 1000}}
dispatch: {breaker: {consecutive_failures: 2, open_secs: 1}}
"#;

/// A pool with a reserve, then a hosted backend with a quota of two requests a minute.
const POOL_AND_QUOTA: &str = r#"
backends:
  - {name: pool, kind: vllm, endpoints: ["http://127.0.0.1:9"], model: m, reserve: 0.2}
  - {name: hosted, kind: openai, model: gpt, quota: {rpm: 2}}
tasks:
  - {name: t, backends: [pool, hosted], slo: {ttft_ms: 800}}
"#;

/// The snapshot loop running on its boards, as `app::start` wires it.
struct Loop {
    config: Arc<Config>,
    current: Arc<ArcSwap<Snapshot>>,
    breakers: Arc<BreakerBoard>,
    holds: Arc<HoldBoard>,
    task: tokio::task::JoinHandle<()>,
    _discovered: watch::Sender<DiscoveredNodes>,
}

impl Drop for Loop {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Loop {
    /// Start the loop on `yaml`; its first snapshot is published before this returns.
    async fn start(yaml: &str, over_quota: Box<dyn Fn(&str) -> bool + Send + Sync>) -> Loop {
        let config = Arc::new(config::parse(yaml).unwrap_or_else(|p| panic!("{p:#?}")));
        let current = Arc::new(ArcSwap::from_pointee(Snapshot::from_config(Arc::clone(&config))));
        let breakers = BreakerBoard::new(config.dispatch.breaker.clone());
        let holds = Arc::new(HoldBoard::default());
        let (discovered, rx) = watch::channel(DiscoveredNodes::new());
        let sources = Sources {
            config: Arc::new(ArcSwap::new(Arc::clone(&config))),
            nodes: NodeBoard::new(Arc::clone(&breakers), NodeLoad::new()),
            telemetry: TelemetryBoard::new(),
            discovered: rx,
            pins: Arc::default(),
            gate: Arc::new(spillway::control::snapshot_loop::NoGate),
            over_quota,
            availability: AvailabilityBoard::new(&config),
            holds: Arc::clone(&holds),
            shares: Default::default(),
            share_feedback: Default::default(),
        };
        let task = tokio::spawn(snapshot_loop::run(Arc::clone(&current), sources, PERIOD));
        let l = Loop { config, current, breakers, holds, task, _discovered: discovered };
        settle().await;
        assert_eq!(l.current.load().version, 2, "the loop publishes over the first snapshot at once");
        l
    }

    /// Let `by` pass on the paused clock: the snapshot the loop published at the end of it
    /// (every pass here ends on one of its ticks).
    async fn pass(&self, by: Duration) -> Arc<Snapshot> {
        let version = self.current.load().version;
        tokio::time::advance(by).await;
        settle().await;
        let snap = self.current.load_full();
        assert!(snap.version > version, "no snapshot published in the last {by:?}");
        snap
    }

    fn node_key(&self, backend: usize) -> NodeKey {
        self.current.load().backends[backend].nodes[0].key.clone()
    }
}

/// Let every task whose timer fired run to its next wait (none of them waits on anything but
/// the clock and each other, so a few turns of the single-threaded scheduler are enough).
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Backend `b`'s first node in `snap`: its breaker, and why it is held.
fn node(snap: &Snapshot, b: usize) -> (BreakerView, Option<&str>) {
    let n = &snap.backends[b].nodes[0];
    (n.breaker, n.held.as_deref())
}

/// The backends a request to `task` would try, in order.
fn plan(snap: &Snapshot, task: &str) -> Vec<String> {
    let task = snap.config.task(task).unwrap();
    let facts = RequestFacts {
        task,
        prompt_tokens: 20,
        max_output_tokens: 20,
        seed: 7,
        affinity: None,
        window: 0,
        priority: Priority::Interactive,
        load: &|_| LoadView::default(),
        request: None,
        candidates: None,
        waits: None,
        cached: None,
    };
    let plan = route::plan(&facts, snap, Instant::now()).unwrap();
    plan.targets.iter().map(|t| snap.backends[t.backend].name.clone()).collect()
}

fn no_quota() -> Box<dyn Fn(&str) -> bool + Send + Sync> {
    Box::new(|_| false)
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opens_and_lets_one_probe_through_open_secs_later() {
    let l = Loop::start(HOSTED, no_quota()).await;
    let key = l.node_key(0);
    let t0 = Instant::now();
    for _ in 0..2 {
        l.breakers.try_acquire(&key, t0).unwrap().failure(t0);
    }
    assert_eq!(node(&l.current.load(), 0).0, BreakerView::Closed, "published at the next tick");
    let snap = l.pass(PERIOD).await;
    assert_eq!(node(&snap, 0).0, BreakerView::Open);
    assert_eq!(plan(&snap, "hosted"), ["second", "first"], "an open breaker is the last resort");
    assert!(l.breakers.try_acquire(&key, Instant::now()).is_none(), "no call while open");

    // Still open 1 ms before open_secs are up.
    tokio::time::advance(Duration::from_millis(899)).await;
    assert!(l.breakers.try_acquire(&key, Instant::now()).is_none());
    let snap = l.pass(Duration::from_millis(1)).await;
    assert_eq!(Instant::now() - t0, Duration::from_secs(1));
    assert_eq!(node(&snap, 0).0, BreakerView::HalfOpen);
    assert_eq!(plan(&snap, "hosted"), ["first", "second"]);
    let probe = l.breakers.try_acquire(&key, Instant::now()).expect("one probe after open_secs");
    assert!(l.breakers.try_acquire(&key, Instant::now()).is_none(), "one probe at a time");
    probe.success(Instant::now());
    let snap = l.pass(PERIOD).await;
    assert_eq!(node(&snap, 0).0, BreakerView::Closed, "the probe's success closes it");
    assert!(l.breakers.try_acquire(&key, Instant::now()).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_opens_the_breaker_for_another_open_secs() {
    let l = Loop::start(HOSTED, no_quota()).await;
    let key = l.node_key(0);
    let t0 = Instant::now();
    for _ in 0..2 {
        l.breakers.try_acquire(&key, t0).unwrap().failure(t0);
    }
    let snap = l.pass(Duration::from_secs(1)).await;
    assert_eq!(node(&snap, 0).0, BreakerView::HalfOpen);
    l.breakers.try_acquire(&key, Instant::now()).unwrap().failure(Instant::now());
    let snap = l.pass(PERIOD).await;
    assert_eq!(node(&snap, 0).0, BreakerView::Open);
    let snap = l.pass(Duration::from_millis(899)).await;
    assert_eq!(node(&snap, 0).0, BreakerView::Open, "1.999 s: open again since 1 s");
    let snap = l.pass(Duration::from_millis(1)).await;
    assert_eq!(node(&snap, 0).0, BreakerView::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_holds_the_breaker_open_past_open_secs() {
    let l = Loop::start(HOSTED, no_quota()).await;
    let key = l.node_key(0);
    let t0 = Instant::now();
    for _ in 0..2 {
        l.breakers.try_acquire(&key, t0).unwrap().failure(t0);
    }
    // The failing upstream said `Retry-After: 3`: that is the floor on how long it stays open.
    l.breakers.hold(&key, t0, Duration::from_secs(3));
    let snap = l.pass(Duration::from_secs(1)).await;
    assert_eq!(node(&snap, 0).0, BreakerView::Open, "open_secs are up, the hold is not");
    assert!(l.breakers.try_acquire(&key, Instant::now()).is_none());
    let snap = l.pass(Duration::from_millis(1_999)).await;
    assert_eq!(node(&snap, 0).0, BreakerView::Open);
    assert_eq!(l.breakers.held_for(&key, Instant::now()), Some(Duration::from_millis(1)));
    let snap = l.pass(Duration::from_millis(1)).await;
    assert_eq!(Instant::now() - t0, Duration::from_secs(3));
    assert_eq!(node(&snap, 0).0, BreakerView::HalfOpen);
    let _probe = l.breakers.try_acquire(&key, Instant::now()).expect("one probe once the hold is over");
    assert!(l.breakers.try_acquire(&key, Instant::now()).is_none(), "one probe at a time");

    // A hold alone (a 429 with Retry-After, no failures) keeps a closed breaker's node out too.
    let other = l.node_key(1);
    l.breakers.hold(&other, Instant::now(), Duration::from_secs(2));
    let snap = l.pass(PERIOD).await;
    assert_eq!(node(&snap, 1).0, BreakerView::Open);
    let snap = l.pass(Duration::from_millis(1_900)).await;
    assert_eq!(node(&snap, 1).0, BreakerView::Closed, "the hold is over");
}

#[tokio::test(start_paused = true)]
async fn an_operator_hold_lands_in_the_next_snapshot_and_stays_until_released() {
    let l = Loop::start(HOSTED, no_quota()).await;
    assert_eq!(plan(&l.current.load(), "hosted"), ["first", "second"]);
    l.holds.hold(Scope::Backend("first".into()), HoldKind::Drained, "alice");
    assert_eq!(node(&l.current.load(), 0).1, None, "published at the next tick");
    let snap = l.pass(PERIOD).await;
    assert_eq!(node(&snap, 0).1, Some("backend drained by alice"));
    assert_eq!(plan(&snap, "hosted"), ["second"], "planning never offers a held node");
    // A hold has no expiry: an hour later it is still there.
    let snap = l.pass(Duration::from_secs(3_600)).await;
    assert_eq!(node(&snap, 0).1, Some("backend drained by alice"));
    // A node's own hold says so, over its backend's.
    let key = l.node_key(0);
    l.holds.hold(Scope::Node(key), HoldKind::Disabled, "bob");
    let snap = l.pass(PERIOD).await;
    assert_eq!(node(&snap, 0).1, Some("node disabled by bob"));
    l.holds.release(&Scope::Node(l.node_key(0)));
    assert!(l.holds.release(&Scope::Backend("first".into())));
    let snap = l.pass(PERIOD).await;
    assert_eq!(node(&snap, 0).1, None);
    assert_eq!(plan(&snap, "hosted"), ["first", "second"], "released: first again");
}

#[tokio::test(start_paused = true)]
async fn canary_rounds_go_out_on_their_interval_and_not_before() {
    let l = Loop::start(POOL_AND_QUOTA, no_quota()).await;
    // Every node of the fallback is held, so a round records its result without a call.
    l.holds.hold(Scope::Backend("hosted".into()), HoldKind::Disabled, "carol");
    l.pass(PERIOD).await;
    let (records, _kept) = tokio::sync::mpsc::unbounded_channel();
    let dispatcher = Dispatcher::new(
        l.config.dispatch.clone(),
        &l.config.tls,
        Keys { api_keys: Default::default(), client_keys: Vec::new(), admin_token: None },
        records,
        QuotaBoard::new(&l.config, None),
    );
    let metrics = Arc::new(Metrics::new());
    let canaries = Canaries {
        snapshot: Arc::clone(&l.current),
        dispatcher: Arc::new(dispatcher),
        metrics: Arc::clone(&metrics),
        board: Arc::default(),
    };
    let rounds = |metrics: &Metrics| {
        let text = metrics.render();
        let series = r#"spillway_canaries_total{backend="hosted",result="failed"} "#;
        text.lines().find_map(|l| l.strip_prefix(series)?.parse::<u64>().ok()).unwrap_or(0)
    };
    let interval = Duration::from_secs(60);
    let running = tokio::spawn(canaries.clone().run(interval));
    settle().await; // the loop takes its start time
    l.pass(interval - Duration::from_millis(1)).await;
    assert!(canaries.board.last().is_empty(), "no round before the first interval is up");
    assert_eq!(rounds(&metrics), 0);
    l.pass(Duration::from_millis(1)).await;
    let last = canaries.board.last();
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!((last[0].backend.as_str(), last[0].task.as_str(), last[0].ok), ("hosted", "t", false));
    assert_eq!(last[0].error.as_deref(), Some("every node is held by an operator"));
    assert_eq!(rounds(&metrics), 1, "the first choice (pool) is never probed");
    l.pass(interval - Duration::from_millis(1)).await;
    assert_eq!(rounds(&metrics), 1);
    l.pass(Duration::from_millis(1)).await;
    assert_eq!(rounds(&metrics), 2, "one round per interval");
    running.abort();
}

/// A wall clock for the quota windows that starts at `unix_ms` and moves with tokio's clock,
/// so `tokio::time::advance` crosses minute boundaries.
fn paused_wall_clock(unix_ms: u64) -> Clock {
    let start = Instant::now();
    Arc::new(move || unix_ms + start.elapsed().as_millis() as u64)
}

#[tokio::test(start_paused = true)]
async fn a_quota_window_starts_over_at_the_minute_boundary() {
    // 30 s into a minute.
    let t0 = 29_000_000 * 60_000 + 30_000;
    let config = config::parse(POOL_AND_QUOTA).unwrap();
    let quota = QuotaBoard::with_options(
        &config,
        QuotaOptions { clock: paused_wall_clock(t0), ..QuotaOptions::default() },
    );
    let over = Arc::clone(&quota);
    let l = Loop::start(POOL_AND_QUOTA, Box::new(move |b| over.exhausted(b))).await;
    assert!(quota.try_take("hosted", 10, 1.0).await.is_granted());
    assert!(quota.try_take("hosted", 10, 1.0).await.is_granted());
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        quota.try_take("hosted", 10, 1.0).await,
        QuotaDecision::OverQuota { retry_after: Duration::from_secs(20) },
        "refused until the minute is over, 20 s on"
    );
    // The pool's reserve is released while the hosted quota is gone.
    let snap = l.pass(PERIOD).await;
    assert!(snap.backends[0].reserve_released);
    let snap = l.pass(Duration::from_millis(19_899)).await;
    assert!(snap.backends[0].reserve_released, "1 ms before the minute ends");
    assert!(!quota.try_take("hosted", 10, 1.0).await.is_granted());
    // The next minute: the quota is whole again, and the reserve back.
    let snap = l.pass(Duration::from_millis(1)).await;
    assert_eq!(quota.usage("hosted").unwrap().requests, 0);
    assert!(!snap.backends[0].reserve_released, "the reserve is back with the new minute");
    assert!(quota.try_take("hosted", 10, 1.0).await.is_granted());
    assert!(quota.try_take("hosted", 10, 1.0).await.is_granted());
    assert!(!quota.try_take("hosted", 10, 1.0).await.is_granted(), "two a minute, in this minute too");
}
