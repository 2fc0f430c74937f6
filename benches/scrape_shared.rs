//! Shared scraping at fleet scale: 3 replicas and 100 simulated vLLM nodes through the machine's
//! Redis. Reports scrapes per node per interval (counted by the nodes), freshness on each
//! replica (the oldest node reading it holds, sampled every 50 ms) and each replica's CPU.
//!
//! The bench re-executes itself: one child serves the 100 simulators (as `benches/scrape.rs`
//! does; on stdin lines it prints every node's page count), and one child per replica runs the
//! router's scrape loop (`scrape::spawn_thread_with`, sharing under a fresh key prefix) with its
//! own telemetry board, measuring its own CPU (getrusage) over the window. Every node serves a
//! request every SCRAPE_LOAD_MS, so every page is new.
//!
//! `cargo bench --bench scrape_shared` (env: SCRAPE_NODES, SCRAPE_REPLICAS, SCRAPE_SECS,
//! SCRAPE_INTERVAL_MS, SCRAPE_LOAD_MS, SCRAPE_REDIS).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use spillway::control::scrape::{self, ScrapeShare, Scraping};
use spillway::fleet::load::NodeLoad;
use spillway::fleet::rendezvous::ReplicaId;
use spillway::fleet::telemetry::TelemetryBoard;
use spillway::metrics::TelemetryFamilies;
use spillway::sim::{self, SimArgs, SimKind};
use spillway::snapshot::Snapshot;

const ROLE: &str = "SPILLWAY_SCRAPE_SHARED_ROLE";
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
const WARMUP_SECS: u64 = 4;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The simulators: print their ports; then load every node and, for each stdin line, print
/// every node's page count.
fn nodes_child(n: usize, load_ms: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        let mut handles = Vec::new();
        for _ in 0..n {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            handles.push(sim::spawn(SimArgs::for_kind(SimKind::Vllm, MODEL), listener).await.unwrap());
        }
        let ports: Vec<String> = handles.iter().map(|h| h.addr.port().to_string()).collect();
        println!("{}", ports.join(" "));
        let client = reqwest::Client::new();
        for (i, h) in handles.iter().enumerate() {
            let (client, url) = (client.clone(), format!("{}/v1/chat/completions", h.base_url()));
            tokio::spawn(async move {
                let body = serde_json::json!({
                    "model": MODEL, "max_tokens": 2,
                    "messages": [{"role": "user", "content": format!("node {i}")}],
                });
                let mut tick = tokio::time::interval(Duration::from_millis(load_ms.max(1)));
                loop {
                    tick.tick().await;
                    let _ = client.post(&url).json(&body).send().await.map(|r| r.bytes());
                }
            });
        }
        let handles = Arc::new(handles);
        loop {
            let h = Arc::clone(&handles);
            let line = tokio::task::spawn_blocking(|| {
                let mut l = String::new();
                std::io::stdin().read_line(&mut l).map(|n| n > 0)
            });
            if !line.await.unwrap().unwrap_or(false) {
                return;
            }
            let counts: Vec<String> = h.iter().map(|s| s.pages_served().to_string()).collect();
            println!("{}", counts.join(" "));
        }
    });
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass; no other invariants.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv =
        |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One replica: run the scrape loop sharing through Redis; after the warm-up, print one line:
/// its CPU % of one core, its own scrapes, readings from peers, nodes assigned, and the
/// oldest node reading it held (median and max over the window's samples), in ms.
fn replica_child(ports: &str, secs: u64, interval_ms: u64, redis: &str, prefix: &str, id: &str) {
    let endpoints: Vec<String> = ports.split(',').map(|p| format!("http://127.0.0.1:{p}")).collect();
    let yaml = format!(
        "backends:\n  - {{name: fleet, kind: vllm, endpoints: [{}], model: {MODEL}}}\n\
         tasks:\n  - {{name: t, backends: [fleet], slo: {{ttft_ms: 1000}}}}\n\
         telemetry: {{interval_ms: {interval_ms}, jitter: 0.1, timeout_ms: 800, stale_after_ms: {}, backoff_max_ms: 10000}}\n",
        endpoints.join(", "),
        interval_ms * 5,
    );
    let cfg = spillway::config::parse(&yaml).unwrap_or_else(|p| panic!("bench config: {p:#?}"));
    let telemetry = cfg.telemetry.clone();
    let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_config(Arc::new(cfg))));
    let interval = Duration::from_millis(interval_ms);
    // The Redis connection's driver lives on this runtime, as it lives on the router's main one.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let share = rt.block_on(async {
        let s = ScrapeShare::new(redis, prefix, ReplicaId::new(id), 2, interval, interval * 5).unwrap();
        assert!(s.connect(Duration::from_secs(2)).await, "Redis at {redis} does not answer");
        s
    });
    let board = TelemetryBoard::new();
    let metrics = TelemetryFamilies::default();
    let _thread = scrape::spawn_thread_with(Scraping {
        snapshot,
        board: board.clone(),
        load: NodeLoad::new(),
        cfg: telemetry,
        client: reqwest::Client::new(),
        share: Some(share),
        metrics: metrics.clone(),
    })
    .unwrap();
    std::thread::sleep(Duration::from_secs(WARMUP_SECS));
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    let (scrapes0, peers0) = (metrics.scrapes.get(), metrics.peer_readings.get());
    let mut oldest = Vec::new();
    while wall0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(50));
        let now = tokio::time::Instant::now();
        let all = board.all();
        let worst = all.values().map(|n| n.age(now).map_or(f64::INFINITY, |a| a.as_secs_f64() * 1e3));
        oldest.push(worst.fold(0.0, f64::max));
    }
    let (cpu, wall) = ((cpu_time() - cpu0).as_secs_f64(), wall0.elapsed().as_secs_f64());
    oldest.sort_by(f64::total_cmp);
    println!(
        "{:.3} {} {} {} {:.0} {:.0} {}",
        100.0 * cpu / wall,
        metrics.scrapes.get() - scrapes0,
        metrics.peer_readings.get() - peers0,
        metrics.assigned.get(),
        oldest[oldest.len() / 2],
        oldest.last().copied().unwrap_or(0.0),
        board.all().len(),
    );
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(3600));
}

