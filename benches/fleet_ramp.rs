//! The simulator against the real fleet (issue 34): one offered load, a ramp through the
//! fleet's capacity and back, on two real llama.cpp `llama-server`s (2 slots each, SmolLM2-135M)
//! behind the router, and in `spillway simulate` on a scenario of that fleet. The scenario's
//! node model is calibrated from the same engines at rest before the ramp (llama.cpp's own
//! timings of requests alone and two at once: prefill rate, step with one and two sequences,
//! prompt and output lengths), never from the ramp. Prints local share, spills and TTFT
//! p50/p95 side by side.
//!
//! `cargo bench --bench fleet_ramp` (after `tests/engines/get-llama-server.sh`; env
//! `RAMP_SECS`, default 60: half up, half down).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use serde_json::{json, Value};
use spillway::sim::{SimArgs, SimKind};

use common::llama::{engine_or_skip, llama_server};
use common::scenario::{drive, OUTPUT_TOKENS};

/// A node's timings at rest, from llama.cpp's own `timings`.
#[derive(Debug)]
struct Calibration {
    prefill_tps: f64,
    /// One engine step with one and with two sequences running, ms.
    step1_ms: f64,
    step2_ms: f64,
    /// Prompt tokens prefilled (those not already in the engine's cache).
    prompt_tokens: f64,
    output_tokens: f64,
}

/// The prompt the load generator sends (`demo::loadgen::one_request`).
fn prompt(n: u64) -> String {
    format!("Ticket {n}: the printer on floor 3 jams on every job. Summarise.")
}

async fn timed(client: &reqwest::Client, node: &str, n: u64) -> Value {
    let body = json!({"max_tokens": OUTPUT_TOKENS, "messages": [{"role": "user", "content": prompt(n)}]});
    let resp = client.post(format!("{node}/v1/chat/completions")).json(&body).send().await.unwrap();
    resp.json().await.unwrap()
}

/// Requests alone on node `a`, then two at once on each node (the fleet full: the engines
/// share the machine's cores then, as at the ramp's peak).
async fn calibrate(a: &str, b: &str) -> Calibration {
    let client = reqwest::Client::new();
    let (mut alone, mut pairs) = (Vec::new(), Vec::new());
    for n in 0..6 {
        alone.push(timed(&client, a, 10_000 + n).await);
    }
    for n in 0..4 {
        let m = 20_000 + 4 * n;
        let four = [(a, m), (a, m + 1), (b, m + 2), (b, m + 3)].map(|(node, n)| timed(&client, node, n));
        pairs.extend(futures::future::join_all(four).await);
    }
    let mean = |v: &[Value], f: &dyn Fn(&Value) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
    let t = |key: &'static str| move |r: &Value| r["timings"][key].as_f64().unwrap_or(0.0);
    Calibration {
        prefill_tps: mean(&alone[1..], &t("prompt_per_second")),
        step1_ms: mean(&alone[1..], &t("predicted_per_token_ms")),
        step2_ms: mean(&pairs, &t("predicted_per_token_ms")),
        // What the engine prefilled: llama.cpp keeps the chat template's shared head cached.
        prompt_tokens: mean(&alone[1..], &t("prompt_n")),
        output_tokens: mean(&alone, &|r| r["usage"]["completion_tokens"].as_f64().unwrap_or(0.0)),
    }
}

fn main() {
    let secs: f64 = std::env::var("RAMP_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(60.0);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let engine = engine_or_skip().expect("no llama-server: run tests/engines/get-llama-server.sh");
        let (a, b) = (llama_server(&engine, 2, 0).await, llama_server(&engine, 2, 0).await);
        let cal = calibrate(&a.url, &b.url).await;
        // A request holds its slot for its prefill and its steps, two sequences a node.
        let service_s = (cal.prompt_tokens / cal.prefill_tps + cal.output_tokens * cal.step2_ms / 1000.0).max(0.01);
        let capacity = 4.0 / service_s;
        let (low, high) = (0.3 * capacity, 1.6 * capacity);
        println!("\ncalibration (node at rest): {cal:?}\nservice {service_s:.3} s, capacity {capacity:.2} req/s; ramp {low:.2} → {high:.2} → {low:.2} req/s over {secs} s\n");

        let mut hosted = SimArgs::for_kind(SimKind::OpenAi, "gpt-5.6");
        hosted.ttft_ms = 80;
        hosted.tokens_per_sec = 400.0;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hosted = spillway::sim::spawn(hosted, listener).await.unwrap();
        println!("| sticky spill | run | requests | errors | local share | spills (queue, sticky) | TTFT p50 ms | TTFT p95 ms |");
        println!("|---|---|---|---|---|---|---|---|");
        for sticky in [true, false] {
            let (real, sim) = ramp(&cal, (&a.url, &b.url), &hosted.base_url(), (low, high, secs), sticky).await;
            println!("| {} | real fleet | {real} |", if sticky { "on" } else { "off" });
            println!("| | simulator | {sim} |");
        }
    });
}

