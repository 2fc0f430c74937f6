//! Scraping shared between replicas through the machine's Redis (127.0.0.1:6379, each test under
//! its own key prefix): three in-process routers over ten simulated vLLM nodes scrape each node
//! twice an interval between them (counted by the nodes themselves), every replica sees every
//! node fresh, and when a replica goes the other two take its nodes over. Without Redis every
//! replica scrapes every node.

use std::time::{Duration, Instant};

use crate::common::{self, metric, router_with, sim, wait_until};
use spillway::sim::{SimHandle, SimKind};

const MODEL: &str = "m";
const NODES: usize = 10;
const INTERVAL_MS: u64 = 100;

fn yaml(nodes: &[SimHandle], redis: &str) -> String {
    let endpoints: Vec<String> = nodes.iter().map(SimHandle::base_url).collect();
    format!(
        "backends:\n  - {{name: fleet, kind: vllm, model: {MODEL}, endpoints: [{}]}}\n\
         tasks: [{{name: t, backends: [fleet], slo: {{ttft_ms: 1000}}}}]\n\
         telemetry: {{interval_ms: {INTERVAL_MS}, stale_after_ms: 1500, backoff_max_ms: 300}}\n\
         state: {{redis_url: \"{redis}\"}}\n",
        endpoints.join(", ")
    )
}

fn options(prefix: &str) -> spillway::app::Options {
    spillway::app::Options { telemetry_prefix: Some(prefix.to_string()), ..Default::default() }
}

async fn redis_up() -> bool {
    let up = tokio::net::TcpStream::connect("127.0.0.1:6379").await.is_ok();
    assert!(up || std::env::var_os("SPILLWAY_REQUIRE_REDIS").is_none(), "Redis is not reachable");
    if !up {
        eprintln!("WARNING: Redis not reachable at 127.0.0.1:6379; shared scraping not tested");
    }
    up
}

async fn sum_of(routers: &[&common::Router], series: &str) -> f64 {
    let mut total = 0.0;
    for r in routers {
        total += metric(r, series).await;
    }
    total
}

