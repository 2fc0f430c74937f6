//! The composition root: a running router assembled from a config and its secrets: the
//! boards, the snapshot and its loops, dispatch, the bookkeeping channel, and the HTTP listener.

mod batch_lines;
mod ledger;
mod limits;
pub mod rollout;
mod sight;
pub mod signal;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, RouterHandle};
use crate::config::secrets::Secrets;
use crate::config::Config;
use crate::control::balancing::{self, AvailabilityBoard};
use crate::control::canary::Canaries;
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
use crate::guard::quota::Clock;
use crate::ledger::LedgerBook;
use crate::metrics::Metrics;
use crate::outcome::Record;
use crate::snapshot::Snapshot;
use ledger::Ledger;

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
    let readiness = Arc::new(crate::api::readiness::Readiness::new(Duration::from_millis(
        config.telemetry.startup_wait_ms,
    )));
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
    let metrics = Arc::new(Metrics::new());
    metrics.configure(&config);
    let sessions = Arc::new(std::sync::Mutex::new(crate::control::sessions::SessionBook::default()));
    let books = books::Books {
        availability: Arc::clone(&availability),
        ledger: ledger.as_ref().map(|l| LedgerBook::new(l.sender.clone())),
        metrics: Arc::clone(&metrics),
        sessions: Arc::clone(&sessions),
    };
    let bookkeeping = tokio::spawn(books::consume(records_rx, books, books_stop.clone()));
    let interval = Duration::from_secs(config.balancing.interval_secs);
    loops.spawn(balancing::run(Arc::clone(&availability), interval));

    let (discovered_tx, discovered_rx) = sight::discovery(&config, &mut loops).await?;
    let (quota, budgets) = limits::boards(&config, secrets.redis_url.as_deref(), &options).await;
    tokio::task::spawn_blocking(crate::tokens::warm_up);
    // Holds, forced breakers, canary results, gate verdicts and pins: read before the first
    // request, then kept in step with every other replica.
    let targets = opstate::Targets {
        holds: Arc::clone(&holds),
        breakers: Arc::clone(&breakers),
        canaries: Arc::clone(&canary_board),
        pins: Arc::clone(&pins),
    };
    let operator =
        operator_board(&config, targets, ledger.as_ref(), secrets.redis_url.as_deref(), &mut loops).await;
    let gate_board = Arc::new(crate::gate::board::GateBoard::default());
    let over_quota = Arc::clone(&quota);
    let share_feedback = Arc::new(crate::route::sticky::ShareFeedback::default());
    let sources = snapshot_loop::Sources {
        config: Arc::clone(&config_swap),
        nodes,
        telemetry: Arc::clone(&telemetry),
        discovered: discovered_rx,
        pins: Arc::clone(&pins),
        gate: Arc::clone(&gate_board) as Arc<dyn snapshot_loop::GateVerdicts>,
        over_quota: Box::new(move |backend| over_quota.exhausted(backend)),
        availability: Arc::clone(&availability),
        holds: Arc::clone(&holds),
        shares: Default::default(),
        share_feedback: Arc::clone(&share_feedback),
    };
    let snapshots = snapshot_loop::run(Arc::clone(&snapshot), sources, Duration::from_millis(100));
    loops.spawn(snapshots);
    loops.spawn(crate::api::readiness::watch(Arc::clone(&readiness.startup), Arc::clone(&snapshot)));
    let gpu_time = ledger.as_ref().map(|l| {
        let sources = gpu_time::Sources {
            snapshot: Arc::clone(&snapshot),
            telemetry: Arc::clone(&telemetry),
            discovered: discovered_tx.subscribe(),
            metrics: Arc::clone(&metrics),
        };
        tokio::spawn(gpu_time::run(sources, l.sender.clone(), Duration::from_secs(1), stop.clone()))
    });
    // Scraping and parsing run on a thread of their own, away from the request path.
    let share =
        sight::share(&config, secrets.redis_url.as_deref(), options.telemetry_prefix.as_deref()).await?;
    let scrape_thread = scrape::spawn_thread_with(scrape::Scraping {
        snapshot: Arc::clone(&snapshot),
        board: Arc::clone(&telemetry),
        load: Arc::clone(&load),
        cfg: config.telemetry.clone(),
        client: sight::scrape_client(&config)?,
        share,
        metrics: metrics.telemetry.clone(),
    })?;

    let dispatcher = Dispatcher::new(
        config.dispatch.clone(),
        &config.tls,
        crate::dispatch::Keys {
            api_keys: secrets.backend_keys,
            client_keys: secrets.client_keys.keys().cloned().collect(),
            admin_token: secrets.admin_token.clone(),
        },
        records_tx,
        Arc::clone(&quota),
    );
    let dispatcher = Arc::new(dispatcher);
    let lanes = dispatcher.lanes().clone();
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
    let client_keys = client_keys(&config, &secrets.client_keys, ledger.as_ref(), &mut loops).await?;
    let reloader = Arc::new(Reloader {
        config: config_swap,
        client_keys: Arc::clone(&client_keys),
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
    let queues = crate::guard::wait_queue::WaitQueues::new();
    let serving = Arc::new(crate::serve::Serving {
        snapshot: Arc::clone(&snapshot),
        dispatcher,
        client_keys: Arc::clone(&client_keys),
        budgets: Arc::clone(&budgets),
        shadows: gate.shadows.clone(),
        share_feedback,
        queues: Arc::clone(&queues),
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
        policy_refusals: crate::policy::refusals_of,
        sessions,
        lanes,
        queues: Arc::clone(&queues),
    });
    let state = AppState { serving, door, ops };
    let addr = listener.local_addr()?;
    let edge_metrics = state.ops.metrics.edge.clone();
    let batch_store = ledger.as_ref().map(|l| l.store.clone()).filter(|_| config.batch.enabled);
    let batch_snapshot = Arc::clone(&state.ops.snapshot);
    let batch_dispatcher = Arc::clone(&state.serving.dispatcher);
    let batch_metrics = state.ops.metrics.batch.clone();
    let app = api::router(state);
    if let Some(store) = batch_store {
        let door = batch_lines::FrontDoor { router: app.clone(), keys: Arc::clone(&client_keys) };
        loops.spawn(crate::batch::retention::run(store.clone(), Arc::clone(&batch_snapshot)));
        use crate::batch::lease::{self, Lease};
        let heartbeat = Duration::from_secs(config.batch.heartbeat_secs);
        let lease = Lease::new(lease::replica(&lease::host_name(), addr.port()), heartbeat);
        let runner = crate::batch::runner::Runner::new(
            store,
            batch_snapshot,
            Arc::new(door),
            batch_dispatcher,
            batch_metrics,
            lease,
        );
        loops.spawn(runner.run());
    }
    let limits = config.limits.clone();
    // Draining: every request waiting for a local slot goes now (served, spilled or refused),
    // so none holds the drain open or is dropped with it.
    let shutdown = async move {
        shutdown.await;
        queues.drain();
    };
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

/// Static keys now; issued keys read once before the first request, then on an interval.
async fn client_keys(
    config: &Config,
    keys: &std::collections::HashMap<String, String>,
    ledger: Option<&Ledger>,
    loops: &mut Loops,
) -> std::io::Result<Arc<crate::keys::KeyBoard>> {
    let client_keys = Arc::new(crate::keys::KeyBoard::new(crate::keys::StaticKeys::new(keys)));
    if let Some(l) = ledger {
        crate::keys::reload(&client_keys, &l.store).await.map_err(std::io::Error::other)?;
        let refresh = crate::control::keys::run(
            Arc::clone(&client_keys),
            l.store.clone(),
            config.issued_keys.refresh(),
        );
        loops.spawn(refresh);
    }
    Ok(client_keys)
}

/// The operator state: shared through the ledger's store (and Redis, for speed) when there is
/// a ledger, read before the first request and then polled; in memory otherwise.
async fn operator_board(
    config: &Config,
    targets: opstate::Targets,
    ledger: Option<&Ledger>,
    redis_url: Option<&str>,
    loops: &mut Loops,
) -> Arc<OperatorBoard> {
    let Some(l) = ledger else { return OperatorBoard::in_memory(targets) };
    let board = OperatorBoard::shared(targets, l.store.clone(), redis_url);
    if let Err(e) = board.sync().await {
        tracing::error!("operator state: not loaded at start ({e}); retrying every poll");
    }
    loops.spawn(Arc::clone(&board).run(config.state.operator_poll()));
    board
}
