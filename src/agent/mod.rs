//! `spillway agent`: the node-side GPU reporter. It runs beside vLLM (sidecar or DaemonSet),
//! reads the node's NVIDIA GPUs through NVML (utilisation, memory, power, temperature) and
//! serves them as Prometheus text at `GET /metrics` for the router's telemetry loop, plus
//! `GET /healthz`. It must start and serve on a machine without a driver: NVML down is a
//! state (`spillway_nvml_up 0` and the reason), retried periodically, never an exit. It must
//! not read GPUs on the request path: one sampling thread reads, requests see the last reading.
//!
//! - `source`: the `GpuSource` seam and `FakeGpus`;
//! - `nvml`: the real source; `retry`: reopening a source that is not there yet;
//! - `sampler`: the reading thread; `exposition`: the metric names and the registry.

pub mod exposition;
pub mod nvml;
pub mod retry;
mod sampler;
pub mod source;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use nvml::NvmlGpus;
pub use retry::RetryInit;
pub use source::{FakeGpus, GpuReading, GpuSource};

use sampler::Shared;

/// Shortest accepted read interval; shorter would spin on NVML.
const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// How long `spawn` waits for the first reading before serving without it.
const FIRST_READ_WAIT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Where to serve /metrics and /healthz.
    #[arg(long, default_value = "0.0.0.0:9400")]
    pub listen: SocketAddr,
    /// How often GPUs are read, in milliseconds (at least 10).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..))]
    pub interval_ms: u64,
    /// While NVML is down, how often to retry initialising it, in seconds (0: every read).
    #[arg(long, default_value_t = 10)]
    pub retry_init_secs: u64,
    /// The NVML library to load (a path or a name) instead of libnvidia-ml.so.1 from the
    /// loader's search path.
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
}

impl Default for AgentArgs {
    /// The command-line defaults.
    fn default() -> Self {
        AgentArgs {
            listen: SocketAddr::from(([0, 0, 0, 0], 9400)),
            interval_ms: 1000,
            retry_init_secs: 10,
            nvml_lib: None,
        }
    }
}

impl AgentArgs {
    fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms).max(MIN_INTERVAL)
    }

    /// `healthz` fails when no read has finished for this long (a hung NVML call).
    fn stale_after(&self) -> Duration {
        self.interval() * 3 + Duration::from_secs(30)
    }
}

/// A running agent. Dropping it stops the server and the sampling thread (a read in progress
/// finishes on its own; nothing waits for it).
pub struct AgentHandle {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<std::io::Result<()>>,
    _stop: std::sync::mpsc::Sender<()>,
}

impl AgentHandle {
    /// `Ok(gpu count)` if the last read succeeded, `Err(reason)` if NVML is down.
    pub fn nvml_status(&self) -> Result<usize, String> {
        self.shared.status().nvml
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The `spillway agent` command: bind, read NVML (retrying while it is down), print
/// `spillway agent listening on http://ADDR (nvml: up|down: REASON)`, serve until ctrl-c or
/// SIGTERM.
pub async fn run(args: AgentArgs) -> Result<(), String> {
    let listener =
        TcpListener::bind(args.listen).await.map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let lib = args.nvml_lib.clone();
    let source =
        RetryInit::new(move || NvmlGpus::open(lib.as_ref()), Duration::from_secs(args.retry_init_secs));
    let mut handle =
        spawn(args, Box::new(source), listener).await.map_err(|e| format!("cannot start the agent: {e}"))?;
    match handle.nvml_status() {
        Ok(_) => println!("spillway agent listening on http://{} (nvml: up)", handle.addr),
        Err(reason) => println!("spillway agent listening on http://{} (nvml: down: {reason})", handle.addr),
    }
    tokio::select! {
        signal = shutdown_signal() => signal.map_err(|e| format!("cannot wait for a signal: {e}")),
        served = &mut handle.server => match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("the agent's server failed: {e}")),
            Err(e) => Err(format!("the agent's server stopped: {e}")),
        },
    }
}

async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            ctrl_c = tokio::signal::ctrl_c() => ctrl_c,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

/// Start an agent on `listener` reading `source` every `args.interval_ms` (`args.listen` and
/// the NVML options are not used: the caller chose the listener and the source). Returns once
/// the first reading is published (or after 10 s if it hangs), so `/metrics` is never empty.
pub async fn spawn(
    args: AgentArgs,
    source: Box<dyn GpuSource>,
    listener: TcpListener,
) -> std::io::Result<AgentHandle> {
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared::new());
    let (stop_tx, stop_rx) = std::sync::mpsc::channel();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    {
        let shared = shared.clone();
        let interval = args.interval();
        std::thread::Builder::new()
            .name("spillway-agent-gpu".to_string())
            .spawn(move || sampler::run(source, interval, shared, stop_rx, first_tx))?;
    }
    if tokio::time::timeout(FIRST_READ_WAIT, first_rx).await.is_err() {
        tracing::warn!("the first GPU read has not finished after {FIRST_READ_WAIT:?}; serving anyway");
    }
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(AppState { shared: shared.clone(), stale_after: args.stale_after() });
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(AgentHandle { addr, shared, server, _stop: stop_tx })
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    stale_after: Duration,
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], state.shared.metrics.render())
}

/// 200 while reads keep finishing, whether NVML is up or down (restarting the agent does not
/// bring a driver back); 503 when no read has finished for a while (a hung NVML call).
async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let status = state.shared.status();
    let nvml = match &status.nvml {
        Ok(count) => format!("nvml up, {count} GPU(s)"),
        Err(reason) => format!("nvml down: {reason}"),
    };
    match status.last_read_done.map(|at| at.elapsed()) {
        Some(age) if age <= state.stale_after => (StatusCode::OK, format!("ok: {nvml}\n")),
        Some(age) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("stuck: no GPU read finished for {}s ({nvml})\n", age.as_secs()),
        ),
        None => {
            (StatusCode::SERVICE_UNAVAILABLE, "starting: the first GPU read has not finished\n".to_string())
        }
    }
}
