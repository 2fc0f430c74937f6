//! The composition root: a running router assembled from a config and its secrets: the
//! boards, the snapshot and its loops, dispatch, the bookkeeping channel, and the HTTP listener.

pub mod rollout;
pub mod signal;
pub mod startup;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, RouterHandle};
use crate::config::secrets::Secrets;
use crate::config::Config;
use crate::control::balancing::{self, AvailabilityBoard};
use crate::control::canary::Canaries;
use crate::control::discovery::{self, DiscoveredNodes};
use crate::control::opstate::{self, OperatorBoard};
use crate::control::pins::PinBoard;
use crate::control::reload::Reloader;
use crate::control::{books, Loops};
use crate::control::{gpu_time, scrape, snapshot_loop};
use crate::dispatch::Dispatcher;
use crate::fleet::load::NodeLoad;
use crate::fleet::telemetry::TelemetryBoard;
use crate::guard::breaker::BreakerBoard;
use crate::guard::holds::HoldBoard;
use crate::guard::node::NodeBoard;
use crate::guard::quota::{system_clock, Clock, QuotaBoard, QuotaOptions};
use crate::ledger::{LedgerBook, LedgerSender, Store, WriterHandle};
use crate::metrics::Metrics;
use crate::outcome::Record;
use crate::snapshot::Snapshot;

/// What a router is built with besides its config and secrets.
#[derive(Clone, Default)]
pub struct Options {
    /// The wall clock the quota windows are counted by; `None`: the system clock. Tests pass
    /// one they move, so that a minute boundary is theirs to cross.
    pub quota_clock: Option<Clock>,
    /// The prefix of the budget counters' Redis keys; `None`: `spillway:budget`. Tests give
    /// each run its own, so runs sharing a Redis do not count each other's requests.
    pub budget_prefix: Option<String>,
    /// Where traces go (`spillway serve` reads them from the `OTEL_*` variables); default off.
    pub tracing: crate::trace::Settings,
    /// The prefix of the shared telemetry's Redis keys; `None`: `spillway:telemetry`. Tests
    /// give each run its own, so runs sharing a Redis do not share each other's readings.
    pub telemetry_prefix: Option<String>,
}

/// This replica's id among those sharing telemetry: the host (the pod's name under Kubernetes)
/// and a random suffix, so a restarted pod is a new replica.
fn replica_id() -> crate::fleet::rendezvous::ReplicaId {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "spillway".into());
    crate::fleet::rendezvous::ReplicaId::new(format!("{host}-{:08x}", rand::random::<u32>()))
}

