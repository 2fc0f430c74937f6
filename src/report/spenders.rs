//! The dashboard's "top spenders": the keys and teams that spent most today and this month
//! (UTC), each with the USD budget its limits set for that period (`limit_usd`: `usd_per_day`
//! today, `usd_per_month` this month; `null` without one). Spend is the cost report's own
//! figure, `spillway report --group-by key,team` over the same period (hosted list price plus
//! the GPU busy and idle cost shared out), so the panel and the report never disagree; the
//! budget itself counts self-hosted answers at their marginal GPU cost only
//! (`guard::budget`), so a key with self-hosted traffic shows more here than its budget has
//! used. Pure: the caller fetches the rows and the issued keys.

use std::collections::BTreeMap;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use rust_decimal::Decimal;
use serde::Serialize;

use super::budgets::{BudgetPeriod, Directory};
use super::build::{build, Line, Report};
use super::group::NONE;
use super::query::{GroupKey, ReportFormat, ReportQuery};
use crate::config::Config;
use crate::ledger::usage::{minute_of, NodeMinute, MINUTE_MS};
use crate::ledger::LedgerRecord;

/// A period the panel shows: from the start of the UTC day or month to the end of this minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Today,
    Month,
}

impl Period {
    pub const ALL: [Period; 2] = [Period::Today, Period::Month];

    /// `[from_ms, to_ms)` of this period at `now`: a whole number of minutes, as reports are.
    pub fn span(self, now: Timestamp) -> (i64, i64) {
        let date = now.to_zoned(TimeZone::UTC).date();
        let start = match self {
            Period::Today => date,
            Period::Month => date.first_of_month(),
        };
        let from = start.to_zoned(TimeZone::UTC).map_or(0, |z| z.timestamp().as_millisecond());
        (from, minute_of(now.as_millisecond()) + MINUTE_MS)
    }
}

/// One key's spend in a period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeySpend {
    /// A static key's variable, an issued key's id (or a synthetic call's purpose), `-` for
    /// requests without a key.
    pub key: String,
    /// An issued key's name; `None` for any other key.
    pub name: Option<String>,
    /// `None` for a key without a team (a static key).
    pub team: Option<String>,
    pub requests: u64,
    pub hosted_usd: Decimal,
    /// GPU busy and idle cost shared to this key.
    pub gpu_usd: Decimal,
    /// Hosted + GPU: the report's `total_usd`.
    pub spend_usd: Decimal,
    /// The key's budget for the period; `None` until budgets are configured.
    pub limit_usd: Option<Decimal>,
}

/// One team's spend in a period (`-`: the keys without a team, together).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamSpend {
    pub team: String,
    pub keys: usize,
    pub requests: u64,
    pub hosted_usd: Decimal,
    pub gpu_usd: Decimal,
    pub spend_usd: Decimal,
    pub limit_usd: Option<Decimal>,
}

/// The top keys and teams of one period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodSpend {
    pub period: Period,
    pub from: String,
    pub to: String,
    /// Everything spent in the period, by every key: what all keys' lines add up to.
    pub total_usd: Decimal,
    /// How many keys and teams spent in the period (the lists hold the top ones).
    pub key_count: usize,
    pub team_count: usize,
    pub keys: Vec<KeySpend>,
    pub teams: Vec<TeamSpend>,
}

/// Most spend first; ties by name, so the order is stable.
fn rank<T>(items: &mut Vec<T>, top: usize, by: impl Fn(&T) -> (Decimal, &str)) {
    items.sort_by(|a, b| {
        let (sa, na) = by(a);
        let (sb, nb) = by(b);
        sb.cmp(&sa).then_with(|| na.cmp(nb))
    });
    items.truncate(top);
}

fn report(from_ms: i64, to_ms: i64, by: &[GroupKey], rows: &Rows<'_>) -> Report {
    let query = ReportQuery { from_ms, to_ms, group_by: by.to_vec(), format: ReportFormat::Json };
    build(&query, rows.records, rows.minutes, rows.config)
}

/// What the panel is built from: the rows of the longest period (the month), oldest first.
pub struct Rows<'a> {
    pub records: &'a [LedgerRecord],
    pub minutes: &'a [NodeMinute],
    pub config: Option<&'a Config>,
}

impl Period {
    /// The USD budget `limits` set for this period.
    fn limit(self, limits: Option<&crate::config::KeyLimits>) -> Option<Decimal> {
        let span = match self {
            Period::Today => BudgetPeriod::Day,
            Period::Month => BudgetPeriod::Month,
        };
        span.limit(limits?)
    }
}

/// The top `top` keys and teams of `period` at `now`, from the month's `rows`, each with its
/// budget for the period from `dir`.
pub fn spenders(period: Period, now: Timestamp, rows: &Rows<'_>, dir: &Directory, top: usize) -> PeriodSpend {
    let (from_ms, to_ms) = period.span(now);
    let records: Vec<LedgerRecord> =
        rows.records.iter().filter(|r| r.at_ms >= from_ms && r.at_ms < to_ms).cloned().collect();
    let minutes: Vec<NodeMinute> =
        rows.minutes.iter().filter(|m| m.minute_ms >= from_ms && m.minute_ms < to_ms).cloned().collect();
    let period_rows = Rows { records: &records, minutes: &minutes, config: rows.config };
    let by_key = report(from_ms, to_ms, &[GroupKey::Key, GroupKey::Team], &period_rows);
    let by_team = report(from_ms, to_ms, &[GroupKey::Team], &period_rows);
    let gpu = |l: &Line| l.gpu_busy_usd + l.gpu_idle_usd;
    let mut keys: Vec<KeySpend> = by_key
        .lines
        .iter()
        .map(|l| KeySpend {
            key: l.group[0].clone(),
            name: dir.names.get(&l.group[0]).cloned(),
            team: Some(l.group[1].clone()).filter(|t| t != NONE),
            requests: l.requests,
            hosted_usd: l.hosted_usd,
            gpu_usd: gpu(l),
            spend_usd: l.total_usd,
            limit_usd: period.limit(dir.key_limits.get(&l.group[0])),
        })
        .collect();
    let mut keys_of: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &by_key.lines {
        *keys_of.entry(l.group[1].as_str()).or_default() += 1;
    }
    let mut teams: Vec<TeamSpend> = by_team
        .lines
        .iter()
        .map(|l| TeamSpend {
            team: l.group[0].clone(),
            keys: keys_of.get(l.group[0].as_str()).copied().unwrap_or(0),
            requests: l.requests,
            hosted_usd: l.hosted_usd,
            gpu_usd: gpu(l),
            spend_usd: l.total_usd,
            limit_usd: period.limit(dir.team_limits.get(l.group[0].as_str())),
        })
        .collect();
    let (key_count, team_count) = (keys.len(), teams.len());
    rank(&mut keys, top, |k| (k.spend_usd, k.key.as_str()));
    rank(&mut teams, top, |t| (t.spend_usd, t.team.as_str()));
    PeriodSpend {
        period,
        from: by_key.from,
        to: by_key.to,
        total_usd: by_key.lines.iter().map(|l| l.total_usd).sum(),
        key_count,
        team_count,
        keys,
        teams,
    }
}

#[cfg(test)]
#[path = "spenders_tests.rs"]
mod tests;
