//! Reports by client key and team, end to end on both stores: issued keys of two teams (three
//! keys) and a static key send real requests, the ledger rows carry each issued key's id and
//! team (the static key's none), and `spillway report --group-by key,team` (and `team`) gives
//! the same spend in table, CSV, JSON and HTML, adding up to the cent to the ungrouped report
//! and to the ledger's own rows.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;

use common::sim;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use spillway::ledger::Store;
use spillway::sim::SimKind;

const ADMIN: &str = "admin-token-for-team-reports";
const STATIC: &str = "static-key-for-team-reports";

/// A ledger row's client key and team.
type KeyAndTeam<'a> = (Option<&'a str>, Option<&'a str>);

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn yaml(hosted: &str, ledger: &str) -> String {
    format!(
        r#"
client_keys_env: [TEAM_REPORT_STATIC]
admin_token_env: TEAM_REPORT_ADMIN
backends:
  - {{name: openai, kind: openai, base_url: "{hosted}/v1", model: gpt, price: {{input_per_mtok: 5, output_per_mtok: 20}}}}
tasks:
  - {{name: chat, backends: [openai], slo: {{ttft_ms: 3000}}}}
ledger: {{url: "{ledger}"}}
"#
    )
}

async fn chat(base: &str, key: &str, i: usize) -> u16 {
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": format!("hello {i}")}], "max_tokens": 8});
    let client = reqwest::Client::new();
    let resp = client.post(format!("{base}/v1/chat/completions")).bearer_auth(key).json(&body).send();
    resp.await.unwrap().status().as_u16()
}