/// Start a router on `listener` with `config` and `secrets`; it serves until the handle's
/// task is aborted or `shutdown` resolves.
pub async fn start(
    config: Config,
    secrets: Secrets,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<RouterHandle> {
    start_with(config, secrets, listener, shutdown, Options::default()).await
}

/// [`start`], with `options`.
pub async fn start_with(
    config: Config,
    secrets: Secrets,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    options: Options,
) -> std::io::Result<RouterHandle> {
    let config = Arc::new(config);
    let tracing = crate::trace::Tracing::start(&options.tracing).map_err(std::io::Error::other)?;
    let breakers = BreakerBoard::new(config.dispatch.breaker.clone());
    let load = NodeLoad::new();
    let nodes = NodeBoard::new(Arc::clone(&breakers), Arc::clone(&load));
    let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_config_on(Arc::clone(&config), &nodes)));
    let telemetry = TelemetryBoard::new();
    let pins = Arc::new(PinBoard::default());
    let holds = Arc::new(HoldBoard::default());
    let canary_board = Arc::new(crate::control::canary::CanaryBoard::default());
    let readiness =
        Arc::new(rollout::Readiness::new(Duration::from_millis(config.telemetry.startup_wait_ms)));
    let (records_tx, records_rx) = mpsc::unbounded_channel::<Record>();
    // One token stops every loop; the GPU-time sampler hands over its open minute first, the
    // others end at their next await.
    let stop = CancellationToken::new();
    let mut loops = Loops::new(stop.clone());
    // The bookkeeping loop stops last: it reads what the others emitted on their way out.
    let books_stop = CancellationToken::new();
    let availability = AvailabilityBoard::new(&config);
    let ledger = match &secrets.ledger_url {
        Some(url) => Some(Ledger::open(url, &config.ledger.spool).await?),
        None => None,
    };
    let config_swap = Arc::new(ArcSwap::new(Arc::clone(&config)));
    let prices = Arc::new(ArcSwap::from_pointee(crate::ledger::HostedPrices::new(&config)));
    let metrics = Arc::new(Metrics::new());
    metrics.configure(&config);
    let books = books::Books {
        availability: Arc::clone(&availability),
        ledger: ledger.as_ref().map(|l| LedgerBook::new(l.sender.clone())),
        metrics: Arc::clone(&metrics),
        prices: Arc::clone(&prices),
    };
    let bookkeeping = tokio::spawn(books::consume(records_rx, books, books_stop.clone()));
    let interval = Duration::from_secs(config.balancing.interval_secs);
    loops.spawn(balancing::run(Arc::clone(&availability), interval));

    let (discovered_tx, discovered_rx) = watch::channel(DiscoveredNodes::new());
    let kube_backends: Vec<_> = config
        .backends
        .iter()
        .filter_map(|b| b.pool()?.discovery.as_ref().map(|d| (b.name.clone(), d.kubernetes.clone())))
        .collect();
    if !kube_backends.is_empty() {
        let client = discovery::client_from_env().await.map_err(std::io::Error::other)?;
        for (backend, cfg) in kube_backends {
            let watch = discovery::run(backend, cfg, client.clone(), discovered_tx.clone());
            loops.spawn(watch);
        }
    }
    let quota = QuotaBoard::with_options(
        &config,
        QuotaOptions {
            redis_url: secrets.redis_url.clone(),
            clock: options.quota_clock.clone().unwrap_or_else(system_clock),
            ..QuotaOptions::default()
        },
    );
    let budgets = crate::guard::budget::BudgetBoard::new(
        &config.budgets,
        crate::guard::budget::BudgetOptions {
            redis_url: secrets.redis_url.clone(),
            clock: options.quota_clock.clone().unwrap_or_else(system_clock),
            key_prefix: options.budget_prefix.clone().unwrap_or_else(|| "spillway:budget".into()),
            timeout: Duration::from_millis(config.budgets.redis_timeout_ms),
        },
    );
    if secrets.redis_url.is_some() && !quota.wait_shared(Duration::from_secs(2)).await {
        tracing::warn!("Redis is not reachable: quotas are counted per replica until it is");
    }
    if secrets.redis_url.is_some() && !budgets.wait_shared(Duration::from_millis(500)).await {
        tracing::warn!(
            "Redis is not reachable: key limits and budgets follow budgets.when_redis_down until it is"
        );
    }
    tokio::task::spawn_blocking(crate::tokens::warm_up);
    // Holds, forced breakers, canary results, gate verdicts and pins: read before the first
    // request, then kept in step with every other replica.
    let targets = opstate::Targets {
        holds: Arc::clone(&holds),
        breakers: Arc::clone(&breakers),
        canaries: Arc::clone(&canary_board),
        pins: Arc::clone(&pins),
    };
    let operator = match &ledger {
        Some(l) => {
            let board = OperatorBoard::shared(targets, l.store.clone(), secrets.redis_url.as_deref());
            if let Err(e) = board.sync().await {
                tracing::error!("operator state: not loaded at start ({e}); retrying every poll");
            }
            loops.spawn(Arc::clone(&board).run(config.state.operator_poll()));
            board
        }
        None => OperatorBoard::in_memory(targets),
    };
    let gate_board = Arc::new(crate::gate::board::GateBoard::default());
    let over_quota = Arc::clone(&quota);
    let share_feedback = Arc::new(crate::route::sticky::ShareFeedback::default());
    let sources = snapshot_loop::Sources {
        config: Arc::clone(&config_swap),
        nodes,
        telemetry: Arc::clone(&telemetry),
        discovered: discovered_rx,
        pins: Arc::clone(&pins),
        gate: Arc::clone(&gate_board),
        over_quota: Box::new(move |backend| over_quota.exhausted(backend)),
        availability: Arc::clone(&availability),
        holds: Arc::clone(&holds),
        shares: Default::default(),
        share_feedback: Arc::clone(&share_feedback),
    };
    let snapshots = snapshot_loop::run(Arc::clone(&snapshot), sources, Duration::from_millis(100));
    loops.spawn(snapshots);
    loops.spawn(startup::watch(Arc::clone(&readiness.startup), Arc::clone(&snapshot)));
    let gpu_time = ledger.as_ref().map(|l| {
        let sources = gpu_time::Sources {
            snapshot: Arc::clone(&snapshot),
            telemetry: Arc::clone(&telemetry),
            discovered: discovered_tx.subscribe(),
            metrics: Arc::clone(&metrics),
        };
        tokio::spawn(gpu_time::run(sources, l.sender.clone(), Duration::from_secs(1), stop.clone()))
    });
    let scrape_client = reqwest::Client::builder()
        .timeout(Duration::from_millis(config.telemetry.timeout_ms))
        .build()
        .map_err(std::io::Error::other)?;
    let share = match (&secrets.redis_url, config.telemetry.share_readings) {
        (Some(url), true) => {
            let prefix = options.telemetry_prefix.clone().unwrap_or_else(|| "spillway:telemetry".into());
            let t = &config.telemetry;
            let share = scrape::ScrapeShare::new(
                url,
                &prefix,
                replica_id(),
                t.scrape_replicas as usize,
                Duration::from_millis(t.interval_ms),
                Duration::from_millis(t.stale_after_ms),
            )
            .map_err(std::io::Error::other)?;
            if !share.connect(Duration::from_millis(500)).await {
                tracing::warn!("Redis is not reachable: this replica scrapes every node itself until it is");
            }
            Some(share)
        }
        _ => None,
    };
    // Scraping and parsing run on a thread of their own, away from the request path.
    let scrape_thread = scrape::spawn_thread_with(scrape::Scraping {
        snapshot: Arc::clone(&snapshot),
        board: Arc::clone(&telemetry),
        load: Arc::clone(&load),
        cfg: config.telemetry.clone(),
        client: scrape_client,
        share,
        metrics: metrics.telemetry.clone(),
    })?;

    let dispatcher = Dispatcher::new(
        config.dispatch.clone(),
        crate::dispatch::Keys {
            api_keys: secrets.backend_keys,
            client_keys: secrets.client_keys.keys().cloned().collect(),
            admin_token: secrets.admin_token.clone(),
        },
        records_tx,
        Arc::clone(&quota),
    );
    let dispatcher = Arc::new(dispatcher);
    let gate = {
        let calls = crate::gate::call::Calls {
            dispatcher: Arc::clone(&dispatcher),
            snapshot: Arc::clone(&snapshot),
            planned: true,
        };
        let parts = crate::gate::service::Parts {
            config: Arc::clone(&config_swap),
            snapshot: Arc::clone(&snapshot),
            pins: Arc::clone(&pins),
            store: ledger.as_ref().map(|l| l.store.clone()),
            operator: Arc::clone(&operator),
            calls,
            metrics: Arc::clone(&metrics),
        };
        crate::gate::service::GateService::start(parts, gate_board, &mut loops).await
    };
    // Static keys now; issued keys read once before the first request, then on an interval.
    let client_keys =
        Arc::new(crate::keys::KeyBoard::new(crate::keys::StaticKeys::new(&secrets.client_keys)));
    if let Some(l) = &ledger {
        crate::keys::reload(&client_keys, &l.store).await.map_err(std::io::Error::other)?;
        let refresh = crate::control::keys::run(
            Arc::clone(&client_keys),
            l.store.clone(),
            config.issued_keys.refresh(),
        );
        loops.spawn(refresh);
    }
    let reloader = Arc::new(Reloader {
        config: config_swap,
        client_keys: Arc::clone(&client_keys),
        prices,
        dispatcher: Arc::clone(&dispatcher),
        quota: Arc::clone(&quota),
        budgets: Arc::clone(&budgets),
        availability: Arc::clone(&availability),
        metrics: Arc::clone(&metrics),
    });
    #[cfg(unix)]
    loops.spawn(signal::reload_on_sighup(Arc::clone(&reloader)));
    let canaries = Arc::new(Canaries {
        snapshot: Arc::clone(&snapshot),
        dispatcher: Arc::clone(&dispatcher),
        metrics: Arc::clone(&metrics),
        board: canary_board,
    });
    if config.canary.interval_secs > 0 {
        let rounds = Canaries::clone(&canaries).run(Duration::from_secs(config.canary.interval_secs));
        loops.spawn(rounds);
    }
    let serving = Arc::new(crate::serve::Serving {
        snapshot: Arc::clone(&snapshot),
        dispatcher,
        client_keys: Arc::clone(&client_keys),
        budgets: Arc::clone(&budgets),
        shadows: gate.shadows.clone(),
        share_feedback,
    });
    let door = api::front::Door {
        client_keys: Arc::clone(&client_keys),
        limiter: Arc::new(Semaphore::new(config.limits.max_concurrency)),
        max_body_bytes: config.limits.max_body_bytes,
        body_read_timeout: config.limits.body_read_timeout(),
    };
    let ops = Arc::new(api::Ops {
        snapshot,
        load,
        client_keys: Arc::clone(&client_keys),
        quota,
        budgets,
        ledger: ledger.as_ref().map(|l| (l.store.clone(), l.sender.clone())),
        admin_token: secrets.admin_token,
        metrics,
        telemetry: Arc::clone(&telemetry),
        holds,
        operator,
        canaries,
        reloader,
        gate,
        readiness: Arc::clone(&readiness),
        tracing: tracing.clone(),
    });
    let state = AppState { serving, door, ops };
    let addr = listener.local_addr()?;
    let edge_metrics = state.ops.metrics.edge.clone();
    let app = api::router(state);
    let limits = config.limits.clone();
    let task = tokio::spawn(async move {
        let served = api::edge::serve(listener, app, &limits, edge_metrics, shutdown).await;
        loops.stop().await;
        drop(scrape_thread);
        // Flush the books: the open GPU minute, the queued outcomes, then the ledger writer.
        if let Some(task) = gpu_time {
            let _ = task.await;
        }
        books_stop.cancel();
        let _ = bookkeeping.await;
        if let Some(ledger) = ledger {
            ledger.close().await;
        }
        // Every stream has ended: its spans are queued. Export them before leaving.
        tracing.shutdown().await;
        served
    });
    Ok(RouterHandle { addr, task, readiness })
}

