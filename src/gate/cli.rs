//! `spillway gate run` and `spillway gate report`: run a task's golden set against its
//! backends from the command line (keys from the environment, quota shared through Redis when
//! the config has it), store the results where the routers read them, and print them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::board::{current_fingerprint, GateBoard};
use super::call::Caller;
use super::error::GateError;
use super::report::{render, shadow_lines, GateFormat, Line};
use super::run::{run as run_gate, Subject};
use super::{shadow, store};
use crate::config::Config;
use crate::control::pins::PinBoard;
use crate::guard::quota::QuotaBoard;
use crate::ledger::Store;

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

/// A caller with the config's API keys from the environment and its quotas (shared through
/// Redis when the config names it).
pub fn caller_from_env(config: &Config) -> Caller {
    let keys: HashMap<String, String> = config
        .backends
        .iter()
        .filter_map(|b| Some((b.name.clone(), std::env::var(b.api_key_env.as_ref()?).ok()?)))
        .collect();
    let redis = config
        .state
        .redis_url
        .clone()
        .or_else(|| config.state.redis_url_env.as_ref().and_then(|n| std::env::var(n).ok()));
    let quota = QuotaBoard::new(config, redis);
    Caller::with_keys(reqwest::Client::new().into(), keys, Some(quota))
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
            let caller = caller_from_env(&config);
            let graded = shadow::grade_pending(&store, &config, &caller, None).await;
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
    let pins = pins_of(store).await?;
    let caller = caller_from_env(config);
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
            base_url: None,
            node: None,
            trigger: "cli".into(),
        };
        let result =
            run_gate(&caller, config, subject, &items, &|done, _| bar.set_position(done as u64)).await?;
        bar.finish_and_clear();
        store::insert_result(store, &result).await?;
        eprintln!("{name}: {}", if result.summary.passed { "PASS" } else { "FAIL" });
        lines.push(result);
    }
    let rendered: Vec<Line<'_>> = lines.iter().map(|result| Line { result, current: true }).collect();
    Ok(render(&rendered, &Default::default(), GateFormat::Table))
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