/// Issue a key of `team` through the admin API: (id, secret).
async fn issue(base: &str, name: &str, team: &str) -> (String, String) {
    let resp = reqwest::Client::new()
        .post(format!("{base}/admin/keys"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": name, "team": team}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.unwrap();
    let id = created["key"]["id"].as_str().unwrap().to_string();
    (id, created["secret"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_by_key_and_team_reconcile_on_both_stores() {
    let mut stores = vec![("sqlite", common::temp_ledger_url())];
    stores.extend(common::pg_store_url("team_report").await.map(|url| ("postgres", url)));
    for (name, url) in stores {
        by_key_and_team(name, &url).await;
    }
}

async fn by_key_and_team(store_name: &str, ledger_url: &str) {
    let hosted = sim(SimKind::OpenAi, "gpt", |_| {}).await;
    let env = [("TEAM_REPORT_STATIC", STATIC), ("TEAM_REPORT_ADMIN", ADMIN)];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut r =
        common::router_until(&yaml(&hosted.base_url(), ledger_url), &env, Default::default(), async {
            let _ = stopped.await;
        })
        .await;

    let (s1, s1_secret) = issue(&r.url, "indexer", "search").await;
    let (s2, s2_secret) = issue(&r.url, "ranker", "search").await;
    let (a1, a1_secret) = issue(&r.url, "bidder", "ads").await;
    // Requests per key: 3 + 2 for search, 4 for ads, 1 for the static key (no team).
    let plan = [(&s1_secret, 3), (&s2_secret, 2), (&a1_secret, 4), (&STATIC.to_string(), 1)];
    let mut i = 0;
    for (secret, n) in plan {
        for _ in 0..n {
            assert_eq!(chat(&r.url, secret, i).await, 200, "{store_name}: request {i}");
            i += 1;
        }
    }
    // Graceful shutdown flushes the ledger writer.
    stop.send(()).unwrap();
    (&mut r.handle.task).await.unwrap().unwrap();

    // The rows carry the key's id and team; the static key's variable and no team.
    let store = Store::open(ledger_url).await.unwrap();
    let records = store.query(0, i64::MAX).await.unwrap();
    store.close().await;
    assert_eq!(records.len(), 10, "{store_name}");
    let mut by_key: BTreeMap<KeyAndTeam<'_>, (u64, Decimal)> = BTreeMap::new();
    for r in &records {
        let e = by_key.entry((r.client_key.as_deref(), r.team.as_deref())).or_default();
        (e.0, e.1) = (e.0 + 1, e.1 + r.cost_usd.expect("a priced hosted request"));
    }
    let count = |k: &str, t: Option<&str>| by_key.get(&(Some(k), t)).map(|e| e.0);
    assert_eq!(count(&s1, Some("search")), Some(3), "{store_name}: {by_key:?}");
    assert_eq!(count(&s2, Some("search")), Some(2), "{store_name}: {by_key:?}");
    assert_eq!(count(&a1, Some("ads")), Some(4), "{store_name}: {by_key:?}");
    assert_eq!(count("TEAM_REPORT_STATIC", None), Some(1), "{store_name}: {by_key:?}");
    let spend = |team: Option<&str>| -> Decimal {
        by_key.iter().filter(|((_, t), _)| *t == team).map(|(_, e)| e.1).sum()
    };
    let total: Decimal = by_key.values().map(|e| e.1).sum();
    assert!(spend(Some("search")) > Decimal::ZERO && spend(Some("ads")) > Decimal::ZERO);

    let report = |format: &str, group_by: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args([
                "report",
                "--ledger",
                ledger_url,
                "--from",
                "-1h",
                "--format",
                format,
                "--group-by",
                group_by,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{store_name}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };

    // JSON: a line per key with its team, adding up to the ungrouped report and the rows.
    let whole: Value = serde_json::from_str(&report("json", "task")).unwrap();
    let keyed: Value = serde_json::from_str(&report("json", "key,team")).unwrap();
    let whole_total = d(whole["totals"]["total_usd"].as_str().unwrap());
    assert_eq!(whole_total, total.round_dp(6), "{store_name}");
    assert_eq!(keyed["totals"], whole["totals"], "{store_name}");
    assert_eq!(keyed["group_by"], json!(["key", "team"]));
    let lines = keyed["lines"].as_array().unwrap();
    let groups: Vec<&Value> = lines.iter().map(|l| &l["group"]).collect();
    let mut want = [
        json!([s1, "search"]),
        json!([s2, "search"]),
        json!([a1, "ads"]),
        json!(["TEAM_REPORT_STATIC", "-"]),
    ];
    want.sort_by_key(|g| g.to_string());
    assert_eq!(groups, want.iter().collect::<Vec<_>>(), "{store_name}");
    let line_sum: Decimal = lines.iter().map(|l| d(l["total_usd"].as_str().unwrap())).sum();
    assert_eq!(line_sum.round_dp(2), whole_total.round_dp(2), "{store_name}: lines add up to the cent");
    assert_eq!(line_sum, whole_total, "{store_name}: hosted only, so exactly");

    let teams: Value = serde_json::from_str(&report("json", "team")).unwrap();
    let team_line = |t: &str| {
        teams["lines"].as_array().unwrap().iter().find(|l| l["group"] == json!([t])).cloned().unwrap()
    };
    assert_eq!(team_line("search")["requests"], 5);
    assert_eq!(d(team_line("search")["total_usd"].as_str().unwrap()), spend(Some("search")).round_dp(6));
    assert_eq!(team_line("ads")["requests"], 4);
    assert_eq!(d(team_line("ads")["total_usd"].as_str().unwrap()), spend(Some("ads")).round_dp(6));
    assert_eq!(team_line("-")["requests"], 1, "the static key has no team");

    // CSV: the same lines; the line rows sum to the total row.
    let csv = report("csv", "key,team");
    assert!(csv.starts_with("row,key,team,requests,"), "{csv}");
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let total_at = rows[0].iter().position(|c| *c == "total_usd").unwrap();
    let csv_lines: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == "line").collect();
    assert_eq!(csv_lines.len(), 4, "{csv}");
    let ads = csv_lines.iter().find(|r| r[1] == a1).unwrap();
    assert_eq!((ads[2], ads[3]), ("ads", "4"), "{csv}");
    let csv_sum: Decimal = csv_lines.iter().map(|r| d(r[total_at])).sum();
    let csv_total = rows.iter().find(|r| r[0] == "total").map(|r| d(r[total_at])).unwrap();
    assert_eq!((csv_sum, csv_total), (whole_total, whole_total), "{csv}");

    // Table and HTML: every key and team, and the same total.
    let table = report("table", "team,key");
    let header = table.lines().nth(2).unwrap();
    assert!(
        header.starts_with("team ") && header.contains(" key ") && header.contains(" requests "),
        "{table}"
    );
    for (team, key) in
        [("search", &s1), ("search", &s2), ("ads", &a1), ("-", &"TEAM_REPORT_STATIC".to_string())]
    {
        let row =
            table.lines().find(|l| l.contains(key.as_str())).unwrap_or_else(|| panic!("{key}: {table}"));
        assert!(row.starts_with(&format!("{team} ")), "{row}");
    }
    assert!(table.contains(&format!("${:.4}", whole_total)), "{table}");
    let html = report("html", "key,team");
    assert!(html.contains("<th>key</th><th>team</th>"), "{html}");
    assert!(
        html.contains(&format!(r#"<td class="k">{a1}</td><td class="k">ads</td><td>4</td>"#)),
        "{store_name}"
    );
    assert!(html.contains(&format!("${:.4}", whole_total)), "{store_name}");

    // With the router's budgets (--config), the report sets each key's and team's spend
    // against the budget that covers the period: today lies within one day, which has no
    // budget here, and one month, which has.
    let config =
        std::env::temp_dir().join(format!("spillway-team-report-{:016x}.yaml", rand::random::<u64>()));
    // The key's id is quoted: an id of digits, an `e` and digits would read as a number.
    let budgets = format!(
        "budgets:\n  keys: {{TEAM_REPORT_STATIC: {{usd_per_month: \"500\"}}, \"{a1}\": {{usd_per_month: \"2\"}}}}\n  teams: {{ads: {{usd_per_month: \"1000\"}}}}\n"
    );
    std::fs::write(&config, yaml("http://127.0.0.1:9", ledger_url) + &budgets).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["report", "--config", config.to_str().unwrap(), "--ledger", ledger_url, "--from", "today"])
        .args(["--format", "json", "--group-by", "key,team"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&config);
    assert!(out.status.success(), "{store_name}: {}", String::from_utf8_lossy(&out.stderr));
    let budgeted: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = budgeted["budgets"].as_array().unwrap();
    let who: Vec<(&str, &str, &str, &str)> = rows
        .iter()
        .map(|b| {
            let f = |k: &str| b[k].as_str().unwrap();
            (f("scope"), f("name"), f("period"), f("limit_usd"))
        })
        .collect();
    let mut want = vec![("key", a1.as_str(), "month", "2"), ("key", "TEAM_REPORT_STATIC", "month", "500")];
    want.sort();
    want.push(("team", "ads", "month", "1000"));
    assert_eq!(who, want, "{store_name}: {budgeted}");
    let line_of = |key: &str| {
        let lines = budgeted["lines"].as_array().unwrap();
        lines.iter().find(|l| l["group"][0] == key).map(|l| d(l["total_usd"].as_str().unwrap()))
    };
    let ads_key = rows.iter().find(|b| b["name"] == a1.as_str()).unwrap();
    assert_eq!(Some(d(ads_key["spend_usd"].as_str().unwrap())), line_of(&a1), "{store_name}");
    let used = ads_key["used"].as_f64().unwrap();
    assert!((used - line_of(&a1).unwrap().to_f64().unwrap() / 2.0).abs() < 1e-9, "{store_name}: {used}");
}
