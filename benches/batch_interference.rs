//! Does a large batch job slow interactive traffic? Two simulated vLLM nodes (their engine
//! model: slots, prefill, decode steps that slow with the batch size), a hosted OpenAI
//! simulator to spill to, and the router, in this process on loopback. Each round runs the same
//! open-loop interactive load twice: alone, and with a batch job of `BATCH_LINES` long lines
//! running on the fleet's free slots. Prints, per round and as medians, interactive TTFT p50 and
//! p95, SLO attainment (TTFT within the task's target) and who served it, and the batch lines
//! the fleet finished meanwhile.
//!
//! `cargo bench --bench batch_interference` (env: LOAD_RPS, LOAD_SECS, ROUNDS, BATCH_LINES).

use std::time::Duration;

use serde_json::{json, Value};
use spillway::demo::loadgen::{self, LoadReport, LoadSpec};
use spillway::sim::{self, SimArgs, SimKind};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const SLO_MS: u64 = 1000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn start_sim(kind: SimKind, model: &str) -> sim::SimHandle {
    let mut args = SimArgs::for_kind(kind, model);
    args.max_num_seqs = 16;
    args.output_tokens = 32;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    sim::spawn(args, listener).await.unwrap()
}

/// Upload `n` batch lines for task `nightly` and start the job; its id.
async fn start_batch(router: &str, n: usize) -> String {
    let lines: Vec<String> = (0..n)
        .map(|i| {
            json!({"custom_id": format!("n{i}"), "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": "nightly", "max_tokens": 64, "messages": [{"role": "user", "content": format!("summarise ticket {i}")}]}})
            .to_string()
        })
        .collect();
    let (content_type, body) =
        spillway::batch::provider_api::file_form("batch", "nightly.jsonl", &lines.join("\n"));
    let client = reqwest::Client::new();
    let file: Value = client
        .post(format!("{router}/v1/files"))
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
        client.post(format!("{router}/v1/batches")).json(&create).send().await.unwrap().json().await.unwrap();
    job["id"].as_str().unwrap().to_string()
}

async fn completed(router: &str, id: &str) -> i64 {
    let job: Value = reqwest::get(format!("{router}/v1/batches/{id}")).await.unwrap().json().await.unwrap();
    job["request_counts"]["completed"].as_i64().unwrap_or(0)
}

/// (TTFT p50 ms, p95 ms, SLO attainment, share served by the fleet) of a phase.
fn figures(r: &LoadReport) -> (f64, f64, f64, f64) {
    let ms = |q| r.ttft_us.value_at_quantile(q) as f64 / 1000.0;
    let n = r.ttft_us.len().max(1) as f64;
    let within = r.ttft_us.count_between(0, SLO_MS * 1000) as f64 / n;
    let fleet = r.by_backend.get("fleet").copied().unwrap_or(0) as f64 / (r.ok.max(1) as f64);
    (ms(0.5), ms(0.95), within, fleet)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let rps: f64 = env_or("LOAD_RPS", 20.0);
    let secs: u64 = env_or("LOAD_SECS", 15);
    let rounds: usize = env_or("ROUNDS", 3);
    let batch_lines: usize = env_or("BATCH_LINES", 5000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let (a, b) = (start_sim(SimKind::Vllm, LLAMA).await, start_sim(SimKind::Vllm, LLAMA).await);
        let hosted = start_sim(SimKind::OpenAi, "gpt-5.6").await;
        let ledger = std::env::temp_dir().join(format!("spillway-bench-batch-{:016x}.db", rand::random::<u64>()));
        let yaml = format!(
            r#"
backends:
  - {{name: fleet, kind: vllm, endpoints: ["{}", "{}"], model: {LLAMA}, max_running: 16}}
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - {{name: chat, backends: [fleet, hosted], priority: interactive, slo: {{ttft_ms: {SLO_MS}}}}}
  - {{name: nightly, backends: [fleet], slo: {{ttft_ms: 60000}}}}
telemetry: {{interval_ms: 200}}
limits: {{max_concurrency: 100000}}
"#,
            a.base_url(),
            b.base_url(),
            hosted.base_url()
        );
        let config = spillway::config::parse(&yaml).unwrap();
        let secrets = spillway::config::secrets::Secrets {
            ledger_url: Some(format!("sqlite://{}", ledger.display())),
            ..Default::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let router = spillway::app::start(config, secrets, listener, std::future::pending()).await.unwrap();
        let base = format!("http://{}", router.addr);
        tokio::time::sleep(Duration::from_secs(1)).await; // the nodes' first scrapes
        let spec = |secs| LoadSpec {
            url: format!("{base}/v1/chat/completions"),
            model: "chat".into(),
            rps,
            duration: Some(Duration::from_secs(secs)),
            max_tokens: 32,
            report_every: None,
        };
        let _ = loadgen::run(spec(2)).await; // warm up
        println!("\n| round | batch | requests | TTFT p50 ms | TTFT p95 ms | SLO attainment | served by the fleet | batch lines done |");
        println!("|---|---|---|---|---|---|---|---|");
        let (mut alone, mut beside) = (Vec::new(), Vec::new());
        for round in 1..=rounds {
            let quiet = loadgen::run(spec(secs)).await;
            let job = start_batch(&base, batch_lines).await;
            tokio::time::sleep(Duration::from_secs(2)).await; // the batch fills the free slots
            let before = completed(&base, &job).await;
            let busy = loadgen::run(spec(secs)).await;
            let done = completed(&base, &job).await - before;
            let _ = reqwest::Client::new().post(format!("{base}/v1/batches/{job}/cancel")).send().await;
            for (label, r, lines) in [("off", &quiet, 0), ("on", &busy, done)] {
                let (p50, p95, within, fleet) = figures(r);
                println!(
                    "| {round} | {label} | {} | {p50:.0} | {p95:.0} | {:.1} % | {:.1} % | {lines} |",
                    r.ok,
                    within * 100.0,
                    fleet * 100.0
                );
            }
            alone.push(figures(&quiet));
            beside.push(figures(&busy));
            // Let the cancelled job's running lines finish before the next round.
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let med = |v: &[(f64, f64, f64, f64)], f: fn(&(f64, f64, f64, f64)) -> f64| median(v.iter().map(f).collect());
        let (p95_off, p95_on) = (med(&alone, |x| x.1), med(&beside, |x| x.1));
        let (slo_off, slo_on) = (med(&alone, |x| x.2), med(&beside, |x| x.2));
        println!(
            "\nmedians over {rounds} rounds at {rps} req/s: TTFT p95 {p95_off:.0} ms alone, {p95_on:.0} ms beside the batch ({:+.1} %); \
             SLO attainment {:.1} % alone, {:.1} % beside it ({:+.1} points)",
            (p95_on / p95_off - 1.0) * 100.0,
            slo_off * 100.0,
            slo_on * 100.0,
            (slo_on - slo_off) * 100.0
        );
        let _ = std::fs::remove_file(&ledger);
    });
}
