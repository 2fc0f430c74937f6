//! Hosted quotas: the pure per-minute window, local counting, and counters shared by two
//! "replicas" through the real Redis at 127.0.0.1:6379 (each test under its own key prefix,
//! cleaned up afterwards), including Redis going away and coming back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway::config::{self, Config};
use spillway::guard::quota::{
    minute_of, until_next_window, Clock, Limits, MinuteWindow, QuotaBoard, QuotaDecision, QuotaOptions,
};

use crate::common::RedisProxy as Proxy;

const REDIS: &str = "redis://127.0.0.1:6379";
/// Thirty seconds into some minute: retry_after is then exactly 30 s.
const T0: u64 = 29_000_000 * 60_000 + 30_000;

fn config(quota: &str) -> Config {
    let text = format!(
        r#"
backends:
  - name: hosted
    kind: openai
    model: m
    quota: {quota}
  - name: free
    kind: openai
    model: m
tasks:
  - name: t
    backends: [hosted, free]
    slo: {{ttft_ms: 800}}
"#
    );
    config::parse(&text).unwrap_or_else(|p| panic!("{p:?}"))
}

struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn new(ms: u64) -> Self {
        TestClock(Arc::new(AtomicU64::new(ms)))
    }
    fn clock(&self) -> Clock {
        let t = Arc::clone(&self.0);
        Arc::new(move || t.load(Ordering::SeqCst))
    }
    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

fn prefix(test: &str) -> String {
    format!("spillway-test:{}:{test}:{:08x}", std::process::id(), rand::random::<u32>())
}

fn board(config: &Config, redis: Option<&str>, prefix: &str, clock: &TestClock) -> Arc<QuotaBoard> {
    QuotaBoard::with_options(
        config,
        QuotaOptions {
            redis_url: redis.map(str::to_string),
            key_prefix: prefix.to_string(),
            clock: clock.clock(),
            ..QuotaOptions::default()
        },
    )
}

async fn shared_board(config: &Config, prefix: &str, clock: &TestClock) -> Arc<QuotaBoard> {
    let b = board(config, Some(REDIS), prefix, clock);
    assert!(b.wait_shared(Duration::from_secs(3)).await, "Redis at {REDIS} must be running for these tests");
    b
}

async fn cleanup(prefix: &str) {
    let client = redis::Client::open(REDIS).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.unwrap();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();
    }
}

async fn granted(board: &QuotaBoard, n: usize, tokens: u64, ceiling: f64) -> usize {
    let mut count = 0;
    for _ in 0..n {
        if board.try_take("hosted", tokens, ceiling).await.is_granted() {
            count += 1;
        }
    }
    count
}

// ---- the pure window ----

#[test]
fn the_window_is_keyed_by_the_minute_and_retry_after_runs_to_its_end() {
    assert_eq!(minute_of(T0), 29_000_000);
    assert_eq!(until_next_window(T0), Duration::from_secs(30));
    assert_eq!(until_next_window(T0 - 30_000), Duration::from_secs(60));
    assert_eq!(until_next_window(T0 + 29_999), Duration::from_millis(1));
}

#[test]
fn a_window_counts_requests_and_tokens_and_rolls_over() {
    let limits = Limits { rpm: Some(3), tpm: Some(100) };
    let mut w = MinuteWindow::default();
    assert!(w.try_take(7, &limits, 40, 1.0));
    assert!(w.try_take(7, &limits, 40, 1.0));
    assert!(!w.try_take(7, &limits, 40, 1.0), "tokens: 120 > 100");
    assert!(w.exhausted(7, &limits), "a full-ceiling request was refused");
    assert!(w.try_take(7, &limits, 20, 1.0));
    assert!(!w.try_take(7, &limits, 0, 1.0), "requests: 4 > 3");
    assert_eq!((w.requests, w.tokens), (3, 100));
    // The next minute starts empty; an older minute (a clock step back) counts against the newer one.
    assert!(w.try_take(8, &limits, 100, 1.0));
    assert!(!w.exhausted(7, &limits));
    assert!(!w.try_take(7, &limits, 1, 1.0));
    assert_eq!((w.minute, w.requests, w.tokens), (8, 1, 100));
}

