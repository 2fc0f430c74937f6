//! Load benchmark: what Spillway adds on top of calling a backend directly.
//!
//! Starts one simulated OpenAI-compatible upstream with a fixed time to first token and token
//! rate, and a router in front of it, in this process on loopback. Then, for each path (direct
//! and through Spillway), it runs an open-loop phase at a fixed rate (TTFT p50/p99) and a
//! closed-loop phase at fixed concurrency (throughput). Prints a Markdown table.
//!
//! `cargo bench --bench load` (env: LOAD_RPS, LOAD_SECS, LOAD_CONCURRENCY).

use std::time::{Duration, Instant};

use spillway::demo::loadgen::{self, one_request, LoadSpec};
use spillway::sim::{self, SimArgs, SimKind};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Requests per second completed by `concurrency` clients looping for `secs`.
async fn throughput(url: &str, model: &str, concurrency: usize, secs: u64) -> f64 {
    let client = reqwest::Client::builder().pool_max_idle_per_host(concurrency * 2).build().unwrap();
    let end = Instant::now() + Duration::from_secs(secs);
    let workers = (0..concurrency).map(|w| {
        let (client, url, model) = (client.clone(), url.to_string(), model.to_string());
        tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < end {
                if one_request(&client, &url, &model, 4, w as u64).await.is_ok() {
                    done += 1;
                }
            }
            done
        })
    });
    let total: u64 = futures::future::join_all(workers).await.into_iter().map(|r| r.unwrap()).sum();
    total as f64 / secs as f64
}

fn main() {
    let rps: f64 = env_or("LOAD_RPS", 200.0);
    let secs: u64 = env_or("LOAD_SECS", 10);
    let concurrency: usize = env_or("LOAD_CONCURRENCY", 32);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let mut args = SimArgs::for_kind(SimKind::OpenAi, "gpt-5.6");
        args.ttft_ms = 20;
        args.tokens_per_sec = 200.0;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = sim::spawn(args, listener).await.unwrap();
        let yaml = format!(
            "backends:\n  - {{name: hosted, kind: openai_compatible, base_url: \"{}/v1\", model: gpt-5.6}}\n\
             tasks:\n  - {{name: bench, backends: [hosted], slo: {{ttft_ms: 2000}}}}\n\
             limits: {{max_concurrency: 100000}}\n",
            upstream.base_url()
        );
        let config = spillway::config::parse(&yaml).unwrap();
        // LOAD_LEDGER=sqlite:///tmp/bench.db (or postgres://…) measures with the cost ledger on.
        let secrets =
            spillway::config::secrets::Secrets { ledger_url: std::env::var("LOAD_LEDGER").ok(), ..Default::default() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let router = spillway::app::start(config, secrets, listener, std::future::pending()).await.unwrap();

        let direct = format!("{}/v1/chat/completions", upstream.base_url());
        let routed = format!("http://{}/v1/chat/completions", router.addr);
        let mut rows = Vec::new();
        for (name, url, model) in [("direct", &direct, "gpt-5.6"), ("spillway", &routed, "bench")] {
            // Warm up connections, then measure.
            let _ = loadgen::run(LoadSpec { url: url.clone(), model: model.into(), rps: 50.0, duration: Some(Duration::from_secs(1)), max_tokens: 16, report_every: None }).await;
            let report = loadgen::run(LoadSpec {
                url: url.clone(),
                model: model.into(),
                rps,
                duration: Some(Duration::from_secs(secs)),
                max_tokens: 16,
                report_every: None,
            })
            .await;
            let tput = throughput(url, model, concurrency, secs.min(5)).await;
            rows.push((name, report, tput));
        }
        println!("\n| path | requests | errors | TTFT p50 ms | TTFT p99 ms | total p50 ms | throughput req/s (c={concurrency}) |");
        println!("|---|---|---|---|---|---|---|");
        for (name, r, tput) in &rows {
            println!(
                "| {name} | {} | {} | {:.2} | {:.2} | {:.2} | {:.0} |",
                r.ok,
                r.errors,
                r.ttft_us.value_at_quantile(0.5) as f64 / 1000.0,
                r.ttft_us.value_at_quantile(0.99) as f64 / 1000.0,
                r.total_us.value_at_quantile(0.5) as f64 / 1000.0,
                tput
            );
        }
        let (d, s) = (&rows[0].1, &rows[1].1);
        println!(
            "\nadded by Spillway at {rps} req/s: TTFT p50 {:+.2} ms, p99 {:+.2} ms; throughput {:.0} vs {:.0} req/s direct",
            (s.ttft_us.value_at_quantile(0.5) as f64 - d.ttft_us.value_at_quantile(0.5) as f64) / 1000.0,
            (s.ttft_us.value_at_quantile(0.99) as f64 - d.ttft_us.value_at_quantile(0.99) as f64) / 1000.0,
            rows[1].2,
            rows[0].2
        );
    });
}
