//! Cost reconciliation end to end, on both stores: real traffic through simulated vLLM nodes
//! and hosted providers, a graceful shutdown that flushes the ledger, a night of idle GPU
//! minutes, and then the report must add up to the cent: per-task costs (plus GPU no task
//! used) equal hosted spend, recomputed here from the usage the clients saw, plus GPU hours ×
//! price, idle included. The same report comes from `spillway report` in every format and
//! from `GET /admin/reports/cost`.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::sim;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use spillway::ledger::usage::{NodeMinute, Occupancy};
use spillway::ledger::{LedgerRow, Store};
use spillway::report::build::UtilisationBasis;
use spillway::report::{self, ReportFormat, ReportQuery};
use spillway::sim::SimKind;
use sqlx::{AssertSqlSafe, Connection};

const ADMIN: &str = "admin-token-for-tests";

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh SQLite file, and a fresh PostgreSQL schema when the server is reachable.
async fn stores() -> Vec<(&'static str, String)> {
    let tag = format!("{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
    let path = std::env::temp_dir().join(format!("spillway_cost_{tag}.db"));
    let mut out = vec![("sqlite", format!("sqlite://{}", path.display()))];
    let admin = std::env::var("SPILLWAY_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    match sqlx::PgConnection::connect(&admin).await {
        Ok(mut conn) => {
            let schema = format!("cost_test_{tag}");
            sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
            out.push(("postgres", format!("{admin}?options=-c%20search_path%3D{schema}")));
        }
        Err(e) => {
            assert!(std::env::var_os("SPILLWAY_REQUIRE_PG").is_none(), "PostgreSQL is not reachable: {e}");
            eprintln!("WARNING: PostgreSQL not reachable; cost tests ran against SQLite only");
        }
    }
    out
}

/// Usage the clients saw, by backend: (input, cached input, output).
type Seen = BTreeMap<String, (u64, u64, u64)>;

/// What a hosted request costs, written out independently of the router's pricing code.
fn list_price(backend: &str, (input, cached, output): (u64, u64, u64)) -> Decimal {
    let (p_in, p_cached, p_out) = match backend {
        "openai" => (d("5"), d("0.5"), d("20")),
        "anthropic" => (d("3"), d("3"), d("15")),
        other => panic!("{other} is not hosted"),
    };
    (Decimal::from(input - cached) * p_in + Decimal::from(cached) * p_cached + Decimal::from(output) * p_out)
        / Decimal::from(1_000_000)
}

fn config(nodes: [&str; 3], openai: &str, anthropic: &str, ledger: &str) -> String {
    format!(
        r#"
client_keys_env: [TEAM_A_KEY, TEAM_B_KEY]
admin_token_env: ADMIN_TOKEN
backends:
  - {{name: pool, kind: vllm, endpoints: ["{a}", "{b}"], model: llama, max_running: 4, reserve: 0,
      gpu_count: 2, gpu_hourly_usd: "2.50"}}
  - {{name: spare-pool, kind: vllm, endpoints: ["{c}"], model: llama, gpu_hourly_usd: "4.00"}}
  - name: openai
    kind: openai
    base_url: {openai}/v1
    model: gpt-x
    price: {{input_per_mtok: 5, cached_input_per_mtok: 0.5, output_per_mtok: 20}}
  - {{name: anthropic, kind: anthropic, base_url: "{anthropic}", model: claude,
      price: {{input_per_mtok: 3, output_per_mtok: 15}}}}
tasks:
  - {{name: summarise, backends: [pool, openai], strategy: priority, slo: {{ttft_ms: 3000}}}}
  - {{name: chat, backends: [anthropic, openai], strategy: priority, slo: {{ttft_ms: 3000}}}}
telemetry: {{interval_ms: 100, stale_after_ms: 1500, backoff_max_ms: 300}}
ledger: {{url: "{ledger}"}}
"#,
        a = nodes[0],
        b = nodes[1],
        c = nodes[2],
    )
}

async fn send(
    client: &reqwest::Client,
    url: &str,
    task: &str,
    key: &str,
    i: usize,
) -> (String, (u64, u64, u64)) {
    let body = json!({
        "model": task,
        "max_tokens": 16 + (i % 5) as u32 * 8,
        "messages": [{"role": "user", "content": format!("request {i}: {}", "tell me about costs ".repeat(i % 7 + 1))}],
    });
    let resp = client
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-spillway-project", format!("project-{}", i % 3))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let backend = resp.headers()["x-spillway-backend"].to_str().unwrap().to_string();
    let v: Value = resp.json().await.unwrap();
    let u = &v["usage"];
    let n = |x: &Value| x.as_u64().unwrap_or(0);
    (
        backend,
        (n(&u["prompt_tokens"]), n(&u["prompt_tokens_details"]["cached_tokens"]), n(&u["completion_tokens"])),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_task_costs_reconcile_to_the_cent_on_both_stores() {
    for (name, url) in stores().await {
        reconcile(name, &url).await;
    }
}

async fn reconcile(store_name: &str, ledger_url: &str) {
    let sims = [
        sim(SimKind::Vllm, "llama", |a| a.max_num_seqs = 4).await,
        sim(SimKind::Vllm, "llama", |a| a.max_num_seqs = 4).await,
        sim(SimKind::Vllm, "llama", |_| {}).await,
    ];
    let openai = sim(SimKind::OpenAi, "gpt-x", |_| {}).await;
    let anthropic = sim(SimKind::Anthropic, "claude", |_| {}).await;
    let nodes = [sims[0].base_url(), sims[1].base_url(), sims[2].base_url()];
    let yaml =
        config(nodes.each_ref().map(String::as_str), &openai.base_url(), &anthropic.base_url(), ledger_url);
    let cfg = spillway::config::parse(&yaml).unwrap_or_else(|p| panic!("{p:#?}"));
    let env = [("TEAM_A_KEY", "key-a"), ("TEAM_B_KEY", "key-b"), ("ADMIN_TOKEN", ADMIN)];
    let secrets = spillway::config::secrets::read_secrets(&cfg, |n| {
        env.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string())
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = spillway::app::start(cfg.clone(), secrets, listener, async {
        let _ = stopped.await;
    })
    .await
    .unwrap();
    let url = format!("http://{}", handle.addr);
    common::wait_fresh(&url, Duration::from_secs(5)).await; // first scrapes

    // 48 requests, 8 at a time: summarise fills the pool and spills to openai; chat is hosted.
    let client = reqwest::Client::new();
    let mut seen = Seen::new();
    for wave in 0..6 {
        let calls = (0..8).map(|j| {
            let i = wave * 8 + j;
            let task = if i % 3 == 2 { "chat" } else { "summarise" };
            let key = if i % 2 == 0 { "key-a" } else { "key-b" };
            let (client, url) = (client.clone(), url.clone());
            async move { send(&client, &url, task, key, i).await }
        });
        for (backend, usage) in futures::future::join_all(calls).await {
            let e = seen.entry(backend).or_default();
            (e.0, e.1, e.2) = (e.0 + usage.0, e.1 + usage.1, e.2 + usage.2);
        }
    }
    assert!(seen.contains_key("pool") && seen.contains_key("anthropic"), "{store_name}: {seen:?}");

    // The admin API, while the router runs.
    let admin = |q: &str, token: Option<&str>| {
        let mut req = client.get(format!("{url}/admin/reports/cost{q}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(admin("", None).await.unwrap().status(), 401);
    assert_eq!(admin("", Some("key-a")).await.unwrap().status(), 401, "a client key is not the admin token");
    let bad = admin("?group_by=task,team,team", Some(ADMIN)).await.unwrap();
    assert_eq!(bad.status(), 400);
    let bad: Value = bad.json().await.unwrap();
    assert!(bad["error"]["message"].as_str().unwrap().contains("names `team` twice"), "{bad}");
    let csv = admin("?format=csv&group_by=task,backend", Some(ADMIN)).await.unwrap();
    assert_eq!(csv.status(), 200);
    assert!(csv.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
    assert!(csv.text().await.unwrap().starts_with("row,task,backend,requests,"));

    // Graceful shutdown flushes the open GPU minute, queued outcomes and the writer.
    stop.send(()).unwrap();
    handle.task.await.unwrap().unwrap();

    // A night of idle GPU minutes for every node seen, two hours back.
    let store = Store::open(ledger_url).await.unwrap();
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let recorded = store.query_minutes(0, now_ms + 120_000).await.unwrap();
    let mut night = Vec::new();
    for m in recorded.iter().filter(|m| m.minute_ms == recorded[0].minute_ms) {
        for i in 0..30 {
            let minute_ms = spillway::ledger::usage::minute_of(now_ms) - 2 * 3_600_000 + i * 60_000;
            // Idle all minute: none of its 4 slots ran.
            let occupancy = Some(Occupancy { running_seq_ms: 0, capacity_seq_ms: 4 * 60_000 });
            night.push(LedgerRow::NodeMinute(NodeMinute { minute_ms, busy: false, occupancy, ..m.clone() }));
        }
    }
    assert_eq!(night.len(), 3 * 30, "{store_name}: every node has minutes: {recorded:?}");
    store.insert_rows(&night).await.unwrap();

    let until = jiff::Timestamp::from_millisecond(now_ms + 120_000).unwrap();
    let query =
        ReportQuery::parse(Some("-3h"), None, Some("task,backend,key"), ReportFormat::Json, until).unwrap();
    let records = store.query(query.from_ms, query.to_ms).await.unwrap();
    let minutes = store.query_minutes(query.from_ms, query.to_ms).await.unwrap();
    assert_eq!(records.len(), 48, "{store_name}: one row per request, none lost");

    // Ledger tokens are what the clients were told.
    let mut ledgered = Seen::new();
    for r in &records {
        let e = ledgered.entry(r.backend.clone()).or_default();
        (e.0, e.1, e.2) =
            (e.0 + r.input_tokens as u64, e.1 + r.cached_input_tokens as u64, e.2 + r.output_tokens as u64);
    }
    assert_eq!(ledgered, seen, "{store_name}");

    let hosted: Decimal = seen.iter().filter(|(b, _)| *b != "pool").map(|(b, u)| list_price(b, *u)).sum();
    let gpu_of = |m: &NodeMinute| Decimal::from(m.gpu_count) * m.gpu_hourly_usd.unwrap() / Decimal::from(60);
    let gpu: Decimal = minutes.iter().map(gpu_of).sum();
    let pool_gpu: Decimal = minutes.iter().filter(|m| m.backend == "pool").map(gpu_of).sum();
    let pool_idle: Decimal = minutes.iter().filter(|m| m.backend == "pool" && !m.busy).map(gpu_of).sum();
    let spare_gpu: Decimal = minutes.iter().filter(|m| m.backend == "spare-pool").map(gpu_of).sum();
    assert!(
        pool_idle.round_dp(2) >= d("5.00"),
        "{store_name}: the night is 30 min × 2 nodes × 2 GPUs × $2.50/h"
    );

    let r = report::build(&query, &records, &minutes, Some(&cfg));
    let lines: Decimal = r.lines.iter().map(|l| l.total_usd).sum();
    let cents = |x: Decimal| x.round_dp(2);
    assert_eq!(cents(lines + r.totals.gpu_unallocated_usd), cents(hosted + gpu), "{store_name}");
    assert!((lines + r.totals.gpu_unallocated_usd - hosted - gpu).abs() < d("0.0001"), "{store_name}");
    assert_eq!(cents(r.totals.total_usd), cents(hosted + gpu));
    assert_eq!(cents(r.totals.hosted_usd), cents(hosted));
    assert_eq!(cents(r.totals.gpu_unallocated_usd), cents(spare_gpu), "nobody used the spare pool");
    assert_eq!(
        cents(r.totals.gpu_idle_usd),
        cents(pool_idle),
        "idle minutes of a used pool are all allocated"
    );
    let task_gpu = |task: &str| -> Decimal {
        r.lines.iter().filter(|l| l.group[0] == task).map(|l| l.gpu_busy_usd + l.gpu_idle_usd).sum()
    };
    assert_eq!(cents(task_gpu("summarise")), cents(pool_gpu), "summarise is the pool's only task");
    assert_eq!(task_gpu("chat"), Decimal::ZERO);
    let summarise = r.tasks.iter().find(|t| t.task == "summarise").unwrap();
    let sh = &summarise.self_hosted[0];
    assert_eq!((sh.pool.as_str(), sh.cheapest_hosted.as_deref()), ("pool", Some("openai")));
    assert!(sh.loaded_per_mtok > sh.marginal_per_mtok && sh.break_even_utilisation.is_some());

    // Utilisation is running × time over slots × time, summed from what the store gave back.
    let pool_minutes: Vec<&NodeMinute> = minutes.iter().filter(|m| m.backend == "pool").collect();
    let occupancy: Vec<Occupancy> = pool_minutes.iter().filter_map(|m| m.occupancy).collect();
    assert_eq!(occupancy.len(), pool_minutes.len(), "{store_name}: every node-minute carries occupancy");
    let running: i64 = occupancy.iter().map(|o| o.running_seq_ms).sum();
    let capacity: i64 = occupancy.iter().map(|o| o.capacity_seq_ms).sum();
    assert!(capacity >= 2 * 30 * 4 * 60_000, "{store_name}: the night's capacity is in: {capacity}");
    let pool = r.pools.iter().find(|p| p.pool == "pool").unwrap();
    assert_eq!(pool.utilisation_basis, UtilisationBasis::Capacity, "{store_name}");
    assert_eq!(pool.utilisation, running as f64 / capacity as f64, "{store_name}");
    assert_eq!((sh.utilisation, sh.busy_share), (pool.utilisation, pool.busy_share));
    assert!(
        pool.utilisation < pool.busy_share,
        "{store_name}: a busy minute that used part of its slots counts as part: {pool:?}"
    );
    eprintln!("{store_name}: pool utilisation {} (busy share {})", pool.utilisation, pool.busy_share);
    store.close().await;

    // The command line gives the same figures in every format.
    let dir = std::env::temp_dir().join(format!("spillway_cost_cli_{}_{store_name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_path = dir.join("spillway.yaml");
    std::fs::write(&cfg_path, &yaml).unwrap();
    let report_cmd = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["report", "--config", cfg_path.to_str().unwrap(), "--from", "-3h"])
            .args(args)
            .output()
            .unwrap()
    };
    let bad = report_cmd(&["--to", "+0m"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("to `+0m`"), "a bad time is named: {err}");
    let cli = |format: &str, group_by: &str| {
        let out = report_cmd(&["--format", format, "--group-by", group_by]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let json: Value = serde_json::from_str(&cli("json", "task,key")).unwrap();
    assert_eq!(d(json["totals"]["total_usd"].as_str().unwrap()), r.totals.total_usd, "{store_name}");
    assert_eq!(json["group_by"], json!(["task", "key"]));
    assert_eq!(json["lines"].as_array().unwrap().len(), 4, "2 tasks × 2 keys");
    let json_pool = json["pools"].as_array().unwrap().iter().find(|p| p["pool"] == "pool").unwrap();
    assert_eq!(json_pool["utilisation"].as_f64(), Some(pool.utilisation), "{store_name}: {json_pool}");
    assert_eq!(json_pool["busy_share"].as_f64(), Some(pool.busy_share), "{store_name}: {json_pool}");
    assert_eq!(json_pool["utilisation_basis"], "capacity");
    let csv = cli("csv", "task");
    let total_row = csv.lines().find(|l| l.starts_with("total,")).unwrap();
    assert!(total_row.contains(&r.totals.total_usd.to_string()), "{total_row}");
    assert_eq!(csv.lines().filter(|l| l.starts_with("line,")).count(), 2);
    let pool_row = csv.lines().find(|l| l.starts_with("pool,") && l.contains(",pool,")).unwrap();
    assert!(
        pool_row.contains(&format!(",pool,{},{},capacity", pool.utilisation, pool.busy_share)),
        "{pool_row}"
    );
    let table = cli("table", "task,backend");
    assert!(
        table.contains("TOTAL")
            && table.contains("summarise")
            && table.contains("break_even")
            && table.contains("busy_share"),
        "{table}"
    );
    let html = cli("html", "task");
    assert!(html.starts_with("<!doctype html>") && html.contains("summarise"));
    let _ = std::fs::remove_dir_all(&dir);
}