/// The ledger's store and writer while the router runs.
struct Ledger {
    store: Store,
    sender: LedgerSender,
    writer: WriterHandle,
}

impl Ledger {
    async fn open(url: &str, spool: &crate::config::SpoolSettings) -> std::io::Result<Ledger> {
        let store = Store::open(url).await.map_err(std::io::Error::other)?;
        let writer_config = crate::ledger::WriterConfig { capacity: 8_192, ..Default::default() };
        let spooled = spool.dir_for(url).and_then(|dir| {
            let config = crate::ledger::SpoolConfig {
                dir,
                max_bytes: spool.max_bytes,
                fsync_interval: Duration::from_millis(spool.fsync_interval_ms),
            };
            crate::ledger::Spool::open(&config)
                .inspect_err(|e| {
                    let dir = config.dir.display();
                    tracing::error!("ledger.spool.dir: cannot use {dir}, rows wait in memory only: {e}");
                })
                .ok()
        });
        let (sender, writer) = match spooled {
            Some((spool, replay)) => {
                crate::ledger::spawn_spooled(store.clone(), writer_config, spool, replay)
            }
            None => crate::ledger::spawn_with(store.clone(), writer_config),
        };
        Ok(Ledger { store, sender, writer })
    }

    /// Write everything accepted, then close the store.
    async fn close(self) {
        drop(self.sender);
        if let Err(unwritten) = self.writer.shutdown().await {
            tracing::error!(rows = unwritten.len(), "the ledger store kept failing: rows were not written");
        }
        self.store.close().await;
    }
}
