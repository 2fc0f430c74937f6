//! Budget use with exact figures: which budget covers a period (a day's, else a month's, else
//! none), keys and teams summed over their lines, the issued key's own limits under the
//! config's, and the rows every format shows.

use super::*;
use crate::ledger::{LedgerRecord, Outcome};
use crate::report::query::{ReportFormat, ReportQuery};
use crate::report::{build, render};

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn at(s: &str) -> i64 {
    s.parse::<Timestamp>().unwrap().as_millisecond()
}

fn row(when: &str, key: &str, team: Option<&str>, task: &str, cost: &str) -> LedgerRecord {
    LedgerRecord {
        id: crate::ledger::new_record_id(),
        at_ms: at(when),
        task: task.into(),
        client_key: Some(key.into()),
        team: team.map(str::to_string),
        priority: None,
        affinity_hash: None,
        backend: "openai".into(),
        model: "m".into(),
        node: String::new(),
        attempts: 1,
        outcome: Outcome::Completed,
        error_class: None,
        input_tokens: 100,
        cached_input_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 10,
        ttft_ms: None,
        duration_ms: 10,
        cost_usd: Some(d(cost)),
    }
}

const A: &str = "00000000000a";
const B: &str = "00000000000b";

fn limits(day: Option<&str>, month: Option<&str>) -> KeyLimits {
    KeyLimits { usd_per_day: day.map(d), usd_per_month: month.map(d), ..KeyLimits::default() }
}

/// A issued with $2 a day and $30 a month, the config lowering its day to $1; the static key
/// with $10 a month; team `search` with $4 a day; B has no budget.
fn directory() -> Directory {
    let budgets = BudgetsConfig {
        keys: BTreeMap::from([
            (A.to_string(), limits(Some("1"), None)),
            ("TEAM_KEY".to_string(), limits(None, Some("10"))),
        ]),
        teams: BTreeMap::from([("search".to_string(), limits(Some("4"), None))]),
        ..BudgetsConfig::default()
    };
    let own = limits(Some("2"), Some("30"));
    Directory::new([(A.to_string(), "indexer".to_string(), &own)], &budgets)
}

fn report(from: &str, to: &str, by: Vec<GroupKey>, format: ReportFormat) -> (ReportQuery, Report) {
    let records = vec![
        row("2026-11-29T09:00:00Z", A, Some("search"), "chat", "0.25"),
        row("2026-11-29T10:00:00Z", A, Some("search"), "summarise", "0.50"),
        row("2026-11-29T11:00:00Z", B, Some("search"), "chat", "1.25"),
        row("2026-11-29T12:00:00Z", "TEAM_KEY", None, "chat", "2"),
    ];
    let query = ReportQuery { from_ms: at(from), to_ms: at(to), group_by: by, format };
    let report = build(&query, &records, &[], None);
    (query, report)
}

#[test]
fn a_period_within_a_day_is_set_against_the_day_else_the_month() {
    let dir = directory();
    assert_eq!(dir.names[A], "indexer");
    assert_eq!(
        dir.key_limits[A],
        limits(Some("1"), Some("30")),
        "the config sets the day, A's own the month"
    );
    let by = vec![GroupKey::Task, GroupKey::Key, GroupKey::Team];
    let (q, r) = report("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z", by.clone(), ReportFormat::Json);
    let got = budget_use(&r, q.from_ms, q.to_ms, &dir);
    let summary: Vec<_> =
        got.iter().map(|b| (b.scope, b.name.as_str(), b.spend_usd, b.period, b.limit_usd, b.used)).collect();
    // A's two tasks add up ($0.75 of $1 a day); the static key has only a month's budget; B
    // has none; search's three requests ($2.00 of $4 a day).
    assert_eq!(
        summary,
        [
            (Scope::Key, A, d("0.75"), BudgetPeriod::Day, d("1"), Some(0.75)),
            (Scope::Key, "TEAM_KEY", d("2"), BudgetPeriod::Month, d("10"), Some(0.2)),
            (Scope::Team, "search", d("2.00"), BudgetPeriod::Day, d("4"), Some(0.5)),
        ]
    );
    // Two days: no day's budget covers it, the month's does (search has none).
    let (q, r) = report("2026-11-28T00:00:00Z", "2026-11-30T00:00:00Z", by.clone(), ReportFormat::Json);
    let got = budget_use(&r, q.from_ms, q.to_ms, &dir);
    let names: Vec<_> = got.iter().map(|b| (b.name.as_str(), b.period, b.limit_usd)).collect();
    assert_eq!(names, [(A, BudgetPeriod::Month, d("30")), ("TEAM_KEY", BudgetPeriod::Month, d("10"))]);
    // Across a month's end: no budget covers it.
    let (q, r) = report("2026-11-29T00:00:00Z", "2026-12-02T00:00:00Z", by, ReportFormat::Json);
    assert!(budget_use(&r, q.from_ms, q.to_ms, &dir).is_empty());
    // Grouped by task alone there is nobody to set against a budget.
    let (q, r) =
        report("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z", vec![GroupKey::Task], ReportFormat::Json);
    assert!(budget_use(&r, q.from_ms, q.to_ms, &dir).is_empty());
}

#[test]
fn every_format_shows_the_budget_rows() {
    let dir = directory();
    let by = vec![GroupKey::Key, GroupKey::Team];
    let mut shown = Vec::new();
    for format in [ReportFormat::Table, ReportFormat::Csv, ReportFormat::Json, ReportFormat::Html] {
        let (q, mut r) = report("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z", by.clone(), format);
        r.budgets = budget_use(&r, q.from_ms, q.to_ms, &dir);
        shown.push(render(&r, format).unwrap());
    }
    let [table, csv, json, html] = &shown[..] else { unreachable!() };
    assert!(table.contains("Budgets (spend in the period"), "{table}");
    let a_line = table.lines().find(|l| l.starts_with("key") && l.contains(A)).unwrap();
    assert!(
        a_line.contains("$0.7500") && a_line.contains("$1.0000 a day") && a_line.contains("75.0%"),
        "{a_line}"
    );
    let csv_budget: Vec<&str> = csv.lines().filter(|l| l.starts_with("budget,")).collect();
    assert_eq!(csv_budget.len(), 3, "{csv}");
    assert!(csv_budget[0].ends_with(&format!("key,{A},0.75,day,1,0.75")), "{}", csv_budget[0]);
    let header_width = csv.lines().next().unwrap().split(',').count();
    assert!(csv.lines().all(|l| l.split(',').count() == header_width), "every row as wide as the header");
    let json: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(json["budgets"][2]["name"], "search");
    assert_eq!(
        (&json["budgets"][2]["limit_usd"], &json["budgets"][2]["period"]),
        (&"4".into(), &"day".into())
    );
    assert!(html.contains("<h2>Budgets</h2>") && html.contains("$4.0000 a day") && html.contains("50.0 %"));
}
