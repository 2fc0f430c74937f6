//! Top spenders with exact figures: today and this month from the same rows, ranked by spend,
//! cut to the top N with the counts kept, GPU cost shared to the key that used the pool, and
//! no budget limit until budgets exist.

use super::*;
use crate::config::{BudgetsConfig, KeyLimits};
use crate::ledger::Outcome;

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn now() -> Timestamp {
    "2026-11-29T18:30:20Z".parse().unwrap()
}

fn at(s: &str) -> i64 {
    s.parse::<Timestamp>().unwrap().as_millisecond()
}

fn row(when: &str, key: &str, team: Option<&str>, backend: &str, cost: Option<&str>) -> LedgerRecord {
    LedgerRecord {
        id: crate::ledger::new_record_id(),
        at_ms: at(when),
        task: "chat".into(),
        client_key: Some(key.into()),
        team: team.map(str::to_string),
        priority: None,
        affinity_hash: None,
        backend: backend.into(),
        model: "m".into(),
        node: if backend == "pool" { "n1".into() } else { String::new() },
        attempts: 1,
        outcome: Outcome::Completed,
        error_class: None,
        input_tokens: 100,
        cached_input_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 10,
        ttft_ms: None,
        duration_ms: 10,
        cost_usd: cost.map(d),
    }
}

fn minute(when: &str, busy: bool) -> NodeMinute {
    NodeMinute {
        minute_ms: at(when),
        backend: "pool".into(),
        node: "n1".into(),
        gpu_count: 1,
        gpu_hourly_usd: Some(d("0.6")), // $0.01 a minute
        busy,
        occupancy: None,
    }
}

const A: &str = "00000000000a";
const B: &str = "00000000000b";
const C: &str = "00000000000c";

fn month() -> (Vec<LedgerRecord>, Vec<NodeMinute>) {
    let records = vec![
        row("2026-10-31T23:59:00Z", B, Some("search"), "openai", Some("9")), // last month
        row("2026-11-02T10:00:00Z", A, Some("search"), "openai", Some("0.5")),
        row("2026-11-28T23:59:59Z", C, Some("ads"), "openai", Some("0.01")),
        row("2026-11-29T09:00:00Z", A, Some("search"), "openai", Some("0.02")),
        row("2026-11-29T09:00:01Z", B, Some("search"), "openai", Some("0.03")),
        row("2026-11-29T09:00:02Z", C, Some("ads"), "openai", Some("0.04")),
        row("2026-11-29T10:00:05Z", C, Some("ads"), "pool", None),
        row("2026-11-29T11:00:00Z", "TEAM_KEY", None, "openai", Some("0.001")),
    ];
    // C's pool request used the busy minute; the idle one is C's too, the pool's only user.
    (records, vec![minute("2026-11-29T10:00:00Z", true), minute("2026-11-29T10:01:00Z", false)])
}

/// Key A issued as "indexer" without limits of its own; no budgets configured.
fn names() -> Directory {
    let none = KeyLimits::default();
    Directory::new([(A.to_string(), "indexer".to_string(), &none)], &BudgetsConfig::default())
}

/// Keys as (key, spend) and teams as (team, keys, spend), in rank order.
type Summary<'a> = (Vec<(&'a str, Decimal)>, Vec<(&'a str, usize, Decimal)>);

fn summary(p: &PeriodSpend) -> Summary<'_> {
    let keys = p.keys.iter().map(|k| (k.key.as_str(), k.spend_usd)).collect();
    let teams = p.teams.iter().map(|t| (t.team.as_str(), t.keys, t.spend_usd)).collect();
    (keys, teams)
}

#[test]
fn periods_are_the_utc_day_and_month_to_the_end_of_this_minute() {
    let end = at("2026-11-29T18:31:00Z");
    assert_eq!(Period::Today.span(now()), (at("2026-11-29T00:00:00Z"), end));
    assert_eq!(Period::Month.span(now()), (at("2026-11-01T00:00:00Z"), end));
}

