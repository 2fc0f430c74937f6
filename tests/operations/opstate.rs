//! Operator state shared by replicas: a drain, a forced breaker and a release made through one
//! `spillway serve` replica hold on another within a second when both share PostgreSQL and
//! Redis (the other stops routing to the backend: its next request's `x-spillway-backend`
//! says so), survive that replica's restart, and are audited with who did what; a canary result
//! is shared the same way. Without Redis (or with it away) a change arrives within one poll
//! interval; with SQLite alone it survives a restart.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common;

use common::*;
use serde_json::{json, Value};
use spillway::sim::{SimHandle, SimKind};

const ADMIN: &str = "opstate-admin-token";
const REDIS: &str = "redis://127.0.0.1:6379";

/// Two hosted backends; `first` serves while it may, `second` takes over.
fn yaml(first: &SimHandle, second: &SimHandle, ledger: &str, spool: &Path, state: &str) -> String {
    format!(
        r#"listen: 127.0.0.1:0
admin_token_env: OPSTATE_ADMIN
backends:
  - {{name: first, kind: openai, base_url: "{first}/v1", model: gpt}}
  - {{name: second, kind: anthropic, base_url: "{second}", model: claude}}
tasks:
  - {{name: chat, backends: [first, second], strategy: priority, slo: {{ttft_ms: 3000}}}}
state: {state}
ledger: {{url: "{ledger}", spool: {{dir: "{spool}"}}}}
"#,
        first = first.base_url(),
        second = second.base_url(),
        spool = spool.display(),
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-{name}-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `first`'s node as `GET /admin/backends` on `base` lists it.
async fn first_node(base: &str) -> Value {
    admin_json(base, "/admin/backends", ADMIN).await["backends"][0]["nodes"][0].clone()
}

/// The backend that served one chat request through `base`.
async fn served_by(base: &str) -> String {
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body("chat", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.headers()["x-spillway-backend"].to_str().unwrap().to_string()
}

/// Wait (up to `within`) until `first`'s node on `base` has `field` = `want`; how long it took.
async fn wait_node(base: &str, field: &str, want: Value, within: Duration) -> Duration {
    let from = Instant::now();
    wait_until(within, format!("{field} = {want} on {base}"), || async {
        let seen = first_node(base).await[field].clone();
        if seen == want {
            Ok(())
        } else {
            Err(seen)
        }
    })
    .await;
    from.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_a_forced_breaker_and_a_release_reach_the_other_replica_within_a_second() {
    let Some(pg) = pg_store_url("opstate").await else { return };
    let (first, second) =
        (sim(SimKind::OpenAi, "gpt", |_| {}).await, sim(SimKind::Anthropic, "claude", |_| {}).await);
    let dir = temp_dir("opstate");
    // A poll far longer than a second: only the announcement through Redis can be that quick.
    let state = format!(r#"{{redis_url: "{REDIS}", operator_poll_ms: 10000}}"#);
    let config = |name: &str| {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, yaml(&first, &second, &pg, &dir.join(format!("{name}.spool")), &state))
            .unwrap();
        path
    };
    let (path_a, path_b) = (config("a"), config("b"));
    let env = [("OPSTATE_ADMIN", ADMIN)];
    let (a, url_a, _log_a) = serve_process(&path_a, &env).await;
    let _a = Guard(a);
    let (b, url_b, _log_b) = serve_process(&path_b, &env).await;
    let mut b = Guard(b);
    for url in [&url_a, &url_b] {
        wait_until(Duration::from_secs(5), "the replica to subscribe to announcements", || async {
            admin_json(url, "/admin/backends", ADMIN).await["operator_state"]["notify_up"] == true
        })
        .await;
    }
    assert_eq!(served_by(&url_b).await, "first");

    admin_post(&url_a, "/admin/hold", ADMIN, "alice", json!({"backend": "first", "kind": "drain"})).await;
    let took = wait_node(&url_b, "held", json!("backend drained by alice"), Duration::from_secs(1)).await;
    eprintln!("drain through A held on B after {took:?}");
    assert_eq!(served_by(&url_b).await, "second", "B routes around the drained backend");

    admin_post(&url_a, "/admin/release", ADMIN, "alice", json!({"backend": "first"})).await;
    let took = wait_node(&url_b, "held", Value::Null, Duration::from_secs(1)).await;
    eprintln!("release through A lifted on B after {took:?}");
    assert_eq!(served_by(&url_b).await, "first");

    admin_post(&url_a, "/admin/breakers", ADMIN, "bob", json!({"backend": "first", "state": "open"})).await;
    let took = wait_node(&url_b, "breaker_forced", json!("open"), Duration::from_secs(1)).await;
    eprintln!("breaker forced through A open on B after {took:?}");
    wait_node(&url_b, "breaker", json!("open"), Duration::from_secs(1)).await;
    assert_eq!(served_by(&url_b).await, "second", "B sends nothing through a forced-open breaker");

    // A canary round run through A is what B shows too.
    let probed = admin_post(&url_a, "/admin/canary", ADMIN, "alice", json!({"backend": "second"})).await;
    assert_eq!(probed["results"][0]["ok"], true);
    wait_until(Duration::from_secs(1), "B to show A's canary result", || async {
        let canaries = admin_json(&url_b, "/admin/backends", ADMIN).await["canaries"].clone();
        if canaries[0]["backend"] == "second" && canaries[0]["ok"] == true {
            Ok(())
        } else {
            Err(canaries)
        }
    })
    .await;

    // B restarts: it reads the state before it reports ready.
    b.0.kill().unwrap();
    b.0.wait().unwrap();
    let (restarted, url_b, _log_b) = serve_process(&path_b, &env).await;
    b.0 = restarted;
    assert_eq!(first_node(&url_b).await["breaker_forced"], "open", "the forced breaker survives a restart");
    assert_eq!(served_by(&url_b).await, "second");

    // Both replicas applied the same version; the audit on B lists who did what, newest first.
    let version = |text: &str| series_sum(text, "spillway_operator_state_version", &[]);
    let (text_a, text_b) = (metrics_text(&url_a).await, metrics_text(&url_b).await);
    assert_eq!(version(&text_a), version(&text_b));
    assert_eq!(series_sum(&text_b, "spillway_operator_state_notify_up", &[("store", "redis")]), Some(1.0));
    assert!(series_sum(&text_b, "spillway_operator_state_sync_age_seconds", &[]).is_some());
    promtool_check(&text_b);
    let audit = admin_json(&url_b, "/admin/audit", ADMIN).await;
    let lines: Vec<(String, String, String)> = audit["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["action"].as_str().unwrap().into(),
                c["by"].as_str().unwrap().into(),
                c["scope"].as_str().unwrap().into(),
            )
        })
        .collect();
    let node = first_node(&url_b).await["node"].as_str().unwrap().to_string();
    assert_eq!(
        lines,
        [
            ("canary_ok".into(), "canary".into(), "second".into()),
            ("breaker_open".into(), "bob".into(), node),
            ("release".into(), "alice".into(), "first".into()),
            ("drain".into(), "alice".into(), "first".into()),
        ]
    );
    assert_eq!(audit["changes"][2]["old"], "drained");
    assert!(audit["changes"][0]["at_ms"].as_i64().unwrap() > 0);
}

/// A child killed when the test ends, also when it fails.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_redis_a_hold_reaches_the_other_replica_within_one_poll_interval() {
    let Some(pg) = pg_store_url("opstate_poll").await else { return };
    let (first, second) =
        (sim(SimKind::OpenAi, "gpt", |_| {}).await, sim(SimKind::Anthropic, "claude", |_| {}).await);
    let dir = temp_dir("opstate-poll");
    const POLL_MS: u64 = 300;
    let state = format!("{{operator_poll_ms: {POLL_MS}}}");
    // B is told of a Redis that is not there: it polls, and says so in a metric.
    let away = format!(r#"{{operator_poll_ms: {POLL_MS}, redis_url: "redis://127.0.0.1:1"}}"#);
    let env = [("OPSTATE_ADMIN", ADMIN)];
    let a = router(&yaml(&first, &second, &pg, &dir.join("a.spool"), &state), &env).await;
    let b = router(&yaml(&first, &second, &pg, &dir.join("b.spool"), &away), &env).await;
    let listing = admin_json(&a, "/admin/backends", ADMIN).await;
    assert_eq!(listing["operator_state"]["shared"], true);
    assert_eq!(listing["operator_state"]["notify_up"], Value::Null, "no Redis configured");
    let text = metrics_text(&b).await;
    assert_eq!(series_sum(&text, "spillway_operator_state_notify_up", &[("store", "redis")]), Some(0.0));

    admin_post(&a.url, "/admin/hold", ADMIN, "carol", json!({"backend": "first", "kind": "disable"})).await;
    // One poll, plus the snapshot loop's 100 ms and the reads.
    let within = Duration::from_millis(POLL_MS + 600);
    let took = wait_node(&b.url, "held", json!("backend disabled by carol"), within).await;
    eprintln!("without Redis the hold reached B after {took:?} (poll {POLL_MS} ms)");
    assert_eq!(served_by(&b.url).await, "second");
    admin_post(&a.url, "/admin/release", ADMIN, "carol", json!({"backend": "first"})).await;
    wait_node(&b.url, "held", Value::Null, within).await;
    assert_eq!(served_by(&b.url).await, "first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_sqlite_alone_holds_and_forced_breakers_survive_a_restart() {
    let (first, second) =
        (sim(SimKind::OpenAi, "gpt", |_| {}).await, sim(SimKind::Anthropic, "claude", |_| {}).await);
    let dir = temp_dir("opstate-sqlite");
    let ledger = format!("sqlite://{}", dir.join("ledger.db").display());
    let config = yaml(&first, &second, &ledger, &dir.join("spool"), "{}");
    let env = [("OPSTATE_ADMIN", ADMIN)];
    let start = |stop: tokio::sync::oneshot::Receiver<()>| {
        router_until(&config, &env, spillway::app::Options::default(), async move {
            let _ = stop.await;
        })
    };
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let mut r = start(stopped).await;
    admin_post(&r.url, "/admin/hold", ADMIN, "dave", json!({"backend": "second", "kind": "drain"})).await;
    admin_post(&r.url, "/admin/breakers", ADMIN, "dave", json!({"backend": "first", "state": "closed"}))
        .await;
    let released = admin_post(&r.url, "/admin/release", ADMIN, "dave", json!({"backend": "first"})).await;
    assert_eq!(released["released"], false, "nothing held on first");
    stop.send(()).unwrap();
    (&mut r.handle.task).await.unwrap().unwrap();
    drop(r);

    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let r = start(stopped).await;
    let listing = admin_json(&r, "/admin/backends", ADMIN).await;
    assert_eq!(listing["backends"][1]["nodes"][0]["held"], "backend drained by dave");
    assert_eq!(listing["backends"][0]["nodes"][0]["breaker_forced"], "closed");
    assert_eq!(listing["holds"].as_array().unwrap().len(), 1);
    let audit = admin_json(&r, "/admin/audit?limit=5", ADMIN).await;
    let actions: Vec<&str> =
        audit["changes"].as_array().unwrap().iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["breaker_closed", "drain"], "a release of nothing is not a change");
}
