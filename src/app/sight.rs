//! How the router comes to see its fleet at start: the Kubernetes watches that find pool
//! nodes, the scrape loop's HTTP client, and the Redis share through which replicas split the
//! scraping between them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::control::discovery::{self, DiscoveredNodes};
use crate::control::scrape::ScrapeShare;
use crate::control::Loops;
use crate::fleet::rendezvous::ReplicaId;

/// Start a watch for each pool that discovers its nodes in Kubernetes; what they find is
/// published on the returned channel.
pub(super) async fn discovery(
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
pub(super) fn scrape_client(config: &Config) -> std::io::Result<reqwest::Client> {
    let builder = reqwest::Client::builder().timeout(Duration::from_millis(config.telemetry.timeout_ms));
    crate::adapter::tls::trusting(builder, &config.tls).build().map_err(std::io::Error::other)
}

/// The readings shared with other replicas through Redis, when there is one and the config
/// shares them (`None`: this replica scrapes every node itself).
pub(super) async fn share(
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
