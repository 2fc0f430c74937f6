//! The telemetry loop: scrape every self-hosted node's metrics page (and its NVML agent's,
//! where one runs) with its engine's adapter, and keep the [`TelemetryBoard`] current.
//!
//! Each node gets its own task and schedule: a scrape every `interval_ms`, stretched or
//! shrunk at random by up to `jitter` so a hundred nodes do not fire together, and doubling
//! (up to `backoff_max_ms`) while the node keeps failing. A slow or dead node therefore never
//! delays another's schedule; a semaphore bounds how many scrapes run at once. The node set is
//! re-read from the snapshot every interval (discovery adds and removes nodes); nodes that
//! left are forgotten. A pool with `engine: auto` tells each node's engine from the metric names
//! of its first good page (TensorRT-LLM's at `/prometheus/metrics` when `/metrics` has none),
//! and tells it again when a page stops reading as that engine's. Parsing happens here, in the
//! background, never on the request path; a page identical to the node's previous one (an idle
//! node) is not parsed again.
//! With several replicas and Redis (`scrape_share`), each node is scraped by
//! `telemetry.scrape_replicas` of them (rendezvous hashing over the live replicas, so the
//! assignment follows replicas coming and going), and the rest take its readings from Redis at
//! their true age; with Redis away every replica scrapes every node, as a lone router does.
//! This loop writes only the board and the router's "seen by a scrape" marks; it does not
//! publish snapshots.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Semaphore;
use tokio::task::{AbortHandle, JoinSet};

use super::scrape_node::NodeScraper;
pub use super::scrape_node::{next_delay, Target, MAX_BODY_BYTES};
use super::scrape_peers::PeerReadings;
use super::scrape_share::unix_ms;
pub use super::scrape_share::ScrapeShare;
use crate::canonical::NodeKey;
use crate::config::{AgentAddress, BackendKind, EngineSetting, TelemetryConfig};
use crate::fleet::load::NodeLoad;
use crate::fleet::rendezvous::{self, ReplicaId};
use crate::fleet::telemetry::TelemetryBoard;
use crate::guard::breaker::NodeBreaker;
use crate::metrics::TelemetryFamilies;
use crate::snapshot::Snapshot;

pub use super::scrape_error::ScrapeError;

/// Most scrapes in flight at once, over all nodes.
pub(crate) const MAX_CONCURRENT_SCRAPES: usize = 32;

/// Every self-hosted node in `snap`, by node key.
pub fn targets(snap: &Snapshot) -> HashMap<NodeKey, Target> {
    let mut out = HashMap::new();
    for b in snap.backends.iter().filter(|b| b.kind == BackendKind::Local) {
        let pool = snap.config.backends.iter().find(|c| c.name == b.name).and_then(|c| c.pool());
        let agent_port = pool.and_then(|p| p.agent_port);
        let on_host = pool.is_some_and(|p| p.agent_address == AgentAddress::Host);
        let engine = pool.map_or(EngineSetting::Auto, |p| p.engine);
        for n in &b.nodes {
            let origin = n.origin.trim_end_matches('/');
            let target = Target {
                origin: origin.to_string(),
                engine,
                agent_url: agent_port.and_then(|p| {
                    // A DaemonSet's hostPort answers on the machine's IP, not the pod's.
                    let host = n.host_ip.as_deref().filter(|_| on_host);
                    let base =
                        host.map_or_else(|| origin.to_string(), |ip| super::discovery::origin_of(ip, p));
                    agent_url(&base, p)
                }),
            };
            out.insert(n.key.clone(), target);
        }
    }
    out
}

/// The agent's `/metrics` on the node's host (plain HTTP).
fn agent_url(origin: &str, port: u16) -> Option<String> {
    let mut u = reqwest::Url::parse(origin).ok()?;
    u.set_scheme("http").ok()?;
    u.set_port(Some(port)).ok()?;
    u.set_path("/metrics");
    u.set_query(None);
    Some(u.to_string())
}

/// Every node's breaker in `snap`, by key.
fn breakers_of(snap: &Snapshot) -> HashMap<&NodeKey, Arc<NodeBreaker>> {
    let nodes = snap.backends.iter().flat_map(|b| &b.nodes);
    nodes.map(|n| (&n.key, Arc::clone(&n.handle.breaker))).collect()
}

/// What the scrape loop works with.
pub struct Scraping {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub board: Arc<TelemetryBoard>,
    pub load: Arc<NodeLoad>,
    pub cfg: TelemetryConfig,
    /// For what the loop's own connections cannot do (`https://`, redirects).
    pub client: reqwest::Client,
    /// Readings shared with other replicas through Redis (`None`: this replica scrapes every
    /// node, as a lone router does).
    pub share: Option<Arc<ScrapeShare>>,
    pub metrics: TelemetryFamilies,
}

