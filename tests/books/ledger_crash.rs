//! The ledger survives a SIGKILL: `spillway serve` is killed mid-load, started again on the same
//! ledger and spool, and every request that had completed more than 100 ms before the kill has
//! its row (replayed from the spool), on SQLite and on PostgreSQL. Each request names its own
//! session, so its row is found by its affinity hash.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spillway::ledger::Store;
use spillway::sim::SimKind;
use tokio::time::Instant;

use crate::common::{self, body, serve_process, sim, wait_until, Child};

/// Requests in flight at once, and how many complete before the kill.
const CONCURRENCY: usize = 4;
const KILL_AFTER: usize = 80;
const TOTAL: usize = 160;

async fn crash_and_replay(ledger_url: &str, name: &str) {
    let hosted = sim(SimKind::OpenAi, "gpt", |a| {
        a.ttft_ms = 5;
        a.output_tokens = 4;
        a.tokens_per_sec = 2_000.0;
    })
    .await;
    let dir = std::env::temp_dir().join(format!("spillway-crash-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         backends: [{{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt}}]\n\
         tasks: [{{name: t, backends: [hosted], slo: {{ttft_ms: 3000}}}}]\n\
         ledger: {{url: \"{ledger_url}\"}}\n",
        hosted.base_url()
    );
    std::fs::write(&path, yaml).unwrap();
    let (server, url, _stderr) = serve_process(&path, &[]).await;
    let mut server = Child(server);

    // Steady traffic; each worker notes which request got its 200 when.
    let done: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let (sent, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let client = reqwest::Client::new();
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (done, sent, stop, client) = (done.clone(), sent.clone(), stop.clone(), client.clone());
            let url = format!("{url}/v1/chat/completions");
            tokio::spawn(async move {
                loop {
                    let i = sent.fetch_add(1, Ordering::SeqCst);
                    if stop.load(Ordering::SeqCst) || i >= TOTAL {
                        return;
                    }
                    let session = format!("crash-{i}");
                    let request = client.post(&url).header("x-session-id", &session).json(&body("t", false));
                    let Ok(resp) = request.send().await else { return };
                    if resp.status() == 200 && resp.bytes().await.is_ok() {
                        let hash = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(session.as_bytes()));
                        done.lock().unwrap().push((hash, Instant::now()));
                    }
                }
            })
        })
        .collect();
    wait_until(Duration::from_secs(20), format!("{KILL_AFTER} requests to complete"), || {
        let n = done.lock().unwrap().len();
        async move { n >= KILL_AFTER }
    })
    .await;
    server.0.kill().unwrap(); // SIGKILL
    let killed_at = Instant::now();
    server.0.wait().unwrap();
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let completed = done.lock().unwrap().clone();
    let old_enough: Vec<String> = completed
        .into_iter()
        .filter(|(_, t)| killed_at.duration_since(*t) > Duration::from_millis(100))
        .map(|(hash, _)| hash)
        .collect();
    assert!(old_enough.len() >= KILL_AFTER / 2, "{name}: the load ran before the kill: {}", old_enough.len());

    // Started again on the same ledger and spool, it replays what the spool held.
    let (again, url, _stderr) = serve_process(&path, &[]).await;
    let _again = Child(again);
    let store = Store::open(ledger_url).await.unwrap();
    let what =
        format!("{name}: the rows of the {} requests completed 100 ms before the kill", old_enough.len());
    let rows = wait_until(Duration::from_secs(10), what, || {
        let (store, want) = (store.clone(), old_enough.clone());
        async move {
            let rows = store.query(0, i64::MAX).await.map_err(|e| e.to_string())?;
            let have: HashSet<String> = rows.iter().filter_map(|r| r.affinity_hash.clone()).collect();
            let missing = want.iter().filter(|h| !have.contains(*h)).count();
            if missing == 0 {
                Ok(rows)
            } else {
                Err(format!("{missing} of {} missing ({} rows)", want.len(), rows.len()))
            }
        }
    })
    .await;
    let distinct: HashSet<&str> = rows.iter().filter_map(|r| r.affinity_hash.as_deref()).collect();
    assert_eq!(distinct.len(), rows.len(), "{name}: no request has two rows");
    let replayed = common::metric(&url, "spillway_ledger_spool_replayed_rows_total").await;
    assert!(replayed >= 1.0, "{name}: the rows the writer had not committed came back from the spool");
    assert_eq!(common::metric(&url, "spillway_ledger_spool_full_total").await, 0.0);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkill_loses_no_completed_request_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("spillway-crash-db-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    crash_and_replay(&format!("sqlite://{}", dir.join("ledger.db").display()), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkill_loses_no_completed_request_on_postgres() {
    let Some(url) = common::pg_store_url("ledger_crash").await else { return };
    crash_and_replay(&url, "postgres").await;
}