fn spawn_role(role: &str, envs: &[(&str, String)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.env(ROLE, role).stdout(Stdio::piped()).stdin(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().expect("start a bench child")
}

fn main() {
    let nodes: usize = env_or("SCRAPE_NODES", 100);
    let replicas: usize = env_or("SCRAPE_REPLICAS", 3);
    let secs: u64 = env_or("SCRAPE_SECS", 20);
    let interval_ms: u64 = env_or("SCRAPE_INTERVAL_MS", 1000);
    let load_ms: u64 = env_or("SCRAPE_LOAD_MS", 250);
    let redis: String = env_or("SCRAPE_REDIS", "redis://127.0.0.1:6379".to_string());
    match std::env::var(ROLE).as_deref() {
        Ok("nodes") => return nodes_child(nodes, load_ms),
        Ok("replica") => {
            let get = |k: &str| std::env::var(k).unwrap();
            return replica_child(&get("PORTS"), secs, interval_ms, &redis, &get("PREFIX"), &get("ID"));
        }
        _ => {}
    }
    let mut sims = spawn_role("nodes", &[]);
    let mut sim_out = BufReader::new(sims.stdout.take().unwrap());
    let mut line = String::new();
    sim_out.read_line(&mut line).unwrap();
    let ports: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(ports.len(), nodes, "child reported {line:?}");
    let prefix = format!("spillway-bench:scrape:{:08x}", rand::random::<u32>());
    let mut kids: Vec<Child> = (0..replicas)
        .map(|i| {
            spawn_role(
                "replica",
                &[("PORTS", ports.join(",")), ("PREFIX", prefix.clone()), ("ID", format!("replica-{i}"))],
            )
        })
        .collect();
    let counts = |out: &mut BufReader<_>, sims: &mut Child| -> Vec<u64> {
        writeln!(sims.stdin.as_mut().unwrap()).unwrap();
        let mut l = String::new();
        BufRead::read_line(out, &mut l).unwrap();
        l.split_whitespace().map(|c| c.parse().unwrap()).collect()
    };
    std::thread::sleep(Duration::from_secs(WARMUP_SECS));
    let (c0, t0) = (counts(&mut sim_out, &mut sims), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, wall) = (counts(&mut sim_out, &mut sims), t0.elapsed().as_secs_f64());
    let intervals = wall * 1000.0 / interval_ms as f64;
    let mut per_node: Vec<f64> = c0.iter().zip(&c1).map(|(a, b)| (b - a) as f64 / intervals).collect();
    per_node.sort_by(f64::total_cmp);
    println!(
        "scrape_shared: {nodes} nodes every {interval_ms} ms, {replicas} replicas sharing through Redis, {secs} s"
    );
    println!(
        "scrapes per node per interval: mean {:.2}, min {:.2}, max {:.2}",
        per_node.iter().sum::<f64>() / nodes as f64,
        per_node[0],
        per_node[nodes - 1]
    );
    println!("| replica | CPU % of one core | own scrapes/s | peer readings/s | nodes assigned | oldest reading, median ms | oldest reading, max ms | nodes seen |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, kid) in kids.iter_mut().enumerate() {
        let mut l = String::new();
        BufReader::new(kid.stdout.take().unwrap()).read_line(&mut l).unwrap();
        let f: Vec<&str> = l.split_whitespace().collect();
        let rate = |s: &str| s.parse::<f64>().unwrap_or(0.0) / secs as f64;
        println!(
            "| replica-{i} | {} | {:.1} | {:.1} | {} | {} | {} | {} |",
            f[0],
            rate(f[1]),
            rate(f[2]),
            f[3],
            f[4],
            f[5],
            f[6]
        );
    }
    for mut kid in kids.into_iter().chain([sims]) {
        let _ = kid.kill();
        let _ = kid.wait();
    }
}