/// Each node's busy-slot share until `stop`: llama.cpp's `requests_processing` over its 2
/// slots, read every 100 ms and integrated over time.
async fn busy_slots(nodes: [String; 2], mut stop: tokio::sync::oneshot::Receiver<()>) -> [f64; 2] {
    let client = reqwest::Client::new();
    let (mut busy, mut total) = ([0.0f64; 2], 0.0f64);
    let mut last = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let dt = last.elapsed().as_secs_f64();
        last = std::time::Instant::now();
        total += dt;
        for (i, node) in nodes.iter().enumerate() {
            let page = match client.get(format!("{node}/metrics")).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => continue,
            };
            let processing = page
                .lines()
                .find_map(|l| {
                    l.strip_prefix("llamacpp:requests_processing ").and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(0.0);
            busy[i] += processing * dt;
        }
    }
    busy.map(|b| b / (2.0 * total.max(1e-9)))
}

/// The router's config over `nodes` and the hosted backend (`hosted`: its settings).
fn router_yaml(nodes: &str, hosted: &str, sticky: bool) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, kind: local, endpoints: [{nodes}], model: smollm2, max_running: 2, reserve: 0}}\n\
         \x20 - {{name: hosted, kind: openai, model: gpt-5.6, {hosted}}}\n\
         tasks:\n\
         \x20 - {{name: chat, backends: [local, hosted], slo: {{ttft_ms: 2000}}, priority: interactive}}\n\
         telemetry: {{interval_ms: 1000, stale_after_ms: 5000}}\n\
         balancing: {{sticky_spill: {{enabled: {sticky}}}}}\n"
    )
}