#[test]
fn a_ceiling_scales_the_limits_down() {
    let limits = Limits { rpm: Some(10), tpm: Some(1000) };
    assert_eq!(limits.scaled(0.5), Limits { rpm: Some(5), tpm: Some(500) });
    assert_eq!(limits.scaled(0.7), Limits { rpm: Some(7), tpm: Some(700) });
    assert_eq!(limits.scaled(2.0), limits);
    assert_eq!(limits.scaled(f64::NAN), limits);
    let mut w = MinuteWindow::default();
    let taken = (0..10).filter(|_| w.try_take(1, &limits, 0, 0.5)).count();
    assert_eq!(taken, 5);
    assert!(!w.exhausted(1, &limits), "refusals below the full ceiling do not exhaust the quota");
    assert_eq!((0..10).filter(|_| w.try_take(1, &limits, 0, 1.0)).count(), 5);
    assert!(w.exhausted(1, &limits));
}

#[test]
fn shared_counts_raise_the_local_view_and_corrections_never_go_negative() {
    let limits = Limits { rpm: Some(10), tpm: None };
    let mut w = MinuteWindow::default();
    w.try_take(5, &limits, 10, 1.0);
    w.observe(5, 9, 300);
    assert_eq!((w.requests, w.tokens), (9, 300));
    w.observe(5, 2, 5);
    assert_eq!((w.requests, w.tokens), (9, 300), "a smaller report never lowers the count");
    w.adjust_tokens(5, -1000);
    assert_eq!(w.tokens, 0);
    w.observe(6, 10, 0);
    assert!(w.exhausted(6, &limits));
}

// ---- local counting ----

#[tokio::test]
async fn local_counting_works_without_redis() {
    let clock = TestClock::new(T0);
    let b = board(&config("{rpm: 10}"), None, "unused", &clock);
    assert!(b.shared_state_ok() && !b.is_shared());
    assert_eq!(granted(&b, 10, 5, 1.0).await, 10);
    assert!(b.exhausted("hosted"));
    assert_eq!(
        b.try_take("hosted", 5, 1.0).await,
        QuotaDecision::OverQuota { retry_after: Duration::from_secs(30) }
    );
    // Backends without a quota are always granted, never exhausted.
    assert!(b.try_take("free", 1_000_000, 0.1).await.is_granted());
    assert!(!b.exhausted("free") && b.limits("free").is_none());
    // The next minute starts over.
    clock.advance(30_000);
    assert!(!b.exhausted("hosted"));
    assert_eq!(granted(&b, 11, 5, 1.0).await, 10);
}

#[tokio::test]
async fn a_refund_corrects_the_token_count_locally() {
    let clock = TestClock::new(T0);
    let b = board(&config("{tpm: 1000}"), None, "unused", &clock);
    assert!(b.try_take("hosted", 800, 1.0).await.is_granted());
    assert!(!b.try_take("hosted", 700, 1.0).await.is_granted());
    b.refund("hosted", 800, 300);
    assert_eq!(b.usage("hosted").unwrap().tokens, 300);
    assert!(b.try_take("hosted", 700, 1.0).await.is_granted());
    b.refund("hosted", 700, 900);
    assert_eq!(b.usage("hosted").unwrap().tokens, 1200);
    assert!(b.exhausted("hosted"));
}

// ---- shared counting through Redis ----

#[tokio::test]
async fn two_replicas_sharing_redis_respect_one_rpm_limit() {
    let p = prefix("rpm");
    let clock = TestClock::new(T0);
    let cfg = config("{rpm: 10}");
    let (a, b) = (shared_board(&cfg, &p, &clock).await, shared_board(&cfg, &p, &clock).await);
    let mut total = 0;
    for i in 0..10 {
        let replica = if i % 2 == 0 { &a } else { &b };
        assert!(replica.try_take("hosted", 1, 1.0).await.is_granted(), "request {i}");
        total += 1;
    }
    assert_eq!(total, 10);
    for replica in [&a, &b] {
        match replica.try_take("hosted", 1, 1.0).await {
            QuotaDecision::OverQuota { retry_after } => {
                assert!(retry_after <= Duration::from_secs(60) && retry_after > Duration::ZERO)
            }
            QuotaDecision::Granted => panic!("the 11th request across both replicas must be over quota"),
        }
    }
    // Each replica's local view knows the quota is gone (for the snapshot loop).
    assert!(a.exhausted("hosted") && b.exhausted("hosted"));
    assert!(a.shared_state_ok() && b.shared_state_ok());
    // The minute rolls over for both.
    clock.advance(60_000);
    assert!(!a.exhausted("hosted"));
    assert_eq!(granted(&a, 6, 1, 1.0).await + granted(&b, 6, 1, 1.0).await, 10);
    cleanup(&p).await;
}

