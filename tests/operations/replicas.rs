//! Three replicas, one truth: three `spillway serve` processes share the machine's Redis and
//! PostgreSQL behind a retrying loopback balancer ([`common::balancer`]), in front of 50
//! simulated vLLM nodes and two simulated hosted providers. In turn it shows that a hosted
//! quota holds across all replicas, that every replica sends a project to the same node, that a
//! hold made through one replica is honoured by all, that the merged ledger's report matches
//! to the cent what the clients were charged, and that a replica killed mid-load costs no
//! request that had not yet received its first token.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use rust_decimal::Decimal;

use crate::common;

use common::balancer::Balancer;
use common::scenario::LLAMA;
use common::*;
use spillway::sim::{SimHandle, SimKind};

const NODES: usize = 50;
const QUOTA_RPM: usize = 30;
const PROJECTS: usize = 10;
const ADMIN_TOKEN: &str = "replicas-admin-token";

struct Replica {
    child: std::process::Child,
    url: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

async fn start_nodes() -> Vec<SimHandle> {
    let mut nodes = Vec::new();
    for i in 0..NODES {
        nodes.push(
            sim(SimKind::Vllm, LLAMA, |a| {
                a.seed = i as u64;
                a.max_num_seqs = 16;
                a.output_tokens = 12;
            })
            .await,
        );
    }
    nodes
}

fn write_config(path: &Path, nodes: &[SimHandle], limited: &str, hosted: [&SimHandle; 2], ledger: &str) {
    let endpoints: Vec<String> = nodes.iter().map(|n| n.base_url()).collect();
    let yaml = format!(
        r#"listen: 127.0.0.1:0
admin_token_env: REPLICAS_ADMIN_TOKEN
backends:
  - {{name: fleet, kind: vllm, endpoints: [{}], model: {LLAMA}, max_running: 16, reserve: 0.2}}
  - {{name: {limited}, kind: openai, base_url: "{}/v1", model: gpt-5.6, quota: {{rpm: {QUOTA_RPM}}},
      price: {{input_per_mtok: 5, output_per_mtok: 20}}}}
  - {{name: overflow, kind: openai, base_url: "{}/v1", model: gpt-5.6,
      price: {{input_per_mtok: 3, output_per_mtok: 12}}}}
tasks:
  - {{name: quota, backends: [{limited}, overflow], slo: {{ttft_ms: 3000}}, priority: interactive}}
  - {{name: fleet, backends: [fleet, overflow], slo: {{ttft_ms: 2000}}}}
telemetry: {{interval_ms: 500, stale_after_ms: 3000, backoff_max_ms: 1000}}
state: {{redis_url: "redis://127.0.0.1:6379"}}
ledger: {{url: "{ledger}"}}
limits: {{shutdown_delay_ms: 0}}
"#,
        endpoints.join(", "),
        hosted[0].base_url(),
        hosted[1].base_url(),
    );
    std::fs::write(path, yaml).unwrap();
}

/// A request for `task` as project `project`; streamed ones ask for the usage chunk.
fn ask(task: &str, project: &str, stream: bool) -> (serde_json::Value, String) {
    let mut body = body(task, stream);
    if stream {
        body["stream_options"] = serde_json::json!({"include_usage": true});
    }
    (body, project.to_string())
}

/// What one answer told its client.
#[derive(Debug)]
struct Answer {
    backend: String,
    /// `x-spillway-cost-usd`, or a stream's `usage.spillway_cost_usd`.
    cost: Option<Decimal>,
}

/// How a request failed: before anything reached the client, or after its first token.
struct Failure {
    after_first_token: bool,
    why: String,
}

impl Failure {
    fn before(why: String) -> Failure {
        Failure { after_first_token: false, why }
    }

    fn after(why: String) -> Failure {
        Failure { after_first_token: true, why }
    }
}

async fn send(
    http: &reqwest::Client,
    base: &str,
    (body, project): &(serde_json::Value, String),
) -> Result<Answer, Failure> {
    let resp = http
        .post(format!("{base}/v1/chat/completions"))
        .header("x-spillway-project", project)
        .json(body)
        .send()
        .await
        .map_err(|e| Failure::before(format!("send: {e}")))?;
    let status = resp.status();
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let backend = header("x-spillway-backend").unwrap_or_default();
    if status != 200 {
        let text = resp.text().await.unwrap_or_default();
        return Err(Failure::before(format!("status {status}: {text}")));
    }
    if body["stream"] != true {
        let cost = header("x-spillway-cost-usd").map(|c| Decimal::from_str(&c).unwrap());
        let json: serde_json::Value = resp.json().await.map_err(|e| Failure::before(format!("body: {e}")))?;
        return match json["choices"][0]["message"]["content"].as_str() {
            Some(_) => Ok(Answer { backend, cost }),
            None => Err(Failure::before(format!("no answer: {json}"))),
        };
    }
    let (mut text, mut cost, mut done) = (String::new(), None, false);
    let mut bytes = resp.bytes_stream();
    let mut pending = String::new();
    while let Some(chunk) = bytes.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) if text.is_empty() => return Err(Failure::before(format!("stream: {e}"))),
            Err(e) => return Err(Failure::after(format!("stream cut after {text:?}: {e}"))),
        };
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else { continue };
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(data).unwrap();
            text.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            if let Some(c) = v["usage"]["spillway_cost_usd"].as_str() {
                cost = Some(Decimal::from_str(c).unwrap());
            }
        }
    }
    match (done, text.is_empty()) {
        (true, false) => Ok(Answer { backend, cost }),
        (false, false) => Err(Failure::after(format!("no [DONE] after {text:?}"))),
        (_, true) => Err(Failure::before("a stream with no text".into())),
    }
}

