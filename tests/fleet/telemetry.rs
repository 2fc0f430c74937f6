//! The telemetry loop against real HTTP: recorded vLLM pages through the parser, and the scrape
//! loop against simulated vLLM nodes (both metric generations), NVML agents that are up, down
//! or absent, a node that dies, a node that hangs, and a node that leaves the fleet.

use std::collections::BTreeSet;
use std::future::ready;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use spillway::canonical::NodeKey;
use spillway::control::scrape;
use spillway::fleet::engines::vllm::{parse_vllm, vllm_from_samples};
use spillway::fleet::exposition::parse_exposition;
use spillway::fleet::load::NodeLoad;
use spillway::fleet::telemetry::{NodeTelemetry, TelemetryBoard};
use spillway::sim::{self, SimArgs, SimKind};
use spillway::snapshot::Snapshot;
use tokio::time::Instant;

use crate::common::wait_until;

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const V0: &str = include_str!("../fixtures/vllm/v0-engine.prom");
const V1: &str = include_str!("../fixtures/vllm/v1-engine-excerpt.prom");

// ---------------------------------------------------------------------------------------
// Recorded pages

/// Independent of any Prometheus parser: every `vllm:` sample line, and the distinct names.
fn raw_vllm_series(text: &str) -> (usize, BTreeSet<String>) {
    let mut lines = 0;
    let mut names = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("vllm:") {
            lines += 1;
            let end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    (lines, names)
}

/// The same, counted from what the parser read.
fn parsed_vllm_series(text: &str) -> (usize, BTreeSet<String>) {
    let mut lines = 0;
    let mut names = BTreeSet::new();
    for s in parse_exposition(text).unwrap().into_iter().filter(|s| s.metric.starts_with("vllm:")) {
        match &s.value {
            spillway::fleet::exposition::Value::Histogram(b) => {
                lines += b.len();
                names.insert(format!("{}_bucket", s.metric));
            }
            _ => {
                lines += 1;
                names.insert(s.metric.clone());
            }
        }
    }
    (lines, names)
}

#[test]
fn every_vllm_series_in_the_recorded_pages_is_read() {
    for (file, text) in [("v0-engine.prom", V0), ("v1-engine-excerpt.prom", V1)] {
        assert!(text.starts_with("# SOURCE:"), "{file} keeps its provenance line");
        let raw = raw_vllm_series(text);
        assert!(raw.0 > 10, "{file}: scan found {} lines", raw.0);
        assert_eq!(parsed_vllm_series(text), raw, "{file}: every vllm: series is read");
        // parse_vllm parses only the families it reads; that must not change what it reads.
        let unfiltered = vllm_from_samples(&parse_exposition(text).unwrap()).unwrap();
        assert_eq!(parse_vllm(text).unwrap(), unfiltered, "{file}");
        // The trap this guards against: the crate alone reads none of them.
        let naive = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        assert!(naive.samples.iter().all(|s| !s.metric.contains("vllm")), "{file}: crate behaviour changed");
    }
}

#[test]
fn reads_the_v0_page() {
    let s = parse_vllm(V0).unwrap();
    assert!(s.legacy_names);
    assert_eq!(s.model_names, vec!["Qwen/Qwen2.5-Coder-1.5B-Instruct".to_string()]);
    assert_eq!(s.engines, 0);
    assert_eq!(s.running, Some(0.0));
    assert_eq!(s.waiting, Some(0.0));
    assert_eq!(s.kv_cache_usage, Some(0.0));
    let cache = s.cache.unwrap();
    assert_eq!(cache.num_gpu_blocks, Some(81767));
    assert_eq!(cache.block_size, Some(16));
    assert_eq!(cache.cache_dtype.as_deref(), Some("auto"));
    assert_eq!(s.prompt_tokens, Some(148.0));
    assert_eq!(s.generation_tokens, Some(955.0));
    assert_eq!(s.request_success, Some(4.0));
    assert_eq!(s.preemptions, Some(0.0));
    // Not on this page: unknown, not zero.
    assert_eq!(s.ttft, None);
    assert_eq!(s.itl, None);
    assert_eq!(s.prefix_cache_queries, None);
    assert_eq!(s.prefix_cache_hits, None);
}

#[test]
fn reads_the_v1_page() {
    let s = parse_vllm(V1).unwrap();
    assert!(!s.legacy_names);
    assert_eq!(s.model_names, vec![LLAMA.to_string()]);
    assert_eq!(s.running, Some(8.0));
    assert_eq!(s.generation_tokens, Some(27453.0));
    assert_eq!(s.request_success, Some(132.0), "summed over finished_reason");
    let ttft = s.ttft.unwrap();
    assert_eq!(ttft.buckets.len(), 8);
    assert_eq!(ttft.buckets[3], (0.02, 13.0));
    assert_eq!(ttft.buckets[7], (0.1, 140.0));
    assert_eq!(ttft.count, Some(140.0));
    assert_eq!(ttft.sum, None, "the excerpt has no _sum");
    assert_eq!(s.waiting, None);
    assert_eq!(s.kv_cache_usage, None);
    assert_eq!(s.cache, None);
}

// ---------------------------------------------------------------------------------------
// Live nodes

/// A simulator on its own thread and runtime, so that stopping it closes every connection
/// (as a node that dies would), not just the listener.
struct ThreadSim {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ThreadSim {
    fn start(tune: impl FnOnce(&mut SimArgs) + Send + 'static) -> ThreadSim {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let mut args = SimArgs::for_kind(SimKind::Vllm, LLAMA);
                tune(&mut args);
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let handle = sim::spawn(args, listener).await.unwrap();
                addr_tx.send(handle.addr).unwrap();
                let _ = stop_rx.await;
                drop(handle);
            });
            drop(rt);
        });
        ThreadSim { addr: addr_rx.recv().unwrap(), stop: Some(stop), thread: Some(thread) }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn kill(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for ThreadSim {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fixed `/metrics` page on a free port (an NVML agent).
async fn static_page(body: &'static str) -> (u16, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().route("/metrics", axum::routing::get(move || async move { body }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (port, tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }))
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `pools`: (name, node URLs, agent port).
fn snapshot(pools: &[(&str, Vec<String>, Option<u16>)], telemetry: &str) -> Arc<Snapshot> {
    let mut yaml = String::from("backends:\n");
    for (name, urls, agent) in pools {
        let agent = agent.map(|p| format!(", agent_port: {p}")).unwrap_or_default();
        yaml += &format!(
            "  - {{name: {name}, kind: vllm, endpoints: [{}], model: {LLAMA}{agent}}}\n",
            urls.join(", ")
        );
    }
    let names: Vec<&str> = pools.iter().map(|p| p.0).collect();
    yaml += &format!("tasks:\n  - {{name: t, backends: [{}], slo: {{ttft_ms: 1000}}}}\n", names.join(", "));
    yaml += &format!("telemetry: {telemetry}\n");
    let cfg = spillway::config::parse(&yaml).unwrap_or_else(|p| panic!("bad test config: {p:#?}\n{yaml}"));
    Arc::new(Snapshot::from_config(Arc::new(cfg)))
}

fn key(pool: &str, url: &str) -> NodeKey {
    NodeKey::new(pool, LLAMA, &format!("{url}/v1"))
}

fn scraped(board: &TelemetryBoard, key: &str) -> bool {
    board.get(key).is_some_and(|n| n.sample.is_some())
}

const AGENT_UP: &str = "# TYPE spillway_nvml_up gauge\nspillway_nvml_up 1\n\
spillway_gpu_utilization_ratio{gpu=\"0\",uuid=\"GPU-0\"} 0.37\n\
spillway_gpu_utilization_ratio{gpu=\"1\",uuid=\"GPU-1\"} 0.5\n\
spillway_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-0\"} 1073741824\n\
spillway_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-0\"} 85899345920\n";
const AGENT_DOWN: &str = "spillway_nvml_up 0\nspillway_nvml_info{reason=\"NVML: driver not loaded\"} 1\n";
const FAST: &str =
    "{interval_ms: 100, jitter: 0.1, timeout_ms: 300, stale_after_ms: 400, backoff_max_ms: 800}";

async fn chat_stream(client: reqwest::Client, url: String) {
    let body = serde_json::json!({
        "model": LLAMA, "stream": true, "max_tokens": 8,
        "messages": [{"role": "user", "content": "count to eight"}],
    });
    let resp = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.text().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_the_board_follows_load_and_reads_agents() {
    let a = ThreadSim::start(|a| {
        a.max_num_seqs = 2;
        a.token_delay_ms = 30;
        // Slow engine steps too, so the queue lasts long enough for a scrape to see it even
        // on a loaded machine.
        a.itl_base_ms = 40.0;
    });
    let b = ThreadSim::start(|a| a.legacy_metrics = true);
    let c = ThreadSim::start(|_| {});
    let (up_port, _up) = static_page(AGENT_UP).await;
    let (down_port, _down) = static_page(AGENT_DOWN).await;
    let snap = snapshot(
        &[
            ("pa", vec![a.url()], Some(up_port)),
            ("pb", vec![b.url()], Some(down_port)),
            ("pc", vec![c.url()], Some(closed_port())),
        ],
        FAST,
    );
    let cfg = snap.config.telemetry.clone();
    let (board, load) = (TelemetryBoard::new(), NodeLoad::new());
    let (ka, kb, kc) = (key("pa", &a.url()), key("pb", &b.url()), key("pc", &c.url()));
    let client = reqwest::Client::new();
    let loop_task = tokio::spawn(scrape::run(
        Arc::new(ArcSwap::new(snap)),
        board.clone(),
        load.clone(),
        cfg,
        client.clone(),
    ));

    wait_until(Duration::from_secs(3), "all three nodes are scraped", || {
        ready([&ka, &kb, &kc].iter().all(|k| scraped(&board, k)))
    })
    .await;
    let na = board.get(&ka).unwrap();
    let sa = na.sample.clone().unwrap();
    assert!(!sa.legacy_names);
    assert_eq!(sa.model_names, vec![LLAMA.to_string()]);
    assert_eq!(sa.engines, 1);
    assert_eq!(sa.running, Some(0.0));
    assert_eq!(sa.kv_cache_usage, Some(0.0));
    assert_eq!(sa.cache.as_ref().unwrap().num_gpu_blocks, Some(4096));
    assert!(sa.itl.is_some() && sa.ttft.is_some() && sa.queue_time.is_some() && sa.e2e.is_some());
    let agent = na.agent.clone().expect("agent sample");
    assert!(agent.up);
    assert_eq!(agent.gpus.len(), 2);
    assert_eq!(agent.gpus[0].utilization, Some(0.37));
    assert_eq!(agent.gpus[1].memory_used_bytes, None);

    let nb = board.get(&kb).unwrap();
    let sb = nb.sample.clone().unwrap();
    assert!(sb.legacy_names, "legacy sim uses gpu_cache_usage_perc / time_per_output_token_seconds");
    assert_eq!(sb.kv_cache_usage, Some(0.0));
    assert!(sb.itl.is_some());
    let down = nb.agent.clone().expect("agent answered");
    assert!(!down.up);
    assert_eq!(down.reason.as_deref(), Some("NVML: driver not loaded"));

    let nc = board.get(&kc).unwrap();
    assert!(nc.sample.is_some(), "an absent agent leaves vLLM telemetry intact");
    assert_eq!(nc.consecutive_failures, 0);
    assert!(nc.agent.is_none());
    assert!(nc.agent_error.is_some());

    // Every vllm: series of the simulator's live page is read too (both generations).
    for url in [a.url(), b.url()] {
        let page = client.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
        assert_eq!(parsed_vllm_series(&page), raw_vllm_series(&page), "{url}");
        assert_eq!(parse_vllm(&page).unwrap(), vllm_from_samples(&parse_exposition(&page).unwrap()).unwrap());
    }

    // The router's own sends are credited until a scrape has seen them.
    let held: Vec<_> = (0..3).map(|_| load.start(&ka, spillway::config::Priority::Standard)).collect();
    assert_eq!(load.view(&ka).unseen, 3);
    wait_until(Duration::from_secs(2), "a scrape clears unseen", || ready(load.view(&ka).unseen == 0)).await;
    drop(held);

    // Load beyond max_num_seqs: running fills, the queue grows, then TTFT becomes known.
    assert_eq!(na.recent.ttft_s, None, "an idle node has no recent TTFT");
    let requests: Vec<_> = (0..8).map(|_| tokio::spawn(chat_stream(client.clone(), a.url()))).collect();
    wait_until(Duration::from_secs(5), "the node reports running 2 and some waiting", || {
        ready(
            board
                .get(&ka)
                .and_then(|n| n.sample.clone())
                .is_some_and(|s| s.running == Some(2.0) && s.waiting >= Some(1.0)),
        )
    })
    .await;
    for r in requests {
        r.await.unwrap();
    }
    wait_until(Duration::from_secs(2), "recent TTFT and throughput are known", || {
        ready(
            board.get(&ka).is_some_and(|n| n.recent.ttft_s.is_some() && n.recent.completions_per_s.is_some()),
        )
    })
    .await;
    let r = board.get(&ka).unwrap().recent;
    assert!(r.ttft_s.unwrap() > 0.0);
    assert!(r.itl_s.unwrap() >= 0.008, "at least the sim's 8 ms decode step: {r:?}");
    // Recent means cover different requests (TTFT of those whose first token came in the window,
    // end-to-end of those that finished in it), so only each one's own bound holds.
    assert!(r.e2e_s.unwrap() >= r.itl_s.unwrap(), "{r:?}");
    assert!(r.prompt_tokens_per_request.unwrap() > 0.0);
    assert!(r.completions_per_s.unwrap() > 0.0);
    loop_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_hanging_nodes_back_off_without_delaying_others() {
    let live = ThreadSim::start(|_| {});
    let mut dying = ThreadSim::start(|_| {});
    // Accepts connections (the kernel's backlog) and never answers.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hang_url = format!("http://{}", hang.local_addr().unwrap());
    let telemetry =
        "{interval_ms: 100, jitter: 0.1, timeout_ms: 1000, stale_after_ms: 400, backoff_max_ms: 800}";
    let snap = snapshot(
        &[("pl", vec![live.url()], None), ("pd", vec![dying.url(), hang_url.clone()], None)],
        telemetry,
    );
    let cfg = snap.config.telemetry.clone();
    let current = Arc::new(ArcSwap::new(snap));
    let (board, load) = (TelemetryBoard::new(), NodeLoad::new());
    let (kl, kd, kh) = (key("pl", &live.url()), key("pd", &dying.url()), key("pd", &hang_url));
    // This one runs the loop on its own thread, as the router does.
    let loop_thread =
        scrape::spawn_thread(current.clone(), board.clone(), load, cfg, reqwest::Client::new()).unwrap();

    wait_until(Duration::from_secs(3), "both sims are scraped", || {
        ready(scraped(&board, &kl) && scraped(&board, &kd))
    })
    .await;
    dying.kill();
    let killed = Instant::now();

    // Watch for 2.2 s: when each failure of the dead node lands, and the live node's age.
    let mut failures_at: Vec<Instant> = Vec::new();
    let mut worst_live_age = Duration::ZERO;
    while killed.elapsed() < Duration::from_millis(2200) {
        let now = Instant::now();
        let d = board.get(&kd).unwrap();
        while failures_at.len() < d.consecutive_failures as usize {
            failures_at.push(now);
        }
        worst_live_age = worst_live_age.max(board.get(&kl).unwrap().age(now).unwrap());
        // A real sleep: the cadence of a 2.2 s watch of real scrape timing (the backoff is the
        // thing measured).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let now = Instant::now();
    let d: NodeTelemetry = board.get(&kd).unwrap();
    // Without backoff that would be ~22 attempts; doubling from 100 ms gives ~100, 200, 400, 800 ms gaps.
    assert!((2..=7).contains(&d.consecutive_failures), "failures {} (backoff?)", d.consecutive_failures);
    assert!(d.is_stale(now, Duration::from_millis(400)));
    assert!(d.sample.is_some(), "the last good sample stays, ageing");
    assert!(d.last_error.is_some());
    let gaps: Vec<Duration> = failures_at.windows(2).map(|w| w[1] - w[0]).collect();
    for (i, gap) in gaps.iter().enumerate() {
        // Failure i+2 follows failure i+1 after 100 ms × 2^i (capped), less 10 % jitter and polling slack.
        let nominal = Duration::from_millis((100u64 << i).min(800));
        assert!(
            *gap + Duration::from_millis(15) >= nominal.mul_f64(0.9),
            "gap {i}: {gap:?} < {nominal:?}: {gaps:?}"
        );
    }
    assert!(gaps.len() >= 2, "gaps {gaps:?}");

    // The hanging node times out (1 s each) without holding the others up.
    let h = board.get(&kh).unwrap();
    assert!(h.sample.is_none() && h.consecutive_failures >= 1 && h.is_stale(now, Duration::from_millis(400)));
    // Blocked behind the hanging node's 1 s timeouts it would age past a second; a loaded
    // machine may delay a scrape or two.
    assert!(worst_live_age < Duration::from_millis(950), "live node aged {worst_live_age:?}");
    assert!(!board.get(&kl).unwrap().is_stale(now, Duration::from_millis(400)));

    // Discovery drops the dead pool: its nodes are forgotten.
    current.store(snapshot(&[("pl", vec![live.url()], None)], telemetry));
    wait_until(Duration::from_secs(2), "departed nodes are forgotten", || {
        let all = board.all();
        ready(all.len() == 1 && all.contains_key(&kl))
    })
    .await;
    drop(loop_thread);
    let after = board.get(&kl).unwrap().scrapes;
    // A real sleep: three scrape intervals pass, and no scrape may land in them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(board.get(&kl).unwrap().scrapes, after, "dropping the handle stops the loop");
    drop(hang);
}
