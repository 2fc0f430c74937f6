//! Assembling a running router from a config: secrets from the environment, the snapshot and
//! its loops, dispatch, the bookkeeping channel, and the HTTP listener.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};

use crate::api::{self, AppState, RouterHandle};
use crate::config::Config;
use crate::control::balancing::{self, AvailabilityBoard};
use crate::control::discovery::{self, DiscoveredNodes};
use crate::control::pins::PinBoard;
use crate::control::quota::QuotaBoard;
use crate::control::{breaker::BreakerBoard, scrape, snapshot_loop};
use crate::dispatch::Dispatcher;
use crate::fleet::load::NodeLoad;
use crate::fleet::telemetry::TelemetryBoard;
use crate::outcome::{self, Record};
use crate::route::Snapshot;

/// Secrets read from the environment: client keys (value → env name) and API keys by backend.
#[derive(Default)]
pub struct Secrets {
    pub client_keys: HashMap<String, String>,
    pub backend_keys: HashMap<String, String>,
    /// `state.redis_url`, or the value of `state.redis_url_env`.
    pub redis_url: Option<String>,
}

/// Read every environment variable the config names; each one missing is a problem.
pub fn read_secrets(config: &Config, env: impl Fn(&str) -> Option<String>) -> Result<Secrets, Vec<String>> {
    let mut missing = Vec::new();
    let mut client_keys = HashMap::new();
    for name in &config.client_keys_env {
        match env(name).filter(|v| !v.trim().is_empty()) {
            Some(value) => {
                client_keys.insert(value.trim().to_string(), name.clone());
            }
            None => missing.push(format!("client_keys_env: environment variable {name} is not set")),
        }
    }
    let mut backend_keys = HashMap::new();
    for b in &config.backends {
        if let Some(name) = &b.api_key_env {
            match env(name).filter(|v| !v.trim().is_empty()) {
                Some(value) => {
                    backend_keys.insert(b.name.clone(), value.trim().to_string());
                }
                None => missing.push(format!("backend {}: environment variable {name} is not set", b.name)),
            }
        }
    }
    let redis_url = match (&config.state.redis_url, &config.state.redis_url_env) {
        (Some(url), _) => Some(url.clone()),
        (None, Some(name)) => match env(name).filter(|v| !v.trim().is_empty()) {
            Some(url) => Some(url.trim().to_string()),
            None => {
                missing.push(format!("state.redis_url_env: environment variable {name} is not set"));
                None
            }
        },
        (None, None) => None,
    };
    if missing.is_empty() {
        Ok(Secrets { client_keys, backend_keys, redis_url })
    } else {
        Err(missing)
    }
}

/// Start a router on `listener` with `config` and `secrets`; it serves until the handle's
/// task is aborted or `shutdown` resolves.
pub async fn start(
    config: Config,
    secrets: Secrets,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<RouterHandle> {
    let config = Arc::new(config);
    let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_config(Arc::clone(&config))));
    let breakers = BreakerBoard::new(config.dispatch.breaker.clone());
    let telemetry = TelemetryBoard::new();
    let load = NodeLoad::new();
    let pins = Arc::new(PinBoard::default());
    let (records_tx, records_rx) = mpsc::channel::<Record>(65_536);
    let mut loops = tokio::task::JoinSet::new();
    let tally = Arc::new(std::sync::Mutex::new(outcome::Tally::default()));
    let availability = AvailabilityBoard::new(&config);
    loops.spawn(outcome::consume(records_rx, Arc::clone(&tally), Arc::clone(&availability)));
    loops.spawn(balancing::run(
        Arc::clone(&availability),
        Duration::from_secs(config.balancing.interval_secs),
    ));

    let (discovered_tx, discovered_rx) = watch::channel(DiscoveredNodes::new());
    let kube_backends: Vec<_> = config
        .backends
        .iter()
        .filter_map(|b| b.discovery.as_ref().map(|d| (b.name.clone(), d.kubernetes.clone())))
        .collect();
    if !kube_backends.is_empty() {
        let client = discovery::client_from_env().await.map_err(std::io::Error::other)?;
        for (backend, cfg) in kube_backends {
            loops.spawn(discovery::run(backend, cfg, client.clone(), discovered_tx.clone()));
        }
    }
    let quota = QuotaBoard::new(&config, secrets.redis_url.clone());
    if secrets.redis_url.is_some() && !quota.wait_shared(Duration::from_secs(2)).await {
        tracing::warn!("Redis is not reachable: quotas are counted per replica until it is");
    }
    tokio::task::spawn_blocking(crate::tokens::warm_up);
    let over_quota = Arc::clone(&quota);
    let sources = snapshot_loop::Sources {
        config: Arc::clone(&config),
        breakers: Arc::clone(&breakers),
        telemetry: Arc::clone(&telemetry),
        discovered: discovered_rx,
        pins,
        over_quota: Box::new(move |backend| over_quota.exhausted(backend)),
        availability: Arc::clone(&availability),
    };
    loops.spawn(snapshot_loop::run(Arc::clone(&snapshot), sources, Duration::from_millis(100)));
    let scrape_client = reqwest::Client::builder()
        .timeout(Duration::from_millis(config.telemetry.timeout_ms))
        .build()
        .map_err(std::io::Error::other)?;
    // Scraping and parsing run on a thread of their own, away from the request path.
    let scrape_thread = scrape::spawn_thread(
        Arc::clone(&snapshot),
        telemetry,
        Arc::clone(&load),
        config.telemetry.clone(),
        scrape_client,
    )?;

    let dispatcher = Dispatcher::new(
        config.dispatch.clone(),
        breakers,
        secrets.backend_keys,
        records_tx,
        Arc::clone(&load),
        Arc::clone(&quota),
    );
    let state = Arc::new(AppState {
        snapshot,
        dispatcher: Arc::new(dispatcher),
        load,
        tally,
        quota,
        client_keys: secrets.client_keys,
        limiter: Arc::new(Semaphore::new(config.limits.max_concurrency)),
        max_body_bytes: config.limits.max_body_bytes,
    });
    let addr = listener.local_addr()?;
    let app = api::router(state);
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
        loops.abort_all();
        drop(scrape_thread);
        served
    });
    Ok(RouterHandle { addr, task })
}
