//! Budget use against limits, for reports grouped by client key or team: who has which USD
//! budget (an issued key's own limits, each overridden by `budgets.keys`; `budgets.teams`),
//! and how much of the budget that covers the report's period its spend in the period is. A
//! period within one UTC day is set against `usd_per_day`, else (or without one) a period
//! within one UTC month against `usd_per_month`; a longer period has no single budget. Pure:
//! the caller lists the issued keys.

use std::collections::BTreeMap;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use super::build::Report;
pub use super::figures::{BudgetPeriod, BudgetUse, Scope};
use super::group::NONE;
use super::query::GroupKey;
use crate::canonical::TeamName;
use crate::config::{BudgetsConfig, KeyLimits};

/// Who the keys and teams are: an issued key's name by id, and the limits each key (by
/// variable or id: its own overridden by `budgets.keys`) and team (`budgets.teams`) has.
#[derive(Debug, Default)]
pub struct Directory {
    pub names: BTreeMap<String, String>,
    pub key_limits: BTreeMap<String, KeyLimits>,
    pub team_limits: BTreeMap<TeamName, KeyLimits>,
}

impl Directory {
    /// The directory of these issued keys (id, name, own limits) under `budgets`.
    pub fn new<'a>(
        issued: impl IntoIterator<Item = (String, String, &'a KeyLimits)>,
        budgets: &BudgetsConfig,
    ) -> Directory {
        let team_limits = budgets.teams.iter().map(|(team, limits)| (team.into(), limits.clone())).collect();
        let mut dir = Directory { team_limits, ..Directory::default() };
        for (id, name, own) in issued {
            let limits = budgets.keys.get(&id).map_or_else(|| own.clone(), |c| own.overridden_by(c));
            dir.key_limits.insert(id.clone(), limits);
            dir.names.insert(id, name);
        }
        for (key, limits) in &budgets.keys {
            dir.key_limits.entry(key.clone()).or_insert_with(|| limits.clone());
        }
        dir
    }

    /// The limits of the key or team `name`.
    fn limits(&self, scope: Scope, name: &str) -> Option<&KeyLimits> {
        match scope {
            Scope::Key => self.key_limits.get(name),
            Scope::Team => self.team_limits.get(name),
        }
    }
}

impl BudgetPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Month => "month",
        }
    }

    /// The budget `limits` set for this span.
    pub fn limit(self, limits: &KeyLimits) -> Option<Decimal> {
        match self {
            BudgetPeriod::Day => limits.usd_per_day,
            BudgetPeriod::Month => limits.usd_per_month,
        }
    }

    /// The spans `[from_ms, to_ms)` lies within, shortest first.
    fn covering(from_ms: i64, to_ms: i64) -> Vec<BudgetPeriod> {
        let at = |ms: i64| Timestamp::from_millisecond(ms).ok().map(|t| t.to_zoned(TimeZone::UTC).date());
        match (at(from_ms), at(to_ms.saturating_sub(1))) {
            (Some(a), Some(b)) if a == b => vec![BudgetPeriod::Day, BudgetPeriod::Month],
            (Some(a), Some(b)) if (a.year(), a.month()) == (b.year(), b.month()) => vec![BudgetPeriod::Month],
            _ => Vec::new(),
        }
    }
}

/// The budget use of every key and team of `report` (grouped by key or team) that has a
/// budget covering `[from_ms, to_ms)`, keys first, each by name.
pub(crate) fn budget_use(report: &Report, from_ms: i64, to_ms: i64, dir: &Directory) -> Vec<BudgetUse> {
    let spans = BudgetPeriod::covering(from_ms, to_ms);
    let mut out = Vec::new();
    for (scope, column) in [(Scope::Key, GroupKey::Key), (Scope::Team, GroupKey::Team)] {
        let Some(at) = report.group_by.iter().position(|g| *g == column) else { continue };
        let mut spend: BTreeMap<&str, Decimal> = BTreeMap::new();
        for line in &report.lines {
            *spend.entry(line.group[at].as_str()).or_default() += line.total_usd;
        }
        for (name, spend_usd) in spend.into_iter().filter(|(name, _)| *name != NONE) {
            let Some(own) = dir.limits(scope, name) else { continue };
            let Some((period, limit_usd)) = spans.iter().find_map(|p| Some((*p, p.limit(own)?))) else {
                continue;
            };
            let used = (!limit_usd.is_zero()).then(|| (spend_usd / limit_usd).to_f64()).flatten();
            out.push(BudgetUse { scope, name: name.to_string(), spend_usd, period, limit_usd, used });
        }
    }
    out
}

#[cfg(test)]
#[path = "budgets_tests.rs"]
mod tests;