/// The client-side books: every answer's cost, and how many answers each backend gave.
#[derive(Default)]
struct Books {
    charged: Mutex<Decimal>,
    answered: AtomicUsize,
    by_backend: Mutex<BTreeMap<String, usize>>,
}

impl Books {
    fn record(&self, a: &Answer) {
        *self.charged.lock().unwrap() += a.cost.unwrap_or_default();
        self.answered.fetch_add(1, Ordering::Relaxed);
        *self.by_backend.lock().unwrap().entry(a.backend.clone()).or_default() += 1;
    }
}

/// The `held` field `GET /admin/backends` on `base` shows for `node`.
async fn held_on(base: &str, node: &str) -> serde_json::Value {
    let listing = admin_json(base, "/admin/backends", ADMIN_TOKEN).await;
    let nodes =
        listing["backends"].as_array().into_iter().flatten().flat_map(|b| b["nodes"].as_array().unwrap());
    nodes.into_iter().find(|n| n["node"] == node).map(|n| n["held"].clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_share_quotas_affinity_holds_and_one_ledger_and_survive_a_kill() {
    let Some(ledger) = pg_store_url("replicas").await else { return };
    let nodes = start_nodes().await;
    let limited_sim = sim(SimKind::OpenAi, "gpt-5.6", |a| a.ttft_ms = 20).await;
    let overflow_sim = sim(SimKind::OpenAi, "gpt-5.6", |a| a.ttft_ms = 20).await;
    // The quota's Redis counter is keyed by backend name: one of its own per run.
    let limited = format!("limited-{:08x}", rand::random::<u32>());
    let dir = std::env::temp_dir().join(format!("spillway-replicas-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("spillway.yaml");
    write_config(&config, &nodes, &limited, [&limited_sim, &overflow_sim], &ledger);
    let env = [("REPLICAS_ADMIN_TOKEN", ADMIN_TOKEN)];
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let (child, url, _stderr) = serve_process(&config, &env).await;
        replicas.push(Replica { child, url });
    }
    let balancer = Balancer::start(replicas.iter().map(|r| r.url.clone()).collect()).await;
    wait_until(Duration::from_secs(5), "the balancer to see three ready replicas", || async {
        balancer.all_ready()
    })
    .await;
    let started_ms = unix_ms();
    let http = reqwest::Client::new();
    let books = Books::default();

    eprintln!("1. a hosted quota of {QUOTA_RPM} rpm holds across three replicas");
    // The quota's window is the wall-clock minute: start early enough in one to finish inside it.
    wait_until(Duration::from_secs(60), "a minute with time left to run the quota phase", || async {
        (unix_ms() % 60_000 < 40_000).then_some(())
    })
    .await;
    let asks: Vec<_> = (0..3 * QUOTA_RPM).map(|i| ask("quota", &format!("quota-{i}"), i % 2 == 0)).collect();
    let answers: Vec<_> = futures::stream::iter(&asks)
        .map(|a| send(&http, &balancer.url, a))
        .buffer_unordered(6)
        .collect()
        .await;
    for a in &answers {
        books.record(a.as_ref().unwrap_or_else(|e| panic!("a quota request failed: {}", e.why)));
    }
    let on_limited = books.by_backend.lock().unwrap().get(&limited).copied().unwrap_or(0);
    assert_eq!(on_limited, QUOTA_RPM, "requests accepted by the limited backend: {:?}", books.by_backend);

    eprintln!("2. every replica sends a project to the same node");
    for p in 0..PROJECTS {
        for r in &replicas {
            let answer = send(&http, &r.url, &ask("fleet", &format!("project-{p}"), false)).await;
            books.record(&answer.unwrap_or_else(|e| panic!("project {p} on {}: {}", r.url, e.why)));
        }
    }
    for r in &replicas {
        wait_ledger_written(&r.url).await;
    }
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let rows = store.query(started_ms, i64::MAX).await.unwrap();
    let mut node_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.task == "fleet") {
        node_of.entry(row.affinity_hash.clone().unwrap()).or_default().insert(row.node.clone());
    }
    assert_eq!(node_of.len(), PROJECTS, "one affinity hash per project: {node_of:?}");
    for (hash, nodes) in &node_of {
        assert_eq!(nodes.len(), 1, "project {hash} went to {nodes:?}");
    }
    let distinct: BTreeSet<_> = node_of.values().flatten().collect();
    assert!(distinct.len() > 1, "projects spread over nodes: {distinct:?}");

    eprintln!("3. a hold made through one replica is honoured by all");
    let (first_hash, nodes_of_first) = node_of.iter().next().unwrap();
    let (first_hash, held_node) = (first_hash.clone(), nodes_of_first.iter().next().unwrap().clone());
    admin_post(
        &replicas[0].url,
        "/admin/hold",
        ADMIN_TOKEN,
        "test",
        serde_json::json!({"backend": "fleet", "node": held_node, "kind": "drain"}),
    )
    .await;
    let held_at = std::time::Instant::now();
    for r in &replicas[1..] {
        wait_until(Duration::from_secs(1), format!("{} to show the hold", r.url), || async {
            let held = held_on(&r.url, &held_node).await;
            held.is_string().then_some(()).ok_or(held)
        })
        .await;
    }
    eprintln!("   every replica shows the hold {:?} after it was made", held_at.elapsed());
    let hold_ms = unix_ms();
    for p in 0..PROJECTS {
        for r in &replicas {
            let answer = send(&http, &r.url, &ask("fleet", &format!("project-{p}"), false)).await;
            books.record(&answer.unwrap_or_else(|e| panic!("project {p} after the hold: {}", e.why)));
        }
    }
    for r in &replicas {
        wait_ledger_written(&r.url).await;
    }
    let after = store.query(hold_ms, i64::MAX).await.unwrap();
    let on_held: Vec<_> = after.iter().filter(|r| r.node == held_node).collect();
    assert!(on_held.is_empty(), "{} request(s) went to the drained node {held_node}", on_held.len());
    let moved: BTreeSet<_> =
        after.iter().filter(|r| r.affinity_hash.as_deref() == Some(&first_hash)).map(|r| &r.node).collect();
    assert_eq!(moved.len(), 1, "the held node's project moved to one node on every replica: {moved:?}");
    admin_post(
        &replicas[2].url,
        "/admin/release",
        ADMIN_TOKEN,
        "test",
        serde_json::json!({"backend": "fleet", "node": held_node}),
    )
    .await;

    eprintln!("4. the merged ledger's report matches what the clients were charged");
    let report = admin_json(&replicas[1].url, "/admin/reports/cost?format=json&from=-1h", ADMIN_TOKEN).await;
    let hosted = Decimal::from_str(report["totals"]["hosted_usd"].as_str().unwrap()).unwrap();
    let charged = *books.charged.lock().unwrap();
    assert!(charged > Decimal::ZERO, "the hosted answers cost something");
    assert_eq!(hosted.round_dp(2), charged.round_dp(2), "report {hosted} vs charged {charged}");
    assert_eq!(hosted, charged, "exactly, not just to the cent");
    assert_eq!(report["totals"]["requests"], books.answered.load(Ordering::Relaxed), "{}", report["totals"]);

    eprintln!("5. a replica killed mid-load costs no request that had not yet had its first token");
    let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let (stop, done, failures, url) =
                (Arc::clone(&stop), Arc::clone(&done), Arc::clone(&failures), balancer.url.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    match send(&http, &url, &ask("fleet", &format!("load-{c}-{}", i % 7), c % 2 == 0)).await {
                        Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            failures.lock().unwrap().push(e);
                            0
                        }
                    };
                }
            })
        })
        .collect();
    let wait_done = |more: usize, what: &'static str| {
        let done = Arc::clone(&done);
        async move {
            let from = done.load(Ordering::Relaxed);
            wait_until(Duration::from_secs(30), what, || async {
                (done.load(Ordering::Relaxed) >= from + more).then_some(())
            })
            .await
        }
    };
    wait_done(60, "60 requests before the kill").await;
    replicas[2].child.kill().unwrap();
    replicas[2].child.wait().unwrap();
    wait_until(Duration::from_secs(2), "the balancer to see the replica gone", || async { balancer.out(2) })
        .await;
    wait_done(60, "60 requests after the kill").await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let failures = std::mem::take(&mut *failures.lock().unwrap());
    let (before, cut): (Vec<_>, Vec<_>) = failures.into_iter().partition(|f| !f.after_first_token);
    let whys = |fs: Vec<Failure>| fs.into_iter().map(|f| f.why).collect::<Vec<_>>();
    let (before, cut) = (whys(before), whys(cut));
    eprintln!(
        "   {} answered, {} sent again by the balancer, {} cut after their first token: {cut:?}",
        done.load(Ordering::Relaxed),
        balancer.retried(),
        cut.len(),
    );
    assert!(before.is_empty(), "requests failed before their first token: {before:#?}");
    store.close().await;
    std::fs::remove_dir_all(&dir).ok();
}
