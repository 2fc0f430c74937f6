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
//! This loop writes only the board and the router's "seen by a scrape" marks; it does not
//! publish snapshots.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Semaphore;
use tokio::task::{AbortHandle, JoinSet};

use super::scrape_node::NodeScraper;
pub use super::scrape_node::{next_delay, Target, MAX_BODY_BYTES};
use crate::canonical::NodeKey;
use crate::config::{AgentAddress, BackendKind, EngineSetting, TelemetryConfig};
use crate::fleet::load::NodeLoad;
use crate::fleet::telemetry::TelemetryBoard;
use crate::snapshot::Snapshot;

pub use super::scrape_error::ScrapeError;

/// Most scrapes in flight at once, over all nodes.
pub const MAX_CONCURRENT_SCRAPES: usize = 32;

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

/// Scrape every self-hosted node of the current snapshot until the task is aborted (aborting it
/// stops every node's task too).
pub async fn run(
    snapshot: Arc<ArcSwap<Snapshot>>,
    board: Arc<TelemetryBoard>,
    load: Arc<NodeLoad>,
    cfg: TelemetryConfig,
    client: reqwest::Client,
) {
    let interval = Duration::from_millis(cfg.interval_ms.max(1));
    let permits = Arc::new(Semaphore::new(MAX_CONCURRENT_SCRAPES));
    let mut tasks = JoinSet::new();
    let mut nodes: HashMap<NodeKey, (Target, AbortHandle)> = HashMap::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let wanted = targets(&snapshot.load());
        nodes.retain(|key, (target, task)| {
            let keep = wanted.get(key) == Some(target);
            if !keep {
                task.abort();
            }
            keep
        });
        for (key, target) in wanted {
            if nodes.contains_key(&key) {
                continue;
            }
            let node = NodeScraper {
                key: key.clone(),
                target: target.clone(),
                board: board.clone(),
                load: load.clone(),
                client: client.clone(),
                permits: permits.clone(),
                cfg: cfg.clone(),
                engine: target.engine.fixed(),
                last_page: None,
                info_in: 0,
            };
            let task = tasks.spawn(node.run());
            nodes.insert(key, (target, task));
        }
        board.retain(|k| nodes.contains_key(k));
        while tasks.try_join_next().is_some() {}
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
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new().name("spillway-scrape".into()).spawn(move || {
        rt.block_on(async move {
            tokio::select! {
                _ = run(snapshot, board, load, cfg, client) => {}
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
            let discovered = std::collections::BTreeMap::from([(
                "pool".to_string(),
                vec!["http://10.0.0.5:8000".to_string()],
            )]);
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