#[test]
fn today_ranks_keys_and_teams_by_spend() {
    let (records, minutes) = month();
    let rows = Rows { records: &records, minutes: &minutes, config: None };
    let today = spenders(Period::Today, now(), &rows, &names(), 10);
    let (keys, teams) = summary(&today);
    assert_eq!(keys, [(C, d("0.06")), (B, d("0.03")), (A, d("0.02")), ("TEAM_KEY", d("0.001"))]);
    assert_eq!(teams, [("ads", 1, d("0.06")), ("search", 2, d("0.05")), ("-", 1, d("0.001"))]);
    let c = &today.keys[0];
    assert_eq!(
        (c.hosted_usd, c.gpu_usd, c.requests, c.team.as_deref()),
        (d("0.04"), d("0.02"), 2, Some("ads"))
    );
    assert_eq!((today.keys[2].name.as_deref(), today.keys[3].name.as_deref()), (Some("indexer"), None));
    assert_eq!(today.keys[3].team, None, "a static key has no team");
    assert_eq!(today.total_usd, d("0.111"));
    assert_eq!((today.from.as_str(), today.to.as_str()), ("2026-11-29T00:00:00Z", "2026-11-29T18:31:00Z"));
    assert!(
        today.keys.iter().all(|k| k.limit_usd.is_none()) && today.teams.iter().all(|t| t.limit_usd.is_none())
    );
    let json = serde_json::to_value(&today).unwrap();
    assert_eq!(
        (&json["period"], &json["keys"][0]["limit_usd"]),
        (&serde_json::json!("today"), &serde_json::Value::Null)
    );
    assert_eq!(json["keys"][0]["spend_usd"], "0.06");
}

#[test]
fn the_month_counts_from_its_first_day_and_the_top_is_cut() {
    let (records, minutes) = month();
    let rows = Rows { records: &records, minutes: &minutes, config: None };
    let month = spenders(Period::Month, now(), &rows, &names(), 2);
    let (keys, teams) = summary(&month);
    assert_eq!(keys, [(A, d("0.52")), (C, d("0.07"))], "last month's $9 is not in it");
    assert_eq!(teams, [("search", 2, d("0.55")), ("ads", 1, d("0.07"))]);
    assert_eq!((month.key_count, month.team_count), (4, 3));
    assert_eq!(month.total_usd, d("0.621"));
}

#[test]
fn each_key_and_team_shows_the_budget_of_the_period() {
    let (records, minutes) = month();
    let rows = Rows { records: &records, minutes: &minutes, config: None };
    let usd = |day: &str, month: &str| KeyLimits {
        usd_per_day: Some(d(day)),
        usd_per_month: Some(d(month)),
        ..KeyLimits::default()
    };
    // A was issued with $1 a day and $20 a month; the config lowers its month to $10 and
    // gives the static key and the team `search` budgets of their own.
    let own = usd("1", "20");
    let budgets = BudgetsConfig {
        keys: BTreeMap::from([
            (A.to_string(), KeyLimits { usd_per_month: Some(d("10")), ..KeyLimits::default() }),
            ("TEAM_KEY".to_string(), usd("0.5", "5")),
        ]),
        teams: BTreeMap::from([("search".to_string(), usd("2", "40"))]),
        ..BudgetsConfig::default()
    };
    let dir = Directory::new([(A.to_string(), "indexer".to_string(), &own)], &budgets);
    let limit = |p: &PeriodSpend, who: &str| {
        let key = p.keys.iter().find(|k| k.key == who).map(|k| k.limit_usd);
        key.or_else(|| p.teams.iter().find(|t| t.team == who).map(|t| t.limit_usd)).flatten()
    };
    let today = spenders(Period::Today, now(), &rows, &dir, 10);
    assert_eq!(
        [
            limit(&today, A),
            limit(&today, "TEAM_KEY"),
            limit(&today, B),
            limit(&today, "search"),
            limit(&today, "ads")
        ],
        [Some(d("1")), Some(d("0.5")), None, Some(d("2")), None]
    );
    let month = spenders(Period::Month, now(), &rows, &dir, 10);
    assert_eq!(
        [limit(&month, A), limit(&month, "TEAM_KEY"), limit(&month, "search")],
        [Some(d("10")), Some(d("5")), Some(d("40"))]
    );
    assert_eq!(serde_json::to_value(&month).unwrap()["keys"][0]["limit_usd"], "10");
}
