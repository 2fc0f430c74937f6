//! A spill at scale (issue 38, part 3): 1,000 streams at once to one hosted simulator over TLS
//! and HTTP/2 advertising 100 streams per connection, through the router in this process.
//! Three cases: the router's lanes (default limits); every stream on one connection, as one
//! HTTP/2 client did before lanes (the hidden queue, for reference); and a provider that also
//! takes only 8 connections, with a second provider to fail over to. Prints a Markdown table:
//! the router's connections to the simulator, the most requests seen waiting for a slot
//! (`spillway_upstream_waiting`), where the streams went and their time to first token.
//!
//! `cargo bench --bench spill_scale` (env: SPILL_STREAMS, default 1000).

use std::time::Duration;

use spillway::demo::loadgen::spill_burst;
use spillway::sim::{self, SimArgs, SimHandle, SimKind};

async fn hosted(max_connections: usize, tokens_per_sec: f64) -> SimHandle {
    let mut args = SimArgs::for_kind(SimKind::OpenAi, "gpt-5.6");
    args.tls = true;
    args.max_concurrent_streams = 100;
    args.max_connections = max_connections;
    args.ttft_ms = 200;
    args.tokens_per_sec = tokens_per_sec;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    sim::spawn(args, listener).await.unwrap()
}

async fn router(yaml: &str) -> String {
    let config = spillway::config::parse(yaml).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let router =
        spillway::app::start(config, Default::default(), listener, std::future::pending()).await.unwrap();
    format!("http://{}", router.addr)
}

fn main() {
    let streams: usize = std::env::var("SPILL_STREAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let spare = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            sim::spawn(SimArgs::for_kind(SimKind::OpenAi, "gpt-5.6"), listener).await.unwrap()
        };
        let cases = [
            ("lanes (100 streams per connection, up to 64)", "{}", 0, 20.0, 4),
            ("one connection (no lanes, for reference)", "{hosted_streams_per_connection: 10000, hosted_max_connections: 1}", 0, 20.0, 4),
            ("provider takes 8 connections, streams last 4 s", "{hosted_max_connections: 8, stream_idle_timeout_ms: 30000, retry_budget_min_per_sec: 100}", 8, 5.0, 20),
        ];
        println!("\n{streams} streams at once, hosted simulator over TLS + HTTP/2 advertising 100 streams per connection, first token after 200 ms, SLO 1.5 s (first-token deadline 3 s)\n");
        println!("| case | ok | errors | on hosted | failed over | connections (peak) | most waiting | TTFT p50 ms | TTFT p99 ms | TTFT max ms | took s |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for (name, dispatch, max_connections, tokens_per_sec, max_tokens) in cases {
            let upstream = hosted(max_connections, tokens_per_sec).await;
            let ca = std::env::temp_dir().join(format!("spillway-spill-scale-{}.pem", std::process::id()));
            std::fs::write(&ca, upstream.ca_pem().unwrap()).unwrap();
            let yaml = format!(
                "ledger: {{enabled: false}}\nlimits: {{max_concurrency: 100000}}\ntls: {{ca_file: \"{}\"}}\n\
                 dispatch: {dispatch}\nbackends:\n  - {{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}\n\
                 \x20 - {{name: spare, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}\n\
                 tasks:\n  - {{name: chat, backends: [hosted, spare], strategy: priority, slo: {{ttft_ms: 1500}}}}\n",
                ca.display(),
                upstream.base_url(),
                spare.base_url()
            );
            let url = router(&yaml).await;
            let (report, waiting) = spill_burst(&url, "chat", "hosted", streams, max_tokens, Duration::from_secs(120)).await;
            let (_, peak, _) = upstream.connections();
            let on = |b: &str| report.by_backend.get(b).copied().unwrap_or(0);
            let ms = |q: f64| report.ttft_us.value_at_quantile(q) as f64 / 1000.0;
            println!(
                "| {name} | {} | {} | {} | {} | {peak} | {waiting} | {:.0} | {:.0} | {:.0} | {:.1} |",
                report.ok,
                report.errors,
                on("hosted"),
                on("spare"),
                ms(0.5),
                ms(0.99),
                report.ttft_us.max() as f64 / 1000.0,
                report.elapsed.as_secs_f64()
            );
            std::fs::remove_file(ca).ok();
        }
    });
}