/// Scrape every self-hosted node of the current snapshot until the task is aborted (aborting it
/// stops every node's task too).
pub async fn run(
    snapshot: Arc<ArcSwap<Snapshot>>,
    board: Arc<TelemetryBoard>,
    load: Arc<NodeLoad>,
    cfg: TelemetryConfig,
    client: reqwest::Client,
) {
    let metrics = TelemetryFamilies::default();
    run_with(Scraping { snapshot, board, load, cfg, client, share: None, metrics }).await
}

/// [`run`], sharing readings when `s.share` says so: every interval the node set is re-read
/// and (sharing) the live replicas with it; a quarter of an interval apart, this replica's
/// readings are published and the others' read.
pub(crate) async fn run_with(s: Scraping) {
    let interval = Duration::from_millis(s.cfg.interval_ms.max(1));
    let permits = Arc::new(Semaphore::new(MAX_CONCURRENT_SCRAPES));
    let mut tasks = JoinSet::new();
    let mut nodes: HashMap<NodeKey, (Target, AbortHandle)> = HashMap::new();
    let mut peers = PeerReadings::default();
    let quarters = if s.share.is_some() { 4 } else { 1 };
    let mut tick = tokio::time::interval(interval / quarters);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut live: Option<Vec<ReplicaId>> = None;
    // The wanted nodes rendezvous gives to other replicas.
    let mut theirs: HashSet<NodeKey> = HashSet::new();
    for n in 0u64.. {
        tick.tick().await;
        if n % u64::from(quarters) == 0 {
            let snap = s.snapshot.load();
            let wanted = targets(&snap);
            if let Some(share) = &s.share {
                let was_sharing = live.is_some() || n == 0;
                live = share.beat().await;
                s.metrics.sharing.set(i64::from(live.is_some()));
                if was_sharing && live.is_none() {
                    tracing::warn!("Redis is away: this replica scrapes every node itself until it is back");
                } else if n > 0 && !was_sharing && live.is_some() {
                    tracing::info!("Redis is back: node readings are shared again");
                }
            }
            let mine = |key: &NodeKey| match (&s.share, &live) {
                (Some(share), Some(live)) => rendezvous::assigned(share.me(), key, live, share.k),
                _ => true,
            };
            theirs = wanted.keys().filter(|k| !mine(k)).cloned().collect();
            peers.retain(|k| theirs.contains(k));
            let orphans = peers.orphans(&theirs, unix_ms(), 3 * interval.as_millis() as u64);
            let mine = |key: &NodeKey| !theirs.contains(key) || orphans.contains(key);
            nodes.retain(|key, (target, task)| {
                let keep = wanted.get(key) == Some(target) && mine(key);
                if !keep {
                    task.abort();
                }
                keep
            });
            // Each node's breaker, looked up once a tick starts a node's task.
            let mut breakers = None;
            for (key, target) in &wanted {
                if nodes.contains_key(key) || !mine(key) {
                    continue;
                }
                let node = NodeScraper {
                    key: key.clone(),
                    target: target.clone(),
                    board: s.board.clone(),
                    load: s.load.clone(),
                    client: s.client.clone(),
                    permits: permits.clone(),
                    cfg: s.cfg.clone(),
                    engine: target.engine.fixed(),
                    last_page: None,
                    page: Default::default(),
                    agent: Default::default(),
                    info_in: 0,
                    info: Default::default(),
                    share: s.share.clone(),
                    scrapes: s.metrics.scrapes.clone(),
                    breaker: breakers.get_or_insert_with(|| breakers_of(&snap)).get(key).cloned(),
                };
                let task = tasks.spawn(node.run());
                nodes.insert(key.clone(), (target.clone(), task));
            }
            s.metrics.assigned.set(nodes.len() as i64);
            s.board.retain(|k| wanted.contains_key(k));
            while tasks.try_join_next().is_some() {}
        }
        if let (Some(share), Some(_)) = (&s.share, &live) {
            share.flush().await;
            // Orphans this replica scrapes are read too: a peer's fresh reading ends their orphanhood.
            let others: Vec<NodeKey> = theirs.iter().cloned().collect();
            if let Some(values) = share.read(&others).await {
                let lag = Duration::from_millis(s.cfg.gauge_lag_ms);
                let taken = peers.take(&others, values, share.me(), &s.board, &s.load, lag);
                s.metrics.peer_readings.inc_by(taken);
            }
        }
    }
}

