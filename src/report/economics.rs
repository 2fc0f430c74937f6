//! Each task's economics: what it cost on each backend, and for each self-hosted pool it used,
//! the marginal (busy) and fully loaded (busy + idle) cost per million tokens against its
//! cheapest eligible hosted backend. Pure.
//!
//! Break-even rule: a pool's throughput is taken as proportional to its utilisation, the share
//! of its sequence capacity that ran (`report::utilisation`; the busy share where old rows carry
//! no capacity figure), so at utilisation `u` a task's fully loaded GPU cost per token is
//! `now × u_now ÷ u`. The break-even utilisation is the `u` at which that equals what the
//! task's own token mix (input, cached input, output) would cost on its cheapest hosted backend
//! that the task's policy allows.

use std::collections::{BTreeMap, BTreeSet};

use rust_decimal::Decimal;
use serde::Serialize;

use super::figures::{money, per, ratio, Line, PoolUsage, Tokens, UtilisationBasis};
use crate::canonical::{BackendName, TaskName};
use crate::config::{Config, Price};
use crate::ledger::hosted_cost;
use crate::snapshot::Snapshot;

/// One task on one backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendShare {
    pub backend: String,
    pub local: bool,
    pub requests: u64,
    pub tokens: Tokens,
    pub cost_usd: Decimal,
}

/// A task's use of one self-hosted pool, against hosting it elsewhere.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SelfHosted {
    pub pool: String,
    pub tokens: Tokens,
    pub marginal_usd: Decimal,
    pub loaded_usd: Decimal,
    /// Per million tokens (input + output).
    pub marginal_per_mtok: Option<Decimal>,
    pub loaded_per_mtok: Option<Decimal>,
    /// The pool's share of its sequence capacity used in the period (see `utilisation_basis`).
    pub utilisation: f64,
    pub utilisation_basis: UtilisationBasis,
    /// The pool's busy share of its node-minutes in the period.
    pub busy_share: f64,
    /// The cheapest priced hosted backend the task may use, for this token mix.
    pub cheapest_hosted: Option<String>,
    pub hosted_per_mtok: Option<Decimal>,
    /// Utilisation at which `loaded_per_mtok` would equal `hosted_per_mtok` (above 1: never).
    pub break_even_utilisation: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskEconomics {
    pub task: String,
    pub by_backend: Vec<BackendShare>,
    pub self_hosted: Vec<SelfHosted>,
}

/// Per task: the split by backend, and for each pool it used, marginal and fully loaded cost
/// against its cheapest hosted alternative.
pub(super) fn economics(
    fine: &BTreeMap<super::group::Fine, usize>,
    lines: &[Line],
    pools: &BTreeSet<String>,
    pool_usage: &BTreeMap<BackendName, PoolUsage>,
    config: Option<&Config>,
) -> Vec<TaskEconomics> {
    let mut by_task: BTreeMap<&str, BTreeMap<&str, Line>> = BTreeMap::new();
    for (g, &i) in fine {
        by_task.entry(&g.task).or_default().entry(&g.backend).or_default().absorb(&lines[i]);
    }
    let hosted = eligible_hosted(config);
    let no_alternative = Vec::new();
    let mut out = Vec::new();
    for (task, backends) in by_task {
        let mut economics =
            TaskEconomics { task: task.to_string(), by_backend: Vec::new(), self_hosted: Vec::new() };
        for (backend, l) in backends {
            let local = pools.contains(backend);
            let (busy, rest) = (l.gpu_busy_usd, l.hosted_usd + l.gpu_idle_usd);
            let (requests, tokens) = (l.requests, l.tokens);
            economics.by_backend.push(BackendShare {
                backend: backend.to_string(),
                local,
                requests,
                tokens,
                cost_usd: money(busy + rest),
            });
            if local {
                let usage = pool_usage.get(backend).cloned().unwrap_or_default();
                let alternatives = hosted.get(task).unwrap_or(&no_alternative);
                economics.self_hosted.push(self_hosted(
                    backend,
                    tokens,
                    busy,
                    busy + rest,
                    &usage,
                    alternatives,
                ));
            }
        }
        out.push(economics);
    }
    out
}

/// Per task, the priced hosted backends its data may reach (the same policy filter as
/// routing): a restricted task has none, and then no break-even.
fn eligible_hosted(config: Option<&Config>) -> BTreeMap<TaskName, Vec<(String, Price)>> {
    let Some(config) = config else { return BTreeMap::new() };
    let snap = Snapshot::from_config(std::sync::Arc::new(config.clone()));
    config
        .tasks
        .iter()
        .map(|task| {
            let allowed = crate::policy::eligible(task, &snap).unwrap_or_default();
            let priced = allowed
                .into_iter()
                .map(|i| &config.backends[i])
                .filter(|b| !b.kind().is_local())
                .filter_map(|b| b.price.clone().map(|p| (b.name.clone(), p)))
                .collect();
            (TaskName::from(&task.name), priced)
        })
        .collect()
}

fn self_hosted(
    pool: &str,
    tokens: Tokens,
    marginal: Decimal,
    loaded: Decimal,
    usage: &PoolUsage,
    alternatives: &[(String, Price)],
) -> SelfHosted {
    let utilisation = usage.utilisation;
    let cheapest = alternatives
        .iter()
        .map(|(name, p)| (name.clone(), hosted_cost(p, &tokens)))
        .min_by(|a, b| a.1.cmp(&b.1));
    let n = tokens.total();
    let loaded_per_mtok = per(loaded, n, 1_000_000);
    let hosted_per_mtok = cheapest.as_ref().and_then(|(_, cost)| per(*cost, n, 1_000_000));
    let break_even_utilisation = match &cheapest {
        Some((_, hosted)) if !hosted.is_zero() && n > 0 && utilisation > 0.0 => {
            Some(utilisation * ratio(loaded, *hosted))
        }
        _ => None,
    };
    SelfHosted {
        pool: pool.to_string(),
        marginal_per_mtok: per(marginal, n, 1_000_000),
        loaded_per_mtok,
        marginal_usd: money(marginal),
        loaded_usd: money(loaded),
        tokens,
        utilisation,
        utilisation_basis: usage.utilisation_basis,
        busy_share: usage.busy_share,
        cheapest_hosted: cheapest.map(|(name, _)| name),
        hosted_per_mtok,
        break_even_utilisation,
    }
}