/// The ramp from `low` to `high` requests a second and back over `secs`, on the real fleet and
/// in the simulator: each one's table cells.
async fn ramp(
    cal: &Calibration,
    (a, b): (&str, &str),
    hosted: &str,
    (low, high, secs): (f64, f64, f64),
    sticky: bool,
) -> (String, String) {
    let ledger = common::temp_ledger_url();
    let yaml = router_yaml(&format!("{a}, {b}"), &format!("base_url: '{hosted}/v1'"), sticky)
        + &format!("ledger: {{url: \"{ledger}\"}}\n");
    let config = spillway::config::parse(&yaml).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let secrets = spillway::config::secrets::read_secrets(&config, |_| None).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stopped.await;
    };
    let router = spillway::app::start(config, secrets, listener, stopped).await.unwrap();
    let (engines_stop, engines_stopped) = tokio::sync::oneshot::channel::<()>();
    let engines = tokio::spawn(busy_slots([a.to_string(), b.to_string()], engines_stopped));
    let url = format!("http://{}", router.addr);
    common::wait_until(Duration::from_secs(20), "/readyz to answer 200", || async {
        reqwest::get(format!("{url}/readyz")).await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    // In one-second steps, up then down.
    let half = (secs / 2.0).round() as usize;
    let rate = |i: usize| low + (high - low) * (i as f64 + 0.5) / half as f64;
    let phases: Vec<(f64, f64)> =
        (0..half).map(rate).chain((0..half).rev().map(rate)).map(|r| (r, 1.0)).collect();
    let logs = drive(&url, &phases, None).await;
    // Stopped gracefully: the open GPU minute is written.
    let _ = stop.send(());
    router.task.await.unwrap().unwrap();
    let _ = engines_stop.send(());
    let engine_share = engines.await.unwrap();
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let minutes = store.query_minutes(0, i64::MAX).await.unwrap();
    store.close().await;
    let ledger_share = [a, b].map(|node| {
        let host = node.trim_start_matches("http://");
        let (run, cap) = minutes
            .iter()
            .filter(|m| m.node.contains(host))
            .filter_map(|m| m.occupancy)
            .fold((0, 0), |(r, c), o| (r + o.running_seq_ms, c + o.capacity_seq_ms));
        run as f64 / cap.max(1) as f64
    });
    println!(
        "utilisation, sticky spill {}: ledger {:.1} % and {:.1} %, the engines' busy slots {:.1} % and {:.1} %",
        if sticky { "on" } else { "off" },
        ledger_share[0] * 100.0,
        ledger_share[1] * 100.0,
        engine_share[0] * 100.0,
        engine_share[1] * 100.0
    );
    let served: Vec<_> = logs.iter().filter_map(|l| l.result.as_ref().ok()).collect();
    let spilled =
        |why: &str| served.iter().filter(|s| s.backend != "local" && s.spill.as_deref() == Some(why)).count();
    let mut ttfts: Vec<f64> = served.iter().map(|s| s.ttft.as_secs_f64() * 1000.0).collect();
    ttfts.sort_by(f64::total_cmp);
    let q =
        |p: f64| ttfts.get(((ttfts.len() as f64 * p) as usize).min(ttfts.len().saturating_sub(1))).copied();
    let local = served.iter().filter(|s| s.backend == "local").count();
    let real = format!(
        "{} | {} | {:.1} % | {} ({}, {}) | {:.0} | {:.0}",
        logs.len(),
        logs.len() - served.len(),
        100.0 * local as f64 / served.len().max(1) as f64,
        served.len() - local,
        spilled("queue"),
        spilled("sticky"),
        q(0.5).unwrap_or(0.0),
        q(0.95).unwrap_or(0.0)
    );

    let nodes = format!(
        "{{max_num_seqs: 2, prefill_tps: {:.1}, step_ms: {:.2}, step_per_seq_ms: {:.2}, kv_tokens: 8192, gauge_lag: 0s}}",
        cal.prefill_tps,
        (2.0 * cal.step1_ms - cal.step2_ms).max(0.01),
        cal.step2_ms - cal.step1_ms
    );
    let (p, o) = (cal.prompt_tokens.round(), cal.output_tokens.round());
    let router = router_yaml("http://10.0.0.1:8000, http://10.0.0.2:8000", "", sticky);
    let scenario = format!(
        "description: the real two-node llama.cpp fleet's ramp\nduration: {secs}s\nseed: 7\nstrategies: [spillway]\n\
         router:\n{}nodes:\n  local: {nodes}\n\
         providers:\n  hosted: {{ttft_ms: 80, ttft_jitter: 0.1, tokens_per_sec: 400, error_rate: 0}}\n\
         workload:\n  - task: chat\n    rps: [[0s, {low:.3}], [{}s, {high:.3}], [{secs}s, {low:.3}]]\n\
         \x20   prompt_tokens: {{mean: {p}, sd: 0, min: {p}, max: {p}}}\n\
         \x20   output_tokens: {{mean: {o}, sd: 0, min: {o}, max: {o}}}\n    projects: 1000\n    prefix_share: 0\n",
        router.lines().map(|l| format!("  {l}\n")).collect::<String>(),
        secs / 2.0,
    );
    let scenario = spillway::simulate::parse("real-fleet-ramp", &scenario)
        .unwrap_or_else(|p| panic!("{p:?}\n{scenario}"));
    let sim = spillway::simulate::simulate(&scenario, &|_, _| {}).runs[0].summary();
    let spills: u64 = sim.served_by.iter().filter(|(b, _)| b.as_str() != "local").map(|(_, n)| *n).sum();
    let sim = format!(
        "{} | {} | {:.1} % | {spills} | {:.0} | {:.0}",
        sim.requests,
        sim.errors,
        sim.local_share * 100.0,
        sim.ttft_p50_ms,
        sim.ttft_p95_ms
    );
    (real, sim)
}
