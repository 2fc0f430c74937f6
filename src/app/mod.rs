//! The composition root: a running router assembled from a config and its secrets, by typed
//! builders in the order they depend on each other: the boards (`boards`), the bookkeeping
//! loop, the loops that see the fleet (`sight`), the request side (`serving`), the batch
//! runner, and the HTTP listener.

mod boards;
mod ledger;
mod limits;
pub mod rollout;
mod serving;
mod sight;
pub mod signal;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, RouterHandle};
use crate::config::secrets::Secrets;
use crate::config::Config;
use crate::control::access::{self, AccessLog};
use crate::control::snapshot_loop::GateVerdicts;
use crate::control::{books, Loops};
use crate::guard::quota::Clock;
use crate::ledger::LedgerBook;
use crate::outcome::Record;
use boards::Boards;
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

/// [`start`], with `options`: the boards, the loops that see the fleet, the request side on
/// both, the batch runner, then the listener, which serves until `shutdown` and then stops
/// everything in order.
pub async fn start_with(
    config: Config,
    secrets: Secrets,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    options: Options,
) -> std::io::Result<RouterHandle> {
    let config = Arc::new(config);
    let tracing = crate::trace::Tracing::start(&options.tracing).map_err(std::io::Error::other)?;
    // One token stops every loop; the GPU-time sampler hands over its open minute first, the
    // others end at their next await.
    let mut loops = Loops::new(CancellationToken::new());
    let ledger = match &secrets.ledger_url {
        Some(url) => Some(Ledger::open(url, &config.ledger.spool).await?),
        None => None,
    };
    let boards = Boards::new(&config, &secrets, &options, ledger.as_ref(), &mut loops).await;
    let (records, access, books) = Books::start(&boards, ledger.as_ref());
    tokio::task::spawn_blocking(crate::tokens::warm_up);
    let gate_board = Arc::new(crate::gate::board::GateBoard::default());
    let verdicts = Arc::clone(&gate_board) as Arc<dyn GateVerdicts>;
    let sight = sight::start(&boards, verdicts, (&secrets, &options), ledger.as_ref(), &mut loops).await?;
    let state = serving::state(
        &boards,
        secrets,
        ledger.as_ref(),
        (records, access, gate_board),
        tracing.clone(),
        &mut loops,
    )
    .await?;
    let addr = listener.local_addr()?;
    let (edge_metrics, queues) = (state.ops.metrics.edge.clone(), Arc::clone(&state.ops.queues));
    let app = api::router(state.clone());
    if let Some(store) = ledger.as_ref().map(|l| l.store.clone()).filter(|_| config.batch.enabled) {
        spawn_batch_runner(&state, store, &config, addr.port(), &mut loops);
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
        drop(sight.scrape_thread);
        // Flush the books: the open GPU minute, the queued outcomes, then the ledger writer.
        if let Some(task) = sight.gpu_time {
            let _ = task.await;
        }
        books.close(ledger).await;
        // Every stream has ended: its spans are queued. Export them before leaving.
        tracing.shutdown().await;
        served
    });
    Ok(RouterHandle { addr, task, readiness: boards.readiness })
}

/// The bookkeeping loop: it turns the pipeline's outcome records into metrics, availability,
/// sessions and ledger rows, and stops last, reading what the others emitted on their way out.
struct Books {
    task: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
}

impl Books {
    /// The loop, the channel of outcome records into it, and the edge's queue of access lines.
    fn start(boards: &Boards, ledger: Option<&Ledger>) -> (mpsc::UnboundedSender<Record>, AccessLog, Books) {
        let (records, received) = mpsc::unbounded_channel::<Record>();
        let (access, lines) = AccessLog::new(access::QUEUE, boards.metrics.edge.access_dropped.clone());
        let parts = books::Books {
            availability: Arc::clone(&boards.availability),
            ledger: ledger.map(|l| LedgerBook::new(l.sender.clone())),
            metrics: Arc::clone(&boards.metrics),
            sessions: Arc::clone(&boards.sessions),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(books::consume(received, Some(lines), parts, stop.clone()));
        (records, access, Books { task, stop })
    }

    /// Stop once what is queued is booked, then close the ledger writer.
    async fn close(self, ledger: Option<Ledger>) {
        self.stop.cancel();
        let _ = self.task.await;
        if let Some(ledger) = ledger {
            ledger.close().await;
        }
    }
}

/// The batch runner and its files' retention: its lines go through the dialect doors in
/// process, its claims under a lease named for this host and port.
fn spawn_batch_runner(
    state: &AppState,
    store: crate::ledger::Store,
    config: &Config,
    port: u16,
    loops: &mut Loops,
) {
    use crate::batch::lease::{self, Lease};
    let snapshot = Arc::clone(&state.ops.snapshot);
    loops.spawn(crate::batch::retention::run(store.clone(), Arc::clone(&snapshot)));
    let door = api::batch_lines(state);
    let heartbeat = Duration::from_secs(config.batch.heartbeat_secs);
    let lease = Lease::new(lease::replica(&lease::host_name(), port), heartbeat);
    let dispatcher = Arc::clone(&state.serving.dispatcher);
    let metrics = state.ops.metrics.batch.clone();
    let runner = crate::batch::runner::Runner::new(store, snapshot, door, dispatcher, metrics, lease);
    loops.spawn(runner.run());
}
