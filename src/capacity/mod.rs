//! `spillway plan`: the failover capacity plan. For normal operation and for each single
//! backend lost, the load every remaining backend must carry against its quota or capacity,
//! what falls short, and which priority classes would be shed.
//!
//! Failover is a capacity plan, not a code path: a fallback whose quota was sized for its
//! normal share throttles as soon as the primary's traffic arrives. This module only reads
//! the config and a load profile and prints; the arithmetic is pure ([`arith`]), the profile
//! is checked like the config ([`profile`]), and printing is separate ([`render`]).

pub mod arith;
pub mod profile;
pub mod render;

use std::path::PathBuf;

use serde::Serialize;

use crate::config::{self, Config, Problem};

pub use arith::{plan, scenario, BackendCap, BackendLoad, ScenarioResult, ShedClass, TaskLoad, TaskOutcome};
pub use profile::{load_profile, parse_profile, PoolProfile, Profile, TaskProfile};

/// Output format of a report (`spillway plan`, `spillway simulate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// A readable table.
    #[default]
    Table,
    Json,
}

/// `spillway plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// The router config.
    #[arg(long)]
    pub config: PathBuf,
    /// Load profile (YAML): per task requests_per_minute, input_tokens, output_tokens,
    /// priority and split; pools' tokens_per_minute; measured token_ratios.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// One backend as the plan sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendInfo {
    pub name: String,
    pub kind: &'static str,
    pub local: bool,
    /// The counter its tokens are counted with, and whether counts are exact.
    pub tokenizer: &'static str,
    pub exact: bool,
    /// Its tokens per reference (o200k) token, and where that figure comes from.
    pub ratio: f64,
    pub ratio_source: &'static str,
    /// Quota (hosted) or measured throughput (pools), in its own tokens per minute.
    pub tokens_per_minute: Option<f64>,
    pub requests_per_minute: Option<f64>,
    /// Pools: share kept free for failover in normal operation.
    pub reserve: Option<f64>,
    /// Pools: sequences running at once at most (max_running × nodes); unknown with discovery.
    pub concurrency: Option<u64>,
    pub nodes: Option<usize>,
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub backends: Vec<BackendInfo>,
    /// Empty without a profile.
    pub scenarios: Vec<ScenarioResult>,
    pub notes: Vec<String>,
}

/// Load the config (and profile), compute the plan, and render it.
pub fn run(args: &PlanArgs) -> Result<String, String> {
    let config = config::load_file(&args.config).map_err(|p| problems_text(&args.config, &p))?;
    let profile = match &args.profile {
        Some(path) => Some(load_profile(path, &config).map_err(|p| problems_text(path, &p))?),
        None => None,
    };
    let report = build(&config, profile.as_ref());
    Ok(match args.format {
        Format::Table => render::table(&report),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            text.push('\n');
            text
        }
    })
}

fn problems_text(path: &std::path::Path, problems: &[Problem]) -> String {
    let mut text = format!("{}: {} problem(s)", path.display(), problems.len());
    for p in problems {
        text.push_str(&format!("\n  {p}"));
    }
    text
}

