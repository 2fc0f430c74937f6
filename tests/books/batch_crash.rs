//! A batch job survives a SIGKILL: `spillway serve` is killed while a job's lines run on a
//! `spillway sim` node, started again on the same ledger, and the job completes with every
//! line done exactly once (one result each, in the output file once), on SQLite and on
//! PostgreSQL. A line that had ended before the kill keeps its result and never runs again;
//! the only lines the node may answer twice are those in flight at the kill (claimed, their
//! result not yet written), which run again once their claim (`batch.claim_secs`) lapses.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use spillway::batch::job::LineState;
use spillway::batch::store;
use spillway::ledger::Store;

use crate::common::{self, serve_process, wait_until, Output};

const LINES: usize = 30;
const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// A child that is killed when the test ends, also when it fails.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let (content_type, body) = spillway::adapter::batch_api::file_form("batch", "in.jsonl", text);
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

async fn crash_and_resume(ledger_url: &str, name: &str) {
    let (_node, node_url) = slow_node();
    let dir = std::env::temp_dir().join(format!("spillway-batch-crash-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         backends: [{{name: fleet, kind: vllm, endpoints: [\"{node_url}\"], model: {LLAMA}}}]\n\
         tasks: [{{name: chat, backends: [fleet], slo: {{ttft_ms: 5000}}}}]\n\
         ledger: {{url: \"{ledger_url}\"}}\n\
         batch: {{poll_ms: 50, claim_secs: 5}}\n{}",
        common::FAST_TELEMETRY
    );
    std::fs::write(&path, yaml).unwrap();
    let (server, url, _stderr) = serve_process(&path, &[]).await;
    let mut server = Child(server);

    let text: Vec<String> = (0..LINES)
        .map(|i| {
            json!({"custom_id": format!("r{i}"), "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": "chat", "max_tokens": 4,
                            "messages": [{"role": "user", "content": format!("question {i}")}]}})
            .to_string()
        })
        .collect();
    let id = create_job(&reqwest::Client::new(), &url, &text.join("\n")).await;
    let midway =
        |job: &Value| (1..LINES as i64).contains(&job["request_counts"]["completed"].as_i64().unwrap_or(0));
    wait_job(&url, &id, "some lines completed, not all", midway).await;
    // ... and some are in flight, so the kill leaves claims behind.
    let store = Store::open(ledger_url).await.unwrap();
    wait_until(Duration::from_secs(30), format!("{name}: a line in flight, not all done"), || async {
        let counts = store::counts(&store, &id).await.map_err(|e| e.to_string())?;
        let midway = counts.running >= 1 && (counts.succeeded as usize) < LINES;
        if midway {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();

    // What the store says at the kill: lines ended (kept), in flight (claimed), queued.
    let before = store::counts(&store, &id).await.unwrap();
    let kept = succeeded(&store, &id).await;
    assert!((1..LINES).contains(&kept.len()), "{name}: the kill came mid-job: {before:?}");
    assert_eq!((before.errored, before.canceled, before.expired), (0, 0, 0), "{name}: {before:?}");

    // Started again on the same ledger, it runs what was queued, and what was in flight once
    // its claim lapses.
    let (again, url, _stderr) = serve_process(&path, &[]).await;
    let _again = Child(again);
    let job = wait_job(&url, &id, "the job to end", |job| {
        ["completed", "failed", "expired", "cancelled"].contains(&job["status"].as_str().unwrap_or_default())
    })
    .await;
    assert_eq!(job["status"], "completed", "{name}: {job}");
    assert_eq!(job["request_counts"], json!({"total": LINES, "completed": LINES, "failed": 0}), "{name}");

    // Every custom_id exactly once in the output file.
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

    // A line ended before the kill kept its result (written once, never again).
    let after = succeeded(&store, &id).await;
    for (custom_id, result) in &kept {
        assert_eq!(after.get(custom_id), Some(result), "{name}: {custom_id} kept its result");
    }
    // The node answered each line once, and at most the lines in flight at the kill twice:
    // those ended before it (kept.len()) ran once, before; those queued ran once, after; those
    // in flight (before.running) ran after, and before too if the node answered them before
    // the router died. So LINES <= answered <= LINES + before.running.
    let answered = common::node_completed(&node_url).await as u64;
    assert!(
        (LINES as u64..=LINES as u64 + before.running).contains(&answered),
        "{name}: the node answered {answered} requests for {LINES} lines, {} in flight at the kill",
        before.running
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_job_resumed_after_a_sigkill_does_every_line_exactly_once_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("spillway-batch-crash-db-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    crash_and_resume(&format!("sqlite://{}", dir.join("ledger.db").display()), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_job_resumed_after_a_sigkill_does_every_line_exactly_once_on_postgres() {
    let Some(url) = common::pg_store_url("batch_crash").await else { return };
    crash_and_resume(&url, "postgres").await;
}
