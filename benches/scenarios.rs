//! Fleet scenarios, long: the real router in front of two simulated vLLM nodes and a
//! simulated hosted provider, under steady load, a ramp past capacity, a node's death and a
//! hosted outage. Prints SLO attainment, local share, hosted token spend and the TTFT
//! predictor's median absolute percentage error per scenario.
//!
//! `cargo bench --bench scenarios` (env: SCENARIO_SECS, default 20).

/// The test harness (`scenario` waits on it for a fresh fleet).
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::scenario::*;

fn row(name: &str, r: &Report) {
    println!(
        "| {name} | {} | {} | {:.1} % | {:.0} | {:.1} % | {} | {} |",
        r.requests,
        r.errors,
        r.slo_attainment * 100.0,
        r.ttft_p95_ms,
        r.local_share * 100.0,
        r.hosted_tokens,
        r.predictor_mape.map_or("n/a".to_string(), |m| format!("{:.0} %", m * 100.0)),
    );
}

fn main() {
    let secs: f64 = std::env::var("SCENARIO_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(20.0);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let cap = fleet_capacity_rps(2);
        let s = |x: f64| Duration::from_secs_f64(x);
        println!(
            "\nfleet: 2 simulated nodes × {MAX_NUM_SEQS} slots, {OUTPUT_TOKENS} output tokens, capacity ≈ {cap:.1} req/s; \
             reserve 20 %; TTFT SLO {SLO_MS} ms; {secs} s per scenario\n"
        );
        println!("| scenario | requests | errors | SLO attainment | TTFT p95 ms | local share | hosted tokens | predictor MdAPE |");
        println!("|---|---|---|---|---|---|---|---|");

        let fleet = start_fleet(2).await;
        let logs = drive(&fleet.url, &[(cap * 0.6, secs)], None).await;
        row("steady 60 %", &report(&logs, s(0.0), s(secs)));
        drop(fleet);

        let fleet = start_fleet(2).await;
        let logs = drive(&fleet.url, &[(cap * 0.6, secs / 4.0), (cap * 1.5, secs)], None).await;
        row("ramp to 150 % (at 150 %)", &report(&logs, s(secs / 4.0 + 0.5), s(secs * 1.25)));
        drop(fleet);

        let mut fleet = start_fleet(2).await;
        let victim = fleet.nodes[1].take().unwrap();
        let kill: Box<dyn FnOnce() + Send> = Box::new(move || victim.shutdown());
        let logs = drive(&fleet.url, &[(cap * 0.6, secs)], Some((s(secs / 3.0), kill))).await;
        row("node killed (whole run)", &report(&logs, s(0.0), s(secs)));
        row("node killed (started after)", &report(&logs, s(secs / 3.0 + 0.1), s(secs)));
        drop(fleet);

        let mut fleet = start_fleet(2).await;
        let hosted = fleet.hosted.take().unwrap();
        let outage: Box<dyn FnOnce() + Send> = Box::new(move || hosted.shutdown());
        let logs = drive(&fleet.url, &[(cap * 0.9, secs)], Some((s(secs / 2.0), outage))).await;
        row("hosted outage (before)", &report(&logs, s(0.5), s(secs / 2.0)));
        row("hosted outage (after)", &report(&logs, s(secs / 2.0 + 1.0), s(secs)));
    });
}
