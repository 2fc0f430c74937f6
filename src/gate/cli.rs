//! `spillway gate run` and `spillway gate report`: run a task's golden set against its
//! backends from the command line (keys from the environment, quota shared through Redis when
//! the config has it), through a dispatcher of its own like a router's, store the results
//! where the routers read them, and print them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::board::{current_fingerprint, GateBoard};
use super::call::Calls;
use super::error::GateError;
use super::report::{render, shadow_lines, GateFormat, Line};
use super::run::{run as run_gate, Subject};
use super::{shadow, store};
use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::control::balancing::AvailabilityBoard;
use crate::control::books::{self, Books};
use crate::control::pins::PinBoard;
use crate::dispatch::{Dispatcher, Keys};
use crate::fleet::load::NodeLoad;
use crate::guard::breaker::BreakerBoard;
use crate::guard::node::NodeBoard;
use crate::guard::quota::QuotaBoard;
use crate::ledger::{LedgerBook, Store, WriterHandle};
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;

#[derive(Debug, Args)]
pub struct GateArgs {
    #[command(subcommand)]
    pub command: GateCommand,
}

#[derive(Debug, Subcommand)]
pub enum GateCommand {
    /// Run a task's golden set on its backends and store the results.
    Run {
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long)]
        task: String,
        /// Only this backend (repeatable); default: every backend of the task its policy allows.
        #[arg(long)]
        backend: Vec<String>,
        /// The ledger store, overriding the config's.
        #[arg(long)]
        ledger: Option<String>,
    },
    /// Print stored gate results and shadow grades side by side.
    Report {
        #[arg(long, short)]
        config: PathBuf,
        #[arg(long)]
        ledger: Option<String>,
        /// Only this task.
        #[arg(long)]
        task: Option<String>,
        #[arg(long, value_enum, default_value_t = GateFormat::Table)]
        format: GateFormat,
    },
}

fn load(path: &Path) -> Result<Arc<Config>, GateError> {
    crate::config::load_file(path)
        .map(Arc::new)
        .map_err(|problems| GateError::Config { path: path.to_path_buf(), problems })
}

async fn open_store(config: &Config, ledger: Option<&String>) -> Result<Store, GateError> {
    let url = match ledger {
        Some(url) => url.clone(),
        None => config.ledger.resolve_url(|name| std::env::var(name).ok()).map_err(GateError::LedgerUrl)?,
    };
    Ok(Store::open(&url).await?)
}

/// The pin board as the routers see it: every accepted pin applied.
async fn pins_of(store: &Store) -> Result<PinBoard, GateError> {
    let pins = PinBoard::default();
    for (backend, pin) in store::accepted_pins(store).await? {
        pins.accept(&backend, pin);
    }
    Ok(pins)
}

/// What a CLI command calls through: a dispatcher with the config's API keys from the
/// environment and its quotas (shared through Redis when the config names it), over a snapshot
/// of the config alone (no telemetry: a backend is called at its first node), whose records go
/// through the bookkeeping loop into the ledger store (judges' calls; see `Purpose::ledgered`).
pub(crate) struct CliCalls {
    pub calls: Calls,
    books: tokio::task::JoinHandle<()>,
    writer: WriterHandle,
}

impl CliCalls {
    pub fn new(config: &Arc<Config>, store: &Store) -> CliCalls {
        let env = |name: &str| std::env::var(name).ok();
        let api_keys: HashMap<String, String> = config
            .backends
            .iter()
            .filter_map(|b| Some((b.name.clone(), env(b.api_key_env.as_ref()?)?)))
            .collect();
        let redis =
            config.state.redis_url.clone().or_else(|| config.state.redis_url_env.as_deref().and_then(env));
        let (records, rx) = tokio::sync::mpsc::unbounded_channel();
        let dispatcher = Dispatcher::new(
            config.dispatch.clone(),
            &config.tls,
            Keys { api_keys, ..Keys::default() },
            records,
            QuotaBoard::new(config, redis),
        );
        let (sender, writer) = crate::ledger::spawn(store.clone(), 1_024);
        let books = Books {
            availability: AvailabilityBoard::new(config),
            ledger: Some(LedgerBook::new(sender)),
            metrics: Arc::new(Metrics::new()),
            sessions: Arc::default(),
        };
        let books = tokio::spawn(books::consume(rx, None, books, CancellationToken::new()));
        // The config's breaker settings and node slots apply to the CLI's calls too.
        let nodes = NodeBoard::new(BreakerBoard::new(config.dispatch.breaker.clone()), NodeLoad::new());
        let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_config_on(Arc::clone(config), &nodes)));
        CliCalls {
            calls: Calls { dispatcher: Arc::new(dispatcher), snapshot, planned: false },
            books,
            writer,
        }
    }

    /// Book every record of the calls made, then write them to the store.
    pub async fn finish(self) {
        drop(self.calls);
        let _ = self.books.await;
        if let Err(rows) = self.writer.shutdown().await {
            eprintln!("{} ledger rows were not written", rows.len());
        }
    }
}

