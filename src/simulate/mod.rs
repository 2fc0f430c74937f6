//! `spillway simulate`: a discrete-event simulator that compares routing strategies on a
//! virtual clock (an hour of traffic in seconds) by driving the *same* planning code the server
//! runs: every request is planned by `route::plan` on a snapshot built by `Snapshot::build`
//! from modelled telemetry, breakers, quotas and PID availability. Around it sit models of
//! vLLM nodes and hosted providers (capacity, quotas, latency, prefix and prompt caches,
//! failure timelines) and a model of dispatch (failover before the first token, breakers,
//! retry budget, deadlines).
//!
//! It exists to answer "what would this config do under that traffic and those failures"
//! before production does, and to keep the baseline strategies honest. It must never plan on
//! its own, sleep, or read the clock inside a run; the same scenario and seed always give the
//! same report.
//!
//! Files: `scenario` + `traffic` + `validate` (the YAML), `workload` (arrivals; agent
//! sessions' turns, each after the last one's answer, in `workload/sessions`), `clock` (virtual
//! time and the event queue), `node` and `hosted` (the models), `strategies` (how each strategy maps
//! onto the config), `engine` + `dispatch` (the run), `stats` + `histogram`, `report` and
//! `html` (output). A scenario's strategies run on parallel threads (one per core), each its
//! own engine from the same seed; the report lists them in the scenario's order.

mod clock;
mod engine;
mod histogram;
mod hosted;
mod html;
mod node;
mod report;
pub mod scenario;
mod stats;
mod strategies;
mod workload;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

pub use report::ScenarioReport;
pub use scenario::{load_file, parse, Batching, Planning, Run, Scenario, StrategyName};
pub use stats::{BatchSummary, Stats, Summary};
pub use workload::{generate, Arrival, Arrivals};

/// Output format of the comparison: a table or JSON, as for `spillway plan`.
pub use crate::capacity::Format;

/// `spillway simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Scenario files (YAML), e.g. tests/fixtures/scenarios/steady.yaml.
    #[arg(required = true)]
    pub scenario: Vec<PathBuf>,
    /// Seed of every random draw (overrides the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulated length (overrides the scenario's; its timeline is scaled to fit), e.g. 10m.
    #[arg(long)]
    pub duration: Option<String>,
    /// Also write a self-contained HTML report with charts to this path.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Run one scenario: the same arrivals through every strategy it names (each once per place
/// its batch jobs may go), the runs on up to one thread per core; `progress` hears each run's
/// share done.
pub fn simulate(scenario: &Scenario, progress: &(dyn Fn(Run, f64) + Sync)) -> ScenarioReport {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs = parallel(&scenario.runs(), threads, |&run| {
        engine::Engine::new(scenario, run).run(&mut |done| progress(run, done))
    });
    let slo_ms = scenario.first_task().and_then(|t| scenario.config.task(t)).map_or(0, |t| t.slo.ttft_ms);
    ScenarioReport {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        seed: scenario.seed,
        duration_secs: scenario.duration.as_secs_f64(),
        slo_ms,
        runs,
    }
}

/// `f` of every item on up to `threads` threads, results in the items' order.
fn parallel<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, items.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break mine };
                        mine.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a strategy's run panicked")).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Load every scenario named by `args`, with the overrides applied.
pub fn load(args: &SimulateArgs) -> Result<Vec<Scenario>, String> {
    let duration = match &args.duration {
        Some(d) => Some(
            serde_yaml_ng::from_str::<scenario::Secs>(d)
                .ok()
                .filter(|s| s.0 > 0.0)
                .map(scenario::Secs::duration)
                .ok_or_else(|| format!("--duration `{d}` is not a duration like 90s, 10m, 1h"))?,
        ),
        None => None,
    };
    args.scenario
        .iter()
        .map(|path| {
            let mut s = scenario::load_file(path)?;
            if let Some(seed) = args.seed {
                s.seed = seed;
            }
            if let Some(d) = duration {
                s.scaled_to(d);
            }
            Ok(s)
        })
        .collect()
}

/// Run `spillway simulate`: the comparison as text (table or JSON); the HTML report, if asked
/// for, is written to `--out`.
pub fn run(args: &SimulateArgs) -> Result<String, String> {
    let scenarios = load(args)?;
    let show = !args.quiet && std::io::stderr().is_terminal();
    let mut reports = Vec::new();
    for s in &scenarios {
        let progress = |run: Run, done: f64| {
            if show {
                eprint!("\r{:<28} {:<20} {:>3.0}%", s.name, run.label(), done * 100.0);
            }
        };
        reports.push(simulate(s, &progress));
    }
    if show {
        eprint!("\r{:<55}\r", "");
    }
    if let Some(path) = &args.out {
        std::fs::write(path, html::page(&reports))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(match args.format {
        Format::Table => report::table(&reports),
        Format::Json => report::json(&reports),
    })
}

/// The HTML page for reports (what `--out` writes).
pub fn html_page(reports: &[ScenarioReport]) -> String {
    html::page(reports)
}

/// The text table for reports.
pub fn table(reports: &[ScenarioReport]) -> String {
    report::table(reports)
}

/// The JSON for reports.
pub fn json(reports: &[ScenarioReport]) -> String {
    report::json(reports)
}

/// A duration override for tests and callers: the scenario shortened to `d`.
pub fn shortened(mut s: Scenario, d: Duration) -> Scenario {
    s.scaled_to(d);
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn parallel_keeps_the_items_order() {
        let items: Vec<u64> = (0..9).collect();
        for threads in [1, 2, 4, 20] {
            assert_eq!(
                super::parallel(&items, threads, |i| i * 10),
                (0..9).map(|i| i * 10).collect::<Vec<_>>()
            );
        }
        assert!(super::parallel(&[] as &[u64], 2, |i| *i).is_empty());
    }
}