/// [`run`] on a thread of its own, with a single-threaded tokio runtime; dropping the handle
/// stops it. The preferred way to start the loop: scrapes are spread over the interval, so on
/// a multi-threaded runtime nearly every one wakes a parked worker (a futex and a context
/// switch or two), which costs more CPU than the HTTP itself; one thread that sleeps in
/// `epoll_wait` between scrapes does not, and parsing stays off the request-serving workers.
/// `client` should serve only this loop (its connections live on this thread's runtime).
pub fn spawn_thread(
    snapshot: Arc<ArcSwap<Snapshot>>,
    board: Arc<TelemetryBoard>,
    load: Arc<NodeLoad>,
    cfg: TelemetryConfig,
    client: reqwest::Client,
) -> std::io::Result<ScrapeThread> {
    let metrics = TelemetryFamilies::default();
    spawn_thread_with(Scraping { snapshot, board, load, cfg, client, share: None, metrics })
}

/// [`spawn_thread`] of [`run_with`].
pub fn spawn_thread_with(s: Scraping) -> std::io::Result<ScrapeThread> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new().name("spillway-scrape".into()).spawn(move || {
        rt.block_on(async move {
            tokio::select! {
                _ = run_with(s) => {}
                _ = stopped => {}
            }
        });
    })?;
    Ok(ScrapeThread { stop: Some(stop), thread: Some(thread) })
}

/// The scrape loop's thread; dropping it stops the loop and waits for the thread.
#[derive(Debug)]
pub struct ScrapeThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ScrapeThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Engine;

    #[test]
    fn backs_off_by_doubling_up_to_the_cap() {
        let i = Duration::from_millis(100);
        let max = Duration::from_millis(1000);
        let d = |f| next_delay(i, 0.0, max, f, 0.5);
        assert_eq!(d(0), i);
        assert_eq!(d(1), i);
        assert_eq!(d(2), Duration::from_millis(200));
        assert_eq!(d(3), Duration::from_millis(400));
        assert_eq!(d(4), Duration::from_millis(800));
        assert_eq!(d(5), max);
        assert_eq!(d(60), max);
        // Jitter: ±10 % at the extremes of r, capped while backing off.
        assert_eq!(next_delay(i, 0.1, max, 0, 0.0), Duration::from_millis(90));
        assert_eq!(next_delay(i, 0.1, max, 0, 1.0), Duration::from_millis(110));
        assert_eq!(next_delay(i, 0.1, max, 9, 1.0), max);
    }

    #[test]
    fn agent_url_uses_the_node_host() {
        assert_eq!(agent_url("http://10.0.0.5:8000", 9400).as_deref(), Some("http://10.0.0.5:9400/metrics"));
        assert_eq!(
            agent_url("https://node-a.local:8443", 9400).as_deref(),
            Some("http://node-a.local:9400/metrics")
        );
        assert_eq!(agent_url("http://[::1]:8000", 9400).as_deref(), Some("http://[::1]:9400/metrics"));
    }

    #[test]
    fn a_daemonset_agent_is_read_on_the_machine_a_sidecar_on_the_pod() {
        let yaml = |address: &str| {
            format!(
                "backends:\n  - {{name: pool, kind: vllm, model: m, agent_port: 9400, agent_address: {address},\n\
                 \x20     discovery: {{kubernetes: {{namespace: llm, selector: app=vllm}}}}}}\n\
                 tasks: [{{name: t, backends: [pool], slo: {{ttft_ms: 500}}}}]\n"
            )
        };
        for (address, want) in
            [("host", "http://192.168.1.7:9400/metrics"), ("pod", "http://10.0.0.5:9400/metrics")]
        {
            let config = std::sync::Arc::new(crate::config::parse(&yaml(address)).unwrap());
            let discovered =
                std::collections::BTreeMap::from([("pool".into(), vec!["http://10.0.0.5:8000".to_string()])]);
            let inputs = crate::snapshot::SnapshotInputs {
                discovered: &discovered,
                breaker: &|_| crate::snapshot::BreakerView::Closed,
                handle: &crate::guard::node::NodeHandle::detached,
                signals: &|_| None,
                quarantine: &|_| None,
                over_quota: &|_| false,
                availability: &|_| 1.0,
                slow: &|_| false,
                share: &|_| 1.0,
            };
            let mut snap = Snapshot::build(config, &inputs, 1);
            snap.backends[0].nodes[0].host_ip = Some("192.168.1.7".into());
            let t = targets(&snap);
            let node = t.values().next().unwrap();
            assert_eq!(node.agent_url.as_deref(), Some(want), "{address}");
            assert_eq!(node.metrics_url(None), "http://10.0.0.5:8000/metrics");
            assert_eq!(node.metrics_url(Some(Engine::Trtllm)), "http://10.0.0.5:8000/prometheus/metrics");
            assert_eq!(node.engine, EngineSetting::Auto, "each node's engine is told from its page");
        }
    }
}