pub async fn run(args: GateArgs) -> Result<String, GateError> {
    match args.command {
        GateCommand::Run { config, task, backend, ledger } => {
            let config = load(&config)?;
            let store = open_store(&config, ledger.as_ref()).await?;
            let out = run_task(&config, &store, &task, &backend).await;
            store.close().await;
            out
        }
        GateCommand::Report { config, ledger, task, format } => {
            let config = load(&config)?;
            let store = open_store(&config, ledger.as_ref()).await?;
            let cli = CliCalls::new(&config, &store);
            let graded = shadow::grade_pending(&store, &config, &cli.calls, None).await;
            cli.finish().await;
            let out = match graded {
                Ok(_) => report(&config, &store, task.as_deref(), format).await,
                Err(e) => Err(e),
            };
            store.close().await;
            out
        }
    }
}

async fn run_task(
    config: &Arc<Config>,
    store: &Store,
    task_name: &str,
    only: &[String],
) -> Result<String, GateError> {
    let task = config.task(task_name).ok_or_else(|| GateError::NoTask(task_name.to_string()))?;
    let gate = task.gate.as_ref().ok_or_else(|| GateError::NoGate(task_name.to_string()))?;
    for name in only {
        if !task.backends.contains(name) {
            return Err(GateError::NotTaskBackend { backend: name.clone(), task: task_name.to_string() });
        }
    }
    let items = crate::config::golden::load(&gate.golden).map_err(GateError::Golden)?;
    let cli = CliCalls::new(config, store);
    let lines = run_backends(config, store, &cli.calls, task, &items, only).await;
    cli.finish().await;
    let lines = lines?;
    let rendered: Vec<Line<'_>> = lines.iter().map(|result| Line { result, current: true }).collect();
    Ok(render(&rendered, &Default::default(), GateFormat::Table))
}

/// Run the golden set on each of the task's backends (or `only` those) its policy allows.
async fn run_backends(
    config: &Arc<Config>,
    store: &Store,
    calls: &Calls,
    task: &crate::config::TaskConfig,
    items: &[crate::config::golden::GoldenItem],
    only: &[String],
) -> Result<Vec<store::GateResult>, GateError> {
    let pins = pins_of(store).await?;
    let task_name = &task.name;
    let mut lines = Vec::new();
    for name in task.backends.iter().filter(|b| only.is_empty() || only.contains(b)) {
        let backend = config.backend(name).expect("validated");
        if let Some(why) = crate::policy::refuses(config, task, backend) {
            eprintln!("skipping {name}: {why}");
            continue;
        }
        let fingerprint = current_fingerprint(backend, &pins);
        let bar =
            indicatif::ProgressBar::new(items.len() as u64).with_message(format!("{task_name} on {name}"));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg:30} [{bar:30}] {pos}/{len} {elapsed}")?
                .progress_chars("=> "),
        );
        let subject = Subject {
            task: task.name.clone(),
            backend: name.clone(),
            fingerprint,
            node: None,
            trigger: "cli".into(),
        };
        let result =
            run_gate(calls, config, subject, items, &|done, _| bar.set_position(done as u64)).await?;
        bar.finish_and_clear();
        store::insert_result(store, &result).await?;
        eprintln!("{name}: {}", if result.summary.passed { "PASS" } else { "FAIL" });
        lines.push(result);
    }
    Ok(lines)
}

async fn report(
    config: &Config,
    store: &Store,
    task: Option<&str>,
    format: GateFormat,
) -> Result<String, GateError> {
    let pins = pins_of(store).await?;
    let wanted = |t: &str| task.is_none_or(|want| want == t);
    let board = GateBoard::default();
    board.absorb(store::results(store).await?.into_iter().filter(|r| wanted(&r.task)));
    let mut latest = board.all();
    latest.sort_by(|a, b| (&a.task, &a.backend, -a.finished_ms).cmp(&(&b.task, &b.backend, -b.finished_ms)));
    let lines: Vec<Line<'_>> = latest
        .iter()
        .map(|result| {
            let current = config
                .backend(&result.backend)
                .is_some_and(|b| current_fingerprint(b, &pins) == result.fingerprint);
            Line { result, current }
        })
        .collect();
    let shadows: Vec<_> =
        store::shadows(store, false).await?.into_iter().filter(|s| wanted(&s.task)).collect();
    Ok(render(&lines, &shadow_lines(&shadows), format))
}
