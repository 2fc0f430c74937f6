//! How the router comes to see its fleet at start: the Kubernetes watches that find pool
//! nodes, the scrape thread (its HTTP client, and the Redis share through which replicas split
//! the scraping between them), and the loops that turn what it sees into snapshots, readiness,
//! availability and GPU minutes.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::boards::Boards;
use super::ledger::Ledger;
use super::Options;
use crate::config::secrets::Secrets;
use crate::config::Config;
use crate::control::discovery::{self, DiscoveredNodes};
use crate::control::scrape::{self, ScrapeShare};
use crate::control::snapshot_loop::{self, GateVerdicts};
use crate::control::{balancing, gpu_time, Loops};
use crate::fleet::rendezvous::ReplicaId;

/// What keeps watching the fleet, apart from the loops: the scrape thread, and the GPU-time
/// sampler that hands over its open minute at a stop.
pub(super) struct Sight {
    pub scrape_thread: scrape::ScrapeThread,
    pub gpu_time: Option<JoinHandle<()>>,
}

/// Start seeing the fleet: discovery, the snapshot loop (which reads `gate`'s verdicts), the
/// readiness watch, availability balancing, GPU minutes (with a ledger) and the scrape thread.
pub(super) async fn start(
    boards: &Boards,
    gate: Arc<dyn GateVerdicts>,
    (secrets, options): (&Secrets, &Options),
    ledger: Option<&Ledger>,
    loops: &mut Loops,
) -> std::io::Result<Sight> {
    let config = boards.config.load_full();
    let interval = Duration::from_secs(config.balancing.interval_secs);
    loops.spawn(balancing::run(Arc::clone(&boards.availability), interval));
    let (discovered_tx, discovered_rx) = discovery(&config, loops).await?;
    let over_quota = Arc::clone(&boards.quota);
    let sources = snapshot_loop::Sources {
        config: Arc::clone(&boards.config),
        nodes: Arc::clone(&boards.nodes),
        telemetry: Arc::clone(&boards.telemetry),
        discovered: discovered_rx,
        pins: Arc::clone(&boards.pins),
        gate,
        over_quota: Box::new(move |backend| over_quota.exhausted(backend)),
        availability: Arc::clone(&boards.availability),
        holds: Arc::clone(&boards.holds),
        shares: Default::default(),
        share_feedback: Arc::clone(&boards.share_feedback),
    };
    loops.spawn(snapshot_loop::run(Arc::clone(&boards.snapshot), sources, Duration::from_millis(100)));
    let startup = Arc::clone(&boards.readiness.startup);
    loops.spawn(crate::api::readiness::watch(startup, Arc::clone(&boards.snapshot)));
    let gpu_time = ledger.map(|l| {
        let sources = gpu_time::Sources {
            snapshot: Arc::clone(&boards.snapshot),
            telemetry: Arc::clone(&boards.telemetry),
            discovered: discovered_tx.subscribe(),
            metrics: Arc::clone(&boards.metrics),
        };
        tokio::spawn(gpu_time::run(sources, l.sender.clone(), Duration::from_secs(1), loops.token()))
    });
    // Scraping and parsing run on a thread of their own, away from the request path.
    let share = share(&config, secrets.redis_url.as_deref(), options.telemetry_prefix.as_deref()).await?;
    let scrape_thread = scrape::spawn_thread_with(scrape::Scraping {
        snapshot: Arc::clone(&boards.snapshot),
        board: Arc::clone(&boards.telemetry),
        load: Arc::clone(&boards.load),
        cfg: config.telemetry.clone(),
        client: scrape_client(&config)?,
        share,
        metrics: boards.metrics.telemetry.clone(),
    })?;
    Ok(Sight { scrape_thread, gpu_time })
}

/// Start a watch for each pool that discovers its nodes in Kubernetes; what they find is
/// published on the returned channel.
async fn discovery(
    config: &Config,
    loops: &mut Loops,
) -> std::io::Result<(watch::Sender<DiscoveredNodes>, watch::Receiver<DiscoveredNodes>)> {
    let (discovered_tx, discovered_rx) = watch::channel(DiscoveredNodes::new());
    let kube_backends: Vec<_> = config
        .backends
        .iter()
        .filter_map(|b| b.pool()?.discovery.as_ref().map(|d| (b.name.clone(), d.kubernetes.clone())))
        .collect();
    if !kube_backends.is_empty() {
        let client = discovery::client_from_env().await.map_err(std::io::Error::other)?;
        for (backend, cfg) in kube_backends {
            loops.spawn(discovery::run(backend, cfg, client.clone(), discovered_tx.clone()));
        }
    }
    Ok((discovered_tx, discovered_rx))
}

/// The client for what the scrape loop's own connections cannot do (`https://`, redirects).
fn scrape_client(config: &Config) -> std::io::Result<reqwest::Client> {
    let builder = reqwest::Client::builder().timeout(Duration::from_millis(config.telemetry.timeout_ms));
    crate::adapter::transport::tls::trusting(builder, &config.tls).build().map_err(std::io::Error::other)
}

/// The readings shared with other replicas through Redis, when there is one and the config
/// shares them (`None`: this replica scrapes every node itself).
async fn share(
    config: &Config,
    redis_url: Option<&str>,
    prefix: Option<&str>,
) -> std::io::Result<Option<Arc<ScrapeShare>>> {
    let (Some(url), true) = (redis_url, config.telemetry.share_readings) else { return Ok(None) };
    let t = &config.telemetry;
    let share = ScrapeShare::new(
        url,
        prefix.unwrap_or("spillway:telemetry"),
        replica_id(),
        t.scrape_replicas as usize,
        Duration::from_millis(t.interval_ms),
        Duration::from_millis(t.stale_after_ms),
    )
    .map_err(std::io::Error::other)?;
    if !share.connect(Duration::from_millis(500)).await {
        tracing::warn!("Redis is not reachable: this replica scrapes every node itself until it is");
    }
    Ok(Some(share))
}

/// This replica's id among those sharing telemetry: the host (the pod's name under Kubernetes)
/// and a random suffix, so a restarted pod is a new replica.
fn replica_id() -> ReplicaId {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "spillway".into());
    ReplicaId::new(format!("{host}-{:08x}", rand::random::<u32>()))
}