#[tokio::test]
async fn shared_tpm_counts_tokens_and_refunds_reach_redis() {
    let p = prefix("tpm");
    let clock = TestClock::new(T0);
    let cfg = config("{tpm: 1000}");
    let (a, b) = (shared_board(&cfg, &p, &clock).await, shared_board(&cfg, &p, &clock).await);
    assert!(a.try_take("hosted", 400, 1.0).await.is_granted());
    assert!(b.try_take("hosted", 400, 1.0).await.is_granted());
    assert!(!a.try_take("hosted", 300, 1.0).await.is_granted(), "800 + 300 > 1000");
    assert!(b.try_take("hosted", 200, 1.0).await.is_granted(), "800 + 200 = 1000 fits");
    assert!(!a.try_take("hosted", 1, 1.0).await.is_granted());
    // A refund from one replica frees tokens for the other (applied in the background).
    a.refund("hosted", 400, 100);
    crate::common::wait_until(Duration::from_secs(2), "the refund to reach Redis", || async {
        b.try_take("hosted", 250, 1.0).await.is_granted()
    })
    .await;
    assert!(!b.try_take("hosted", 100, 1.0).await.is_granted());
    cleanup(&p).await;
}

#[tokio::test]
async fn a_ceiling_limits_a_request_to_its_share_of_the_shared_quota() {
    let p = prefix("ceiling");
    let clock = TestClock::new(T0);
    let cfg = config("{rpm: 10}");
    let (a, b) = (shared_board(&cfg, &p, &clock).await, shared_board(&cfg, &p, &clock).await);
    assert_eq!(granted(&a, 4, 1, 0.5).await + granted(&b, 4, 1, 0.5).await, 5);
    assert!(!a.exhausted("hosted"), "below-full refusals leave the quota to interactive traffic");
    assert_eq!(granted(&b, 10, 1, 1.0).await, 5);
    assert!(b.exhausted("hosted"));
    cleanup(&p).await;
}

#[tokio::test]
async fn an_unreachable_redis_falls_back_to_local_counting_without_failing() {
    let clock = TestClock::new(T0);
    let b = board(&config("{rpm: 10}"), Some("redis://127.0.0.1:1"), &prefix("down"), &clock);
    let started = Instant::now();
    assert_eq!(granted(&b, 11, 1, 1.0).await, 10, "the limit still holds, counted locally");
    assert!(started.elapsed() < Duration::from_secs(1), "Redis trouble must not stall requests");
    assert!(!b.shared_state_ok());
    assert!(!b.wait_shared(Duration::from_millis(200)).await);
    assert!(b.exhausted("hosted"));
    assert!(b.try_take("free", 1, 1.0).await.is_granted());
}

#[tokio::test]
async fn the_board_goes_back_to_redis_when_it_returns() {
    let p = prefix("outage");
    let clock = TestClock::new(T0);
    let cfg = config("{rpm: 100}");
    let proxy = Proxy::start(0).await;
    let url = format!("redis://127.0.0.1:{}", proxy.port);
    let b = board(&cfg, Some(&url), &p, &clock);
    assert!(b.wait_shared(Duration::from_secs(3)).await);
    assert_eq!(granted(&b, 3, 1, 1.0).await, 3);

    let port = proxy.cut().await;
    let started = Instant::now();
    assert_eq!(granted(&b, 5, 1, 1.0).await, 5, "requests keep being served during the outage");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!b.shared_state_ok());
    assert_eq!(b.usage("hosted").unwrap().requests, 8, "local counting starts from the shared count");

    let _proxy = Proxy::start(port).await;
    assert!(b.wait_shared(Duration::from_secs(10)).await, "reconnects with backoff once Redis is back");
    assert!(b.try_take("hosted", 1, 1.0).await.is_granted());
    // Redis saw the 3 before the outage and this one; the local view keeps the larger count.
    let client = redis::Client::open(REDIS).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let shared: u64 = redis::cmd("HGET")
        .arg(format!("{p}:hosted:{}", minute_of(T0)))
        .arg("r")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(shared, 4);
    assert!(b.shared_state_ok());
    cleanup(&p).await;
}
