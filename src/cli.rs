//! The command line: `serve`, `check-config`, `config-schema`, `demo`, `sim`, `keys` and the offline tools.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config;

#[derive(Debug, Parser)]
#[command(
    name = "spillway",
    version,
    about = "Serve LLM traffic on your vLLM fleet while it has headroom; spill the rest to hosted APIs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log lines on stderr as JSON (default for `serve` and `agent`) or as text.
    #[arg(long, global = true, value_enum, env = "SPILLWAY_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Where log lines go: stderr alone, or (for the demo) every line to a file and only warnings
/// and errors to the terminal, which stays free for the demo's own summary.
enum LogTarget {
    Stderr,
    FileAndWarnings(PathBuf),
}

/// Install the log subscriber, filtered by `RUST_LOG` (default `warn,spillway=info`). Lines are
/// written by a background thread (the request path only formats them into a queue, and
/// drops lines rather than wait when the queue is full), all the lines queued at once in one
/// write (it flushes its buffer whenever the queue is empty); the guards flush it at exit.
fn init_logs(format: LogFormat, target: LogTarget) -> Vec<tracing_appender::non_blocking::WorkerGuard> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,spillway=info"))
    };
    let mut guards = Vec::new();
    fn layer_to<S>(
        writer: tracing_appender::non_blocking::NonBlocking,
        format: LogFormat,
        ansi: bool,
    ) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let layer =
            tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(ansi && format == LogFormat::Text);
        match format {
            // One JSON object per line, with the fields of the current span (the request id).
            LogFormat::Json => layer.json().with_current_span(true).with_span_list(false).boxed(),
            LogFormat::Text => layer.boxed(),
        }
    }
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    fn buffered<W: std::io::Write>(writer: W) -> std::io::BufWriter<W> {
        std::io::BufWriter::with_capacity(64 * 1024, writer)
    }
    let (stderr, guard) = tracing_appender::non_blocking(buffered(std::io::stderr()));
    guards.push(guard);
    let layers = match target {
        // One filter for the whole subscriber, not one per layer: a per-layer filter that
        // answers a dynamic `enabled!` check no (sqlx does one for each PostgreSQL notice,
        // such as "relation already exists" at every start) drops the next event on that
        // thread, which was the "listening on" line.
        LogTarget::Stderr => {
            tracing_subscriber::registry().with(filter()).with(layer_to(stderr, format, colour)).init();
            return guards;
        }
        LogTarget::FileAndWarnings(path) => {
            let warnings = tracing_subscriber::EnvFilter::new("warn");
            let mut layers = vec![layer_to(stderr, format, colour).with_filter(warnings).boxed()];
            match std::fs::File::create(&path) {
                Ok(file) => {
                    let (file, guard) = tracing_appender::non_blocking(buffered(file));
                    guards.push(guard);
                    layers.push(layer_to(file, format, false).with_filter(filter()).boxed());
                }
                Err(e) => eprintln!("warning: cannot write the log file {}: {e}", path.display()),
            }
            layers
        }
    };
    tracing_subscriber::registry().with(layers).init();
    guards
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the router with a config file.
    Serve {
        /// The YAML config (see spillway.example.yaml).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a config file: print every problem with its key path, exit 1 if there are any.
    CheckConfig {
        /// The YAML config to check.
        file: PathBuf,
        /// Also check that every environment variable the config names is set.
        #[arg(long)]
        env: bool,
    },
    /// Print the JSON schema of the config file (derived from the config types).
    ConfigSchema {
        /// The schema of the Helm chart's `config` value instead (helm/spillway/values.schema.json).
        #[arg(long)]
        chart: bool,
    },
    /// Start simulated vLLM nodes and hosted providers on loopback, and the router in front.
    Demo(crate::demo::DemoArgs),
    /// Run one simulated self-hosted node (vLLM, or another engine with --engine) or hosted
    /// provider (OpenAI, Anthropic, Gemini).
    Sim(Box<crate::sim::SimArgs>),
    /// Serve this machine's NVIDIA GPU readings (NVML) as Prometheus text, beside vLLM.
    Agent(crate::agent::AgentArgs),
    /// Capacity plan: the load each backend carries normally and with any one backend lost.
    Plan(crate::capacity::PlanArgs),
    /// Compare routing strategies on simulated traffic (virtual clock, same planning code).
    Simulate(crate::simulate::SimulateArgs),
    /// Cost per task from the ledger: hosted spend, GPU hours busy and idle, break-even.
    Report(crate::report::ReportArgs),
    /// The evaluation gate: run a task's golden set on its backends, or report the results.
    Gate(crate::gate::cli::GateArgs),
    /// Issued client keys: create, list, revoke, rotate (in the config's ledger store).
    Keys(crate::keys::cli::KeysArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_format = match cli.command {
        Command::Serve { .. } | Command::Agent(_) => LogFormat::Json,
        _ => LogFormat::Text,
    };
    let target = match &cli.command {
        Command::Demo(args) => LogTarget::FileAndWarnings(args.log_file.clone()),
        _ => LogTarget::Stderr,
    };
    let _flush_logs_at_exit = init_logs(cli.log_format.unwrap_or(default_format), target);
    if let Command::CheckConfig { file, env } = &cli.command {
        return check_config(file, *env);
    }
    if let Command::ConfigSchema { chart } = cli.command {
        let schema = if chart { config::chart_schema() } else { config::schema() };
        println!("{}", serde_json::to_string_pretty(&schema).expect("a JSON value prints"));
        return ExitCode::SUCCESS;
    }
    let offline = match &cli.command {
        Command::Plan(args) => Some(crate::capacity::run(args)),
        Command::Simulate(args) => Some(crate::simulate::run(args)),
        _ => None,
    };
    if let Some(result) = offline {
        return match result {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("error: {message}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::allocator::on_park)
        .build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve { config } => serve(&config).await,
            Command::Demo(args) => crate::demo::run(args).await,
            Command::Sim(args) => crate::sim::run(*args).await.map_err(|e| e.to_string()),
            Command::Agent(args) => crate::agent::run(args).await,
            Command::Report(args) => {
                crate::report::run(args).await.map(|out| print!("{out}")).map_err(|e| e.to_string())
            }
            Command::Gate(args) => {
                crate::gate::cli::run(args).await.map(|out| print!("{out}")).map_err(|e| e.to_string())
            }
            Command::Keys(args) => {
                crate::keys::cli::run(args).await.map(|out| print!("{out}")).map_err(|e| e.to_string())
            }
            Command::CheckConfig { .. }
            | Command::ConfigSchema { .. }
            | Command::Plan(_)
            | Command::Simulate(_) => {
                unreachable!("handled above")
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(file: &std::path::Path, check_env: bool) -> ExitCode {
    let mut problems: Vec<String> = Vec::new();
    match config::load_file(file) {
        Ok(cfg) => {
            if check_env {
                if let Err(missing) = crate::config::secrets::read_secrets(&cfg, |n| std::env::var(n).ok()) {
                    problems.extend(missing);
                }
            }
            if problems.is_empty() {
                println!(
                    "{}: ok ({} backends, {} tasks)",
                    file.display(),
                    cfg.backends.len(),
                    cfg.tasks.len()
                );
                return ExitCode::SUCCESS;
            }
        }
        Err(found) => problems.extend(found.iter().map(|p| p.to_string())),
    }
    for p in &problems {
        eprintln!("{}: {p}", file.display());
    }
    eprintln!("{} problem(s) found", problems.len());
    ExitCode::FAILURE
}

async fn serve(path: &std::path::Path) -> Result<(), String> {
    let cfg = config::load_file(path).map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        format!("{} is not a valid config:\n{}", path.display(), lines.join("\n"))
    })?;
    let secrets = crate::config::secrets::read_secrets(&cfg, |n| std::env::var(n).ok())
        .map_err(|missing| format!("missing secrets:\n  {}", missing.join("\n  ")))?;
    let addr: SocketAddr = cfg.listen.parse().map_err(|e| format!("listen: {e}"))?;
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    // Listening for signals from before the router starts, so an early SIGTERM is not lost.
    let mut signals = crate::app::rollout::listen().map_err(|e| format!("cannot wait for signals: {e}"))?;
    let delay = cfg.limits.shutdown_delay();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
    };
    let tracing = crate::trace::Settings::from_env(|n| std::env::var(n).ok())?;
    let options = crate::app::Options { tracing, ..Default::default() };
    let handle =
        crate::app::start_with(cfg, secrets, listener, stop, options).await.map_err(|e| e.to_string())?;
    let readiness = std::sync::Arc::clone(&handle.readiness);
    tokio::spawn(async move {
        crate::app::rollout::sequence(&mut signals, delay, &readiness).await;
        let _ = stop_tx.send(());
    });
    tracing::info!("spillway listening on http://{}", handle.addr);
    handle.task.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())
}
