//! A batch job survives a SIGKILL, with the default batch settings, on SQLite and on
//! PostgreSQL: `spillway serve` is killed while a job's lines run on a `spillway sim` node, and
//! the job completes with every line done exactly once (one result each, in the output file
//! once), whether the same replica starts again (it takes back its dead predecessor's lines at
//! once) or another replica on the same ledger finishes them (once the dead one's claims
//! lapse). A line that had ended before the kill keeps its result and never runs again; the
//! only lines the node may answer twice are those in flight at the kill. A line slower than
//! its lease, on a live replica, runs once: the lease is renewed while it runs.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use spillway::batch::job::LineState;
use spillway::batch::store;
use spillway::ledger::Store;

use crate::common::{self, serve_process, wait_until, Child, Output};

const LINES: usize = 30;
const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// `spillway sim --kind vllm` on port 0, slow enough (100 ms a token) that a job is mid-way
/// for a while: the child and its URL.
fn slow_node() -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["sim", "--listen", "127.0.0.1:0", "--kind", "vllm", "--model", LLAMA])
        .args(["--token-delay-ms", "100"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn spillway sim");
    let stdout = Output::collect(child.stdout.take().unwrap());
    let url = tokio::task::block_in_place(|| stdout.wait_url());
    (Child(child), url)
}

/// Upload `text` as a batch input file and create a chat job from it: the job's id.
async fn create_job(client: &reqwest::Client, url: &str, text: &str) -> String {
    let (content_type, body) = spillway::batch::provider_api::file_form("batch", "in.jsonl", text);
    let file: Value = client
        .post(format!("{url}/v1/files"))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let job: Value =
        client.post(format!("{url}/v1/batches")).json(&create).send().await.unwrap().json().await.unwrap();
    job["id"].as_str().unwrap_or_else(|| panic!("no job: {job}")).to_string()
}

/// Poll the job until `done` holds of it.
async fn wait_job(url: &str, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let client = reqwest::Client::new();
    wait_until(Duration::from_secs(60), format!("{id}: {what}"), || {
        let request = client.get(format!("{url}/v1/batches/{id}")).send();
        let done = &done;
        async move {
            let job: Value =
                request.await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
            if done(&job) {
                Ok(job)
            } else {
                Err(job.to_string())
            }
        }
    })
    .await
}

/// The results of the job's succeeded lines, by custom_id, as the store holds them.
async fn succeeded(store: &Store, id: &str) -> HashMap<String, Option<String>> {
    let ended = store::ended(store, id, &[LineState::Succeeded]).await.unwrap();
    ended.into_iter().map(|l| (l.custom_id, l.result)).collect()
}

/// A serve config on `ledger_url` with one pool on `node_url`, listening on `listen`, with
/// `batch` (the section's keys beside a fast poll): its path.
fn config(node_url: &str, ledger_url: &str, listen: &str, batch: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-batch-crash-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let yaml = format!(
        "listen: {listen}\n\
         backends: [{{name: fleet, kind: vllm, endpoints: [\"{node_url}\"], model: {LLAMA}}}]\n\
         tasks: [{{name: chat, backends: [fleet], slo: {{ttft_ms: 5000}}}}]\n\
         ledger: {{url: \"{ledger_url}\"}}\n\
         batch: {{poll_ms: 50{batch}}}\n{}",
        common::FAST_TELEMETRY
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The input file of `n` chat lines of `max_tokens` each.
fn lines(n: usize, max_tokens: u32) -> String {
    let line = |i| {
        json!({"custom_id": format!("r{i}"), "method": "POST", "url": "/v1/chat/completions",
               "body": {"model": "chat", "max_tokens": max_tokens,
                        "messages": [{"role": "user", "content": format!("question {i}")}]}})
        .to_string()
    };
    (0..n).map(line).collect::<Vec<_>>().join("\n")
}

/// The port of a router's URL.
fn port(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().trim_end_matches('/').parse().unwrap()
}

/// What the store said at a kill: lines in flight, and the results of those ended.
struct AtKill {
    running: u64,
    kept: HashMap<String, Option<String>>,
}

/// Wait until the job is mid-way (some lines ended, not all) with a line in flight held by the
/// router listening on `port`, then SIGKILL that router: what the store says at the kill.
async fn kill_mid_job(store: &Store, id: &str, server: &mut Child, port: u16, name: &str) -> AtKill {
    let held_by_it = format!(":{port}#");
    wait_until(
        Duration::from_secs(30),
        format!("{name}: a line in flight on :{port}, some done"),
        || async {
            let counts = store::counts(store, id).await.map_err(|e| e.to_string())?;
            let holders = store::holders(store).await.map_err(|e| e.to_string())?;
            let midway = counts.succeeded >= 1 && (counts.succeeded as usize) < LINES;
            if midway && holders.iter().any(|h| h.contains(&held_by_it)) {
                Ok(())
            } else {
                Err(format!("{counts:?} held by {holders:?}"))
            }
        },
    )
    .await;
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();
    let counts = store::counts(store, id).await.unwrap();
    let kept = succeeded(store, id).await;
    assert!((1..LINES).contains(&kept.len()), "{name}: the kill came mid-job: {counts:?}");
    assert_eq!((counts.errored, counts.canceled, counts.expired), (0, 0, 0), "{name}: {counts:?}");
    AtKill { running: counts.running, kept }
}

/// The job, ended, did every line exactly once: completed, each custom_id once in the output,
/// the results written before the kill kept, and the node asked at most once more for each
/// line in flight at the kill (those ended before it ran once, before; those queued ran once,
/// after; those in flight ran after, and before too if the node answered before the router
/// died).
async fn exactly_once(url: &str, store: &Store, id: &str, at: &AtKill, node_url: &str, name: &str) {
    let job = wait_job(url, id, "the job to end", |job| {
        ["completed", "failed", "expired", "cancelled"].contains(&job["status"].as_str().unwrap_or_default())
    })
    .await;
    assert_eq!(job["status"], "completed", "{name}: {job}");
    assert_eq!(job["request_counts"], json!({"total": LINES, "completed": LINES, "failed": 0}), "{name}");
    let output = format!("{url}/v1/files/{}/content", job["output_file_id"].as_str().unwrap());
    let output = reqwest::get(output).await.unwrap().text().await.unwrap();
    let mut ids: Vec<String> = output
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["custom_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut want: Vec<String> = (0..LINES).map(|i| format!("r{i}")).collect();
    want.sort();
    assert_eq!(ids, want, "{name}: each line once in the output");
    let after = succeeded(store, id).await;
    for (custom_id, result) in &at.kept {
        assert_eq!(after.get(custom_id), Some(result), "{name}: {custom_id} kept its result");
    }
    let answered = common::node_completed(node_url).await as u64;
    assert!(
        (LINES as u64..=LINES as u64 + at.running).contains(&answered),
        "{name}: the node answered {answered} requests for {LINES} lines, {} in flight at the kill",
        at.running
    );
}

/// SIGKILL mid-job, then the same replica (host and port) starts again: it takes back the
/// lines its dead predecessor held at once, and the job ends with every line done once.
async fn crash_and_restart(ledger_url: &str, name: &str) {
    let (_node, node_url) = slow_node();
    let first = config(&node_url, ledger_url, "127.0.0.1:0", "");
    let (server, url, _stderr) = serve_process(&first, &[]).await;
    let mut server = Child(server);
    let id = create_job(&reqwest::Client::new(), &url, &lines(LINES, 4)).await;
    let store = Store::open(ledger_url).await.unwrap();
    let at = kill_mid_job(&store, &id, &mut server, port(&url), name).await;

    let again = config(&node_url, ledger_url, &format!("127.0.0.1:{}", port(&url)), "");
    let restarted = std::time::Instant::now();
    let (again, url, stderr) = serve_process(&again, &[]).await;
    let _again = Child(again);
    exactly_once(&url, &store, &id, &at, &node_url, name).await;
    eprintln!("{name}: the job ended {:.1} s after the restart", restarted.elapsed().as_secs_f64());
    // Lines its predecessor still held at the kill are taken back at once. The kill may land
    // just after the held lines ended (the wait saw one held, the kill came a moment later):
    // then there is nothing to take back.
    let log = stderr.so_far();
    assert!(
        at.running == 0 || log.contains("took back the lines this replica ran before it restarted"),
        "{name}: {} lines held at the kill; the restarted replica took them back at once:\n{log}",
        at.running
    );
    store.close().await;
}

/// Two replicas on one ledger, one SIGKILLed mid-job: the other finishes the job, the dead
/// one's lines once their claims lapse (three heartbeats unrenewed).
async fn two_replicas_one_killed(ledger_url: &str, name: &str) {
    let (_node, node_url) = slow_node();
    let path = config(&node_url, ledger_url, "127.0.0.1:0", "");
    let (doomed, doomed_url, _stderr) = serve_process(&path, &[]).await;
    let mut doomed = Child(doomed);
    let (live, live_url, _live_stderr) = serve_process(&path, &[]).await;
    let _live = Child(live);
    let id = create_job(&reqwest::Client::new(), &doomed_url, &lines(LINES, 4)).await;
    let store = Store::open(ledger_url).await.unwrap();
    let at = kill_mid_job(&store, &id, &mut doomed, port(&doomed_url), name).await;
    let killed = std::time::Instant::now();
    exactly_once(&live_url, &store, &id, &at, &node_url, name).await;
    eprintln!(
        "{name}: the other replica ended the job {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    store.close().await;
}

/// Lines slower than their lease (a 1 s heartbeat: 3 s; each line 4 s) on two live replicas:
/// each runs once, for the replica running it renews its claim.
async fn slow_lines_run_once(ledger_url: &str, name: &str) {
    let (_node, node_url) = slow_node();
    let path = config(&node_url, ledger_url, "127.0.0.1:0", ", heartbeat_secs: 1");
    let (a, url, _a) = serve_process(&path, &[]).await;
    let _a = Child(a);
    let (b, _, _b) = serve_process(&path, &[]).await;
    let _b = Child(b);
    const SLOW: usize = 6;
    let id = create_job(&reqwest::Client::new(), &url, &lines(SLOW, 40)).await;
    let job = wait_job(&url, &id, "the job to end", |job| job["status"] == "completed").await;
    assert_eq!(job["request_counts"], json!({"total": SLOW, "completed": SLOW, "failed": 0}), "{name}");
    let answered = common::node_completed(&node_url).await as usize;
    assert_eq!(answered, SLOW, "{name}: each slow line ran once");
}

fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join(format!("spillway-batch-crash-db-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}", dir.join("ledger.db").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_restarted_after_a_sigkill_does_every_line_exactly_once_on_sqlite() {
    crash_and_restart(&sqlite_url(), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_restarted_after_a_sigkill_does_every_line_exactly_once_on_postgres() {
    let Some(url) = common::pg_store_url("batch_crash").await else { return };
    crash_and_restart(&url, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_replica_finishes_a_sigkilled_ones_lines_on_sqlite() {
    two_replicas_one_killed(&sqlite_url(), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_replica_finishes_a_sigkilled_ones_lines_on_postgres() {
    let Some(url) = common::pg_store_url("batch_replicas").await else { return };
    two_replicas_one_killed(&url, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_line_slower_than_its_lease_runs_once_on_sqlite() {
    slow_lines_run_once(&sqlite_url(), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_line_slower_than_its_lease_runs_once_on_postgres() {
    let Some(url) = common::pg_store_url("batch_slow").await else { return };
    slow_lines_run_once(&url, "postgres").await;
}