/// The plan for `config`, with loads when a profile is given.
pub fn build(config: &Config, profile: Option<&Profile>) -> Report {
    let infos = backend_infos(config, profile);
    let mut notes = Vec::new();
    for b in &infos {
        if b.local && b.tokens_per_minute.is_none() {
            notes.push(format!(
                "{}: a pool's tokens/min capacity is not in the config; give profile pools.{}.tokens_per_minute \
                 (until then it is treated as absorbing everything sent to it)",
                b.name, b.name
            ));
        } else if !b.local && b.tokens_per_minute.is_none() && b.requests_per_minute.is_none() {
            notes.push(format!("{}: no quota configured; treated as unlimited", b.name));
        }
        if !b.exact && b.ratio_source == "built-in estimate" {
            notes.push(format!(
                "{}: {} is an estimate ({:.2}× o200k on English prose); measure it on your traffic with profile token_ratios.{}",
                b.name, b.tokenizer, b.ratio, b.name
            ));
        }
    }
    let Some(profile) = profile else {
        notes.push(
            "no --profile given: capacities and quotas only; a load profile (requests per minute and tokens \
             per task) is needed for the loads each backend must carry"
                .to_string(),
        );
        return Report { backends: infos, scenarios: Vec::new(), notes };
    };
    let missing: Vec<&str> =
        config.tasks.iter().map(|t| t.name.as_str()).filter(|t| !profile.tasks.contains_key(*t)).collect();
    if !missing.is_empty() {
        notes.push(format!("no load given for: {} (counted as no traffic)", missing.join(", ")));
    }
    let caps = backend_caps(&infos);
    let loads = task_loads(config, profile);
    Report { backends: infos, scenarios: plan(&caps, &loads), notes }
}

/// What the plan knows of each backend, from the config and the profile.
pub(crate) fn backend_infos(config: &Config, profile: Option<&Profile>) -> Vec<BackendInfo> {
    config
        .backends
        .iter()
        .map(|b| {
            let counter = crate::adapter::provider::counter(b);
            let measured = profile.and_then(|p| p.token_ratios.get(&b.name)).copied();
            let (pool, local) = (b.pool(), b.kind().is_local());
            let (tpm, rpm) = if local {
                (profile.and_then(|p| p.pools.get(&b.name)).map(|p| p.tokens_per_minute), None)
            } else {
                let q = b.hosted().and_then(|h| h.quota.as_ref());
                (q.and_then(|q| q.tpm).map(|v| v as f64), q.and_then(|q| q.rpm).map(|v| v as f64))
            };
            let nodes = pool.filter(|p| p.discovery.is_none()).map(|p| p.endpoints.len());
            BackendInfo {
                name: b.name.clone(),
                kind: b.kind().as_str(),
                local,
                tokenizer: counter.name(),
                exact: counter.is_exact(),
                ratio: measured.unwrap_or_else(|| counter.reference_ratio()),
                ratio_source: match (measured, counter.is_exact()) {
                    (Some(_), _) => "profile",
                    (None, true) => "exact tokenizer",
                    (None, false) => "built-in estimate",
                },
                tokens_per_minute: tpm,
                requests_per_minute: rpm,
                reserve: pool.map(|p| p.reserve),
                concurrency: pool.zip(nodes).map(|(p, n)| n as u64 * p.max_running as u64),
                nodes,
            }
        })
        .collect()
}

/// The arithmetic's view of the backends.
pub(crate) fn backend_caps(infos: &[BackendInfo]) -> Vec<BackendCap> {
    infos
        .iter()
        .map(|b| BackendCap {
            name: b.name.clone(),
            local: b.local,
            ratio: b.ratio,
            tpm: b.tokens_per_minute,
            rpm: b.requests_per_minute,
            reserve: b.reserve.unwrap_or(0.0),
        })
        .collect()
}

/// The tasks of the profile, in config order.
pub(crate) fn task_loads(config: &Config, profile: &Profile) -> Vec<TaskLoad> {
    config
        .tasks
        .iter()
        .filter_map(|t| {
            let p = profile.tasks.get(&t.name)?;
            let split = match &p.split {
                Some(split) => t
                    .backends
                    .iter()
                    .filter_map(|b| split.get(b).map(|s| (b.clone(), *s)))
                    .filter(|(_, s)| *s > 0.0)
                    .collect(),
                None => t.backends.first().map(|b| vec![(b.clone(), 1.0)]).unwrap_or_default(),
            };
            Some(TaskLoad {
                name: t.name.clone(),
                priority: p.priority.unwrap_or(t.priority),
                requests_per_minute: p.requests_per_minute,
                tokens_per_request: p.input_tokens + p.output_tokens,
                backends: t.backends.clone(),
                split,
            })
        })
        .collect()
}