/// Wait until the routers' assignments add up to `want` node scrapers, all sharing.
async fn wait_assigned(routers: &[&common::Router], want: f64) {
    wait_until(Duration::from_secs(10), format!("{want} node assignments"), || async move {
        let (assigned, sharing) = (
            sum_of(routers, "spillway_telemetry_assigned_nodes").await,
            sum_of(routers, "spillway_telemetry_sharing").await,
        );
        if assigned == want && sharing == routers.len() as f64 {
            Ok(())
        } else {
            Err(format!("assigned {assigned}, sharing {sharing}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_scrape_each_node_twice_and_all_see_every_node() {
    if !redis_up().await {
        return;
    }
    let mut nodes = Vec::new();
    for _ in 0..NODES {
        nodes.push(sim(SimKind::Vllm, MODEL, |_| {}).await);
    }
    let prefix = format!("spillway-test:{}:scrape:{:08x}", std::process::id(), rand::random::<u32>());
    let config = yaml(&nodes, "redis://127.0.0.1:6379");
    let a = router_with(&config, &[], options(&prefix)).await;
    let b = router_with(&config, &[], options(&prefix)).await;
    let c = router_with(&config, &[], options(&prefix)).await;
    // Two scrapers per node between the three.
    wait_assigned(&[&a, &b, &c], 2.0 * NODES as f64).await;

    // Count each node's page requests over a window of about 20 intervals.
    let before: Vec<u64> = nodes.iter().map(SimHandle::pages_served).collect();
    let (scrapes0, started) =
        (sum_of(&[&a, &b, &c], "spillway_telemetry_scrapes_total").await, Instant::now());
    let want = scrapes0 + 20.0 * 2.0 * NODES as f64;
    wait_until(Duration::from_secs(10), "20 intervals of scrapes", || async {
        let now = sum_of(&[&a, &b, &c], "spillway_telemetry_scrapes_total").await;
        if now >= want {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    let intervals = started.elapsed().as_secs_f64() * 1000.0 / INTERVAL_MS as f64;
    for (i, n) in nodes.iter().enumerate() {
        let per_interval = (n.pages_served() - before[i]) as f64 / intervals;
        // Two scrapers, each every interval ± 10 %: about 2; three replicas each scraping would
        // be 3, one alone 1.
        assert!((1.5..=2.4).contains(&per_interval), "node {i}: {per_interval:.2} scrapes per interval");
    }
    // Every replica sees every node fresh, those rendezvous gives to the others through their
    // readings. A replica chosen for all ten nodes has no peer to read: each node leaves a given
    // replica out with odds 1/3, so that happens in about one run in 20.
    let mut readers = 0;
    for r in [&a, &b, &c] {
        common::wait_fresh(r, Duration::from_secs(2)).await;
        if metric(r, "spillway_telemetry_assigned_nodes").await == NODES as f64 {
            continue;
        }
        readers += 1;
        // Within some intervals: a busy machine (a full test run beside it) has delayed a
        // replica's first peer read past 30.
        wait_until(Duration::from_secs(10), "a reading taken from a peer", || async {
            let peer = metric(r, "spillway_telemetry_peer_readings_total").await;
            if peer > 0.0 {
                Ok(())
            } else {
                Err(peer)
            }
        })
        .await;
    }
    assert!(readers >= 1, "20 assignments between 3 replicas leave one without every node");

    // A replica leaves: after its heartbeat lapses the other two scrape every node.
    drop(c);
    wait_assigned(&[&a, &b], 2.0 * NODES as f64).await;
    for r in [&a, &b] {
        assert_eq!(metric(r, "spillway_telemetry_assigned_nodes").await, NODES as f64);
        common::wait_fresh(r, Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_away_every_replica_scrapes_every_node_then_sharing_resumes() {
    if !redis_up().await {
        return;
    }
    let mut nodes = Vec::new();
    for _ in 0..4 {
        nodes.push(sim(SimKind::Vllm, MODEL, |_| {}).await);
    }
    let proxy = common::RedisProxy::start(0).await;
    let prefix = format!("spillway-test:{}:away:{:08x}", std::process::id(), rand::random::<u32>());
    let config = yaml(&nodes, &format!("redis://127.0.0.1:{}", proxy.port));
    let a = router_with(&config, &[], options(&prefix)).await;
    let b = router_with(&config, &[], options(&prefix)).await;
    let c = router_with(&config, &[], options(&prefix)).await;
    wait_assigned(&[&a, &b, &c], 8.0).await;

    let port = proxy.cut().await;
    wait_until(Duration::from_secs(10), "every replica to scrape every node", || async {
        let (assigned, sharing) = (
            sum_of(&[&a, &b, &c], "spillway_telemetry_assigned_nodes").await,
            sum_of(&[&a, &b, &c], "spillway_telemetry_sharing").await,
        );
        if assigned == 12.0 && sharing == 0.0 {
            Ok(())
        } else {
            Err(format!("assigned {assigned}, sharing {sharing}"))
        }
    })
    .await;
    for r in [&a, &b, &c] {
        common::wait_fresh(r, Duration::from_secs(2)).await;
    }

    let _proxy = common::RedisProxy::start(port).await;
    wait_assigned(&[&a, &b, &c], 8.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_replica_scrapes_every_node_itself() {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(sim(SimKind::Vllm, MODEL, |_| {}).await);
    }
    // Nothing listens on port 1: Redis is away from the start.
    let r = router_with(&yaml(&nodes, "redis://127.0.0.1:1"), &[], options("spillway-test:away")).await;
    assert_eq!(metric(&r, "spillway_telemetry_assigned_nodes").await, 3.0);
    assert_eq!(metric(&r, "spillway_telemetry_sharing").await, 0.0);
    let before: Vec<u64> = nodes.iter().map(SimHandle::pages_served).collect();
    wait_until(Duration::from_secs(5), "every node scraped again", || async {
        let now: Vec<u64> = nodes.iter().map(SimHandle::pages_served).collect();
        if now.iter().zip(&before).all(|(n, b)| n > b) {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;
}

/// Two deployments (or one mid-rollout, its replicas with different node sets) on one Redis
/// prefix: rendezvous gives some of each one's nodes to the other, which cannot scrape them;
/// each takes those nodes back once no reading of them comes, and sees all of its nodes fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_know_other_nodes_leave_none_of_theirs_unscraped() {
    if !redis_up().await {
        return;
    }
    let mut nodes = Vec::new();
    for _ in 0..NODES {
        nodes.push(sim(SimKind::Vllm, MODEL, |_| {}).await);
    }
    let prefix = format!("spillway-test:{}:scrape-apart:{:08x}", std::process::id(), rand::random::<u32>());
    let (left, right) = nodes.split_at(NODES / 2);
    // One scraper per node, so rendezvous gives about half of each one's nodes to the other.
    let one = |nodes| {
        yaml(nodes, "redis://127.0.0.1:6379").replace("backoff_max_ms", "scrape_replicas: 1, backoff_max_ms")
    };
    let a = router_with(&one(left), &[], options(&prefix)).await;
    let b = router_with(&one(right), &[], options(&prefix)).await;
    // Each ends up scraping every node it knows: the other never publishes them.
    wait_assigned(&[&a, &b], NODES as f64).await;
    for r in [&a, &b] {
        let seen = metric(r, "spillway_telemetry_peer_readings_total").await;
        assert_eq!(seen, 0.0, "no reading of a node it knows came from the other");
        common::wait_fresh(r, Duration::from_secs(2)).await;
    }
}
