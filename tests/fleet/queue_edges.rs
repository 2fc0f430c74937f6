//! The wait queue's edges through `spillway serve` as a process: a two-slot simulated vLLM node
//! kept busy by slow answers, so later requests wait for a slot (in time for their SLO).
//! A waiting request whose client goes away leaves the queue at once; SIGTERM drains the queue,
//! each waiter spilled to the hosted provider and answered, none dropped.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::{metrics_text, series_sum, serve_process, sim, wait_until};
use spillway::sim::SimKind;

const KEY: &str = "sk-queue-edges";

/// A config over one two-slot node and a hosted provider, in a fresh directory.
fn config(node: &str, hosted: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-queue-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    let yaml = format!(
        r#"listen: 127.0.0.1:0
backends:
  - {{name: pool, kind: vllm, endpoints: ["{node}"], model: m, max_running: 2, reserve: 0}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt, api_key_env: QUEUE_EDGES_KEY}}
tasks:
  - {{name: chat, backends: [pool, hosted], slo: {{ttft_ms: 30000}}}}
limits: {{shutdown_delay_ms: 1000, drain_timeout_ms: 20000}}
ledger: {{url: "sqlite://{}"}}
"#,
        dir.join("ledger.db").display()
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The node (two slots, 100 tokens an answer at 40 ms a token: 4 s) and the hosted provider.
async fn upstreams() -> (spillway::sim::SimHandle, spillway::sim::SimHandle) {
    let node = sim(SimKind::Vllm, "m", |a| {
        a.max_num_seqs = 2;
        a.output_tokens = 100;
        a.itl_base_ms = 40.0;
        a.itl_per_seq_ms = 0.0;
    })
    .await;
    let hosted = sim(SimKind::OpenAi, "gpt", |a| a.api_key = Some(KEY.into())).await;
    (node, hosted)
}

fn ask(stream: bool) -> serde_json::Value {
    serde_json::json!({"model": "chat", "stream": stream, "max_tokens": 100,
        "messages": [{"role": "user", "content": "a long answer, please"}]})
}

/// A streamed request that holds one of the node's slots until its answer ends, once it has
/// begun.
async fn hold_a_slot(url: &str) -> tokio::task::JoinHandle<String> {
    let resp =
        reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&ask(true)).send().await;
    let mut resp = resp.unwrap();
    assert_eq!(resp.headers()["x-spillway-backend"], "pool");
    let first = resp.chunk().await.unwrap().unwrap();
    tokio::spawn(async move {
        let mut text = String::from_utf8_lossy(&first).to_string();
        while let Some(chunk) = resp.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text
    })
}

/// A plain request in the background: its status, serving backend and queue header.
fn waiter(url: &str) -> tokio::task::JoinHandle<(u16, String, String)> {
    let url = url.to_string();
    tokio::spawn(async move {
        let resp =
            reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&ask(false)).send().await;
        let resp = resp.unwrap();
        let header = |name: &str| resp.headers().get(name).map_or("", |v| v.to_str().unwrap()).to_string();
        let (backend, queue) = (header("x-spillway-backend"), header("x-spillway-queue"));
        (resp.status().as_u16(), backend, queue)
    })
}

async fn queue_depth(url: &str) -> f64 {
    series_sum(&metrics_text(url).await, "spillway_queue_depth", &[("backend", "pool")]).unwrap_or(0.0)
}

async fn wait_depth(url: &str, depth: f64, within: Duration) {
    wait_until(within, format!("queue depth {depth}"), || async {
        let now = queue_depth(url).await;
        (now == depth).then_some(()).ok_or(now)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_whose_client_goes_away_leaves_the_queue() {
    let (node, hosted) = upstreams().await;
    let (mut router, url, _log) =
        serve_process(&config(&node.base_url(), &hosted.base_url()), &[("QUEUE_EDGES_KEY", KEY)]).await;
    let holders = [hold_a_slot(&url).await, hold_a_slot(&url).await];
    let gone = waiter(&url);
    wait_depth(&url, 1.0, Duration::from_secs(3)).await;
    // The client goes away: its place in the queue goes with it, long before the slot frees.
    gone.abort();
    wait_depth(&url, 0.0, Duration::from_secs(2)).await;
    assert!(!holders.iter().any(|h| h.is_finished()), "the slots were still held when the queue emptied");
    // A request that stays waits, and takes the slot once it frees.
    let stays = waiter(&url);
    wait_depth(&url, 1.0, Duration::from_secs(3)).await;
    for holder in holders {
        assert!(holder.await.unwrap().contains("[DONE]"));
    }
    let (status, backend, queue) = stays.await.unwrap();
    assert_eq!((status, backend.as_str(), queue.as_str()), (200, "pool", "waited"));
    let _ = router.kill();
    let _ = router.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_queue_each_waiter_spilled_and_answered() {
    let (node, hosted) = upstreams().await;
    let (mut router, url, log) =
        serve_process(&config(&node.base_url(), &hosted.base_url()), &[("QUEUE_EDGES_KEY", KEY)]).await;
    let holders = [hold_a_slot(&url).await, hold_a_slot(&url).await];
    // As many wait as slots will free in time (the requests now on the node).
    let waiters: Vec<_> = (0..2).map(|_| waiter(&url)).collect();
    wait_depth(&url, 2.0, Duration::from_secs(3)).await;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(router.id() as i32, libc::SIGTERM) }, 0);
    // Each waiter goes to the hosted provider once the shutdown delay has passed; the requests
    // on the node end there.
    for w in waiters {
        let (status, backend, queue) = w.await.unwrap();
        assert_eq!((status, backend.as_str(), queue.as_str()), (200, "hosted", "spilled"));
    }
    for holder in holders {
        assert!(holder.await.unwrap().contains("[DONE]"));
    }
    let status = router.wait().unwrap();
    assert!(status.success(), "{status}");
    let text = log.into_text();
    let drained = text.lines().filter(|l| l.contains("queue decision") && l.contains("draining")).count();
    assert_eq!(drained, 2, "{text}");
}
