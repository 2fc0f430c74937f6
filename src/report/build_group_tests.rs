//! Lines by client key and team through `build` and every renderer, with exact figures: each
//! grouping adds up to the same totals as the ungrouped report, rows with no key or team read
//! `-`, and a grouping without `task` still names the task of its self-hosted rows.

use super::tests::{config, minute, query, record};
use super::*;
use crate::report::query::{parse_group_by, ReportFormat};

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn keyed(
    task: &str,
    backend: &str,
    cost: Option<&str>,
    key: Option<&str>,
    team: Option<&str>,
) -> LedgerRecord {
    LedgerRecord {
        client_key: key.map(str::to_string),
        team: team.map(str::to_string),
        priority: None,
        ..record(task, backend, cost)
    }
}

/// Two teams (search: keys a and b; ads: key c), a static key (no team) and a shed request
/// without a key. Key c's pool request used the pool's only busy minute ($0.01) and is charged
/// its one idle minute ($0.01) as the pool's only user.
fn rows() -> (Vec<LedgerRecord>, Vec<NodeMinute>) {
    let records = vec![
        keyed("t", "openai", Some("0.01"), Some("00000000000a"), Some("search")),
        keyed("t", "openai", Some("0.02"), Some("00000000000b"), Some("search")),
        keyed("t", "openai", Some("0.005"), Some("00000000000c"), Some("ads")),
        keyed("t", "pool", None, Some("00000000000c"), Some("ads")),
        keyed("t", "openai", Some("0.001"), Some("TEAM_KEY"), None),
        keyed("t", "", None, None, None),
    ];
    (records, vec![minute(0, true), minute(1, false)])
}

fn grouped(by: &str) -> Report {
    let (records, minutes) = rows();
    let q = ReportQuery { group_by: parse_group_by(by).unwrap(), ..query() };
    build(&q, &records, &minutes, Some(&config()))
}

fn summary(r: &Report) -> Vec<(Vec<&str>, u64, Decimal)> {
    r.lines.iter().map(|l| (l.group.iter().map(String::as_str).collect(), l.requests, l.total_usd)).collect()
}

#[test]
fn lines_by_key_and_team() {
    let r = grouped("key,team");
    assert_eq!(
        summary(&r),
        [
            (vec!["-", "-"], 1, d("0")),
            (vec!["00000000000a", "search"], 1, d("0.01")),
            (vec!["00000000000b", "search"], 1, d("0.02")),
            (vec!["00000000000c", "ads"], 2, d("0.025")),
            (vec!["TEAM_KEY", "-"], 1, d("0.001")),
        ]
    );
    let c = &r.lines[3];
    assert_eq!((c.hosted_usd, c.gpu_busy_usd, c.gpu_idle_usd), (d("0.005"), d("0.01"), d("0.01")));
    assert_eq!((c.per_request_usd, c.per_mtok_output_usd), (Some(d("0.0125")), Some(d("25"))));
    assert_eq!(r.lines[0].failed, 1, "the shed request");

    let teams = grouped("team");
    assert_eq!(
        summary(&teams),
        [(vec!["-"], 2, d("0.001")), (vec!["ads"], 2, d("0.025")), (vec!["search"], 2, d("0.03"))]
    );
    let by_team_and_task = grouped("team,task");
    assert_eq!(by_team_and_task.lines[1].group, ["ads", "t"]);
}

#[test]
fn every_grouping_adds_up_to_the_ungrouped_totals() {
    let whole = grouped("task");
    assert_eq!((whole.totals.total_usd, whole.totals.requests), (d("0.056"), 6));
    for by in ["key,team", "team", "key", "team,key", "task,key", "backend,team", "task,backend,key,team"] {
        let r = grouped(by);
        assert_eq!(r.totals, whole.totals, "{by}");
        let lines: Decimal = r.lines.iter().map(|l| l.total_usd).sum();
        assert_eq!(lines + r.totals.gpu_unallocated_usd, d("0.056"), "{by}");
        assert_eq!(r.lines.iter().map(|l| l.requests).sum::<u64>(), 6, "{by}");
        assert_eq!(r.tasks, whole.tasks, "{by}: task economics do not depend on the grouping");
    }
}

#[test]
fn every_format_shows_keys_and_teams() {
    let r = grouped("key,team");
    let csv = crate::report::render::csv(&r).unwrap();
    let mut rows = csv.lines();
    assert_eq!(
        rows.next(),
        Some(
            "row,key,team,requests,failed,input_tokens,cached_input_tokens,cache_write_tokens,\
             output_tokens,hosted_usd,gpu_busy_usd,gpu_idle_usd,total_usd,per_request_usd,\
             per_mtok_output_usd,task,pool,utilisation,busy_share,utilisation_basis,break_even_utilisation"
        )
    );
    assert!(
        csv.contains("\nline,00000000000c,ads,2,0,2000,0,0,1000,0.005,0.01,0.01,0.025,0.0125,25,,,,,,\n"),
        "{csv}"
    );
    assert!(csv.contains("\nline,TEAM_KEY,-,1,0,1000,0,0,500,0.001,0,0,0.001,0.001,2,,,,,,\n"), "{csv}");
    assert!(csv.contains("\ntotal,,,6,,,,,,0.036,0.01,0.01,0.056,,,,,,,,\n"), "{csv}");
    // 4 of 16 slots for one of two minutes: 12.5 % of capacity; the task sits in its own column.
    assert!(csv.contains("\nself_hosted,,,,,,,,,,,,,,,t,pool,0.125,0.5,capacity,"), "{csv}");

    let table = crate::report::render::table(&r);
    let header = table.lines().nth(2).unwrap();
    assert!(header.starts_with("key ") && header.contains(" team    requests  failed"), "{table}");
    let c = table.lines().find(|l| l.starts_with("00000000000c ")).unwrap();
    assert!(c.contains(" ads ") && c.contains("$0.0250      $0.0125      $25.0000"), "{table}");
    let html = crate::report::render(&r, ReportFormat::Html).unwrap();
    assert!(html.contains("<th>key</th><th>team</th><th>requests</th>"), "{html}");
    assert!(html.contains(r#"<td class="k">00000000000c</td><td class="k">ads</td><td>2</td>"#), "{html}");
    let json: serde_json::Value =
        serde_json::from_str(&crate::report::render(&r, ReportFormat::Json).unwrap()).unwrap();
    assert_eq!(json["group_by"], serde_json::json!(["key", "team"]));
    assert_eq!(json["lines"][4]["group"], serde_json::json!(["TEAM_KEY", "-"]));
    assert_eq!(json["lines"][3]["total_usd"], "0.025");
}
