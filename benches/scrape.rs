//! CPU cost of the telemetry loop: 100 simulated vLLM nodes scraped every second.
//!
//! The nodes must not run in the measured process. This bench re-executes itself as ONE child
//! process that runs 100 `spillway::sim` vLLM simulators (the same code as
//! `spillway sim --kind vllm`, real vLLM metric names and buckets) on 100 loopback ports.
//! One child rather than 100 `spillway sim` processes: on the 2-core CI machine, 100 processes
//! (each with its own runtime and threads) would crowd the cores the measurement runs on,
//! and it does not depend on a separately built release binary being current. Idle simulators
//! cost nothing (their engine loops wait on a channel). The parent runs `control::scrape::run`
//! over a snapshot listing the 100 nodes, warms up, then reports its own CPU time
//! (getrusage RUSAGE_SELF, user + sys, all threads) over the window as % of one core.
//!
//! It measures twice: an idle fleet (pages do not change, so the loop's skip-unchanged path is
//! what runs), then a busy one (the child sends each node a request every SCRAPE_LOAD_MS, so
//! every scrape parses a new page): the busy figure is the one to quote.
//!
//! The loop runs as the router runs it, on its own thread (`scrape::spawn_thread`);
//! SCRAPE_RUNTIME=multi runs it as a task on a 2-worker runtime instead.
//!
//! `cargo bench --bench scrape` (env: SCRAPE_NODES, SCRAPE_SECS, SCRAPE_IDLE_SECS,
//! SCRAPE_INTERVAL_MS, SCRAPE_LOAD_MS, SCRAPE_RUNTIME).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use spillway::control::scrape;
use spillway::fleet::load::NodeLoad;
use spillway::fleet::telemetry::TelemetryBoard;
use spillway::sim::{self, SimArgs, SimKind};
use spillway::snapshot::Snapshot;

const CHILD_ENV: &str = "SPILLWAY_SCRAPE_BENCH_CHILD";
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Child: serve `n` simulators, print their ports on one line; when a line arrives on stdin,
/// send each simulator a short request every `load_ms` (so every page changes between
/// scrapes); run until killed.
fn child(n: usize, load_ms: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        let mut handles = Vec::new();
        for _ in 0..n {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            handles.push(sim::spawn(SimArgs::for_kind(SimKind::Vllm, MODEL), listener).await.unwrap());
        }
        let ports: Vec<String> = handles.iter().map(|h| h.addr.port().to_string()).collect();
        println!("{}", ports.join(" "));
        let mut go = String::new();
        tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut go)).await.unwrap().unwrap();
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
        std::future::pending::<()>().await;
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

fn main() {
    let nodes: usize = env_or("SCRAPE_NODES", 100);
    let load_ms: u64 = env_or("SCRAPE_LOAD_MS", 250);
    if std::env::var_os(CHILD_ENV).is_some() {
        return child(nodes, load_ms);
    }
    let secs: u64 = env_or("SCRAPE_SECS", 30);
    let idle_secs: u64 = env_or("SCRAPE_IDLE_SECS", 10);
    let interval_ms: u64 = env_or("SCRAPE_INTERVAL_MS", 1000);

    let mut kid = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, "1")
        .env("SCRAPE_NODES", nodes.to_string())
        .stdout(Stdio::piped())
        .stdin(Stdio::piped())
        .spawn()
        .expect("start the simulator child");
    let mut line = String::new();
    BufReader::new(kid.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let ports: Vec<u16> = line.split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert_eq!(ports.len(), nodes, "child reported {line:?}");

    let endpoints: Vec<String> = ports.iter().map(|p| format!("http://127.0.0.1:{p}")).collect();
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

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let board = TelemetryBoard::new();
    let page_bytes = rt.block_on(async {
        let body = reqwest::get(format!("{}/metrics", endpoints[0])).await.unwrap().text().await.unwrap();
        body.len()
    });
    // SCRAPE_RUNTIME=multi: the loop as a task on a 2-worker runtime; default: its own thread.
    let (task, thread) = if std::env::var("SCRAPE_RUNTIME").as_deref() == Ok("multi") {
        let t = rt.spawn(scrape::run(
            snapshot,
            board.clone(),
            NodeLoad::new(),
            telemetry,
            reqwest::Client::new(),
        ));
        (Some(t), None)
    } else {
        let t =
            scrape::spawn_thread(snapshot, board.clone(), NodeLoad::new(), telemetry, reqwest::Client::new());
        (None, Some(t.unwrap()))
    };
    // (good scrapes, failing nodes, requests completed) over the whole board.
    let count = |b: &TelemetryBoard| -> (u64, u64, f64) {
        let all = b.all();
        (
            all.values().map(|n| n.scrapes).sum(),
            all.values().filter(|n| n.consecutive_failures > 0).count() as u64,
            all.values().filter_map(|n| n.sample.as_ref()?.request_success).sum(),
        )
    };
    let measure = |label: &str, secs: u64| {
        let (scrapes0, _, done0) = count(&board);
        let (cpu0, wall0) = (cpu_time(), Instant::now());
        std::thread::sleep(Duration::from_secs(secs));
        let (cpu1, wall1) = (cpu_time(), Instant::now());
        let (scrapes1, failing, done1) = count(&board);
        let wall = (wall1 - wall0).as_secs_f64();
        let cpu = (cpu1 - cpu0).as_secs_f64();
        let n = scrapes1 - scrapes0;
        println!(
            "scrape ({label}): {nodes} nodes every {interval_ms} ms, {page_bytes} B/page, {:.1} node requests/s: \
             {n} scrapes in {wall:.1} s ({:.1}/s, {failing} failing), CPU {cpu:.3} s = {:.2} % of one core \
             ({:.0} µs/scrape)",
            (done1 - done0) / wall / nodes as f64,
            n as f64 / wall,
            100.0 * cpu / wall,
            1e6 * cpu / n.max(1) as f64,
        );
    };

    // Warm up: every node scraped at least once, connections open.
    std::thread::sleep(Duration::from_millis(interval_ms * 3));
    if idle_secs > 0 {
        measure("idle fleet, pages unchanged", idle_secs);
    }
    // Busy: every node serves a request every SCRAPE_LOAD_MS, so every page differs from the last.
    writeln!(kid.stdin.as_mut().unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(interval_ms * 2));
    measure("busy fleet, every page new", secs);
    if let Some(t) = task {
        t.abort();
    }
    drop(thread);
    drop(rt);
    let _ = kid.kill();
    let _ = kid.wait();
}
