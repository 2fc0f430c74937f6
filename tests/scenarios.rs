//! Fleet scenarios against the real router and simulated nodes: the fleet serves what fits,
//! spills the rest before the SLO breaks, survives a node's death, and takes a hosted
//! provider's traffic home into its reserve. Short runs; `benches/scenarios.rs` runs them long.

use crate::common;

use std::time::Duration;

use common::scenario::*;

/// Scenarios measure latency: run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_load_at_60_percent_stays_local() {
    let _one = ONE_AT_A_TIME.lock().await;
    let fleet = start_fleet(2).await;
    let rps = fleet_capacity_rps(2) * 0.6;
    let logs = drive(&fleet.url, &[(rps, 4.0)], None).await;
    let r = report(&logs, secs(0.0), secs(4.0));
    assert_eq!(r.errors, 0, "{r:?}");
    assert!(r.local_share >= 0.95, "{r:?}");
    assert!(r.slo_attainment >= 0.95, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ramp_to_150_percent_spills_and_keeps_ttft_inside_the_slo() {
    let _one = ONE_AT_A_TIME.lock().await;
    let fleet = start_fleet(2).await;
    let cap = fleet_capacity_rps(2);
    let logs = drive(&fleet.url, &[(cap * 0.6, 2.0), (cap * 1.5, 4.0)], None).await;
    let peak = report(&logs, secs(2.5), secs(6.0));
    assert_eq!(peak.errors, 0, "{peak:?}");
    assert!(peak.ttft_p95_ms <= SLO_MS as f64, "{peak:?}");
    assert!(peak.local_share < 0.8 && peak.local_share > 0.3, "spilled, but the fleet stayed busy: {peak:?}");
    assert!(peak.hosted_tokens > 0);
    // Every spill was counted with its reason: here the reserve (or the queue it protects).
    let text = common::metrics_text(&fleet.url).await;
    let counted = common::series_sum(&text, "spillway_spills_total", &[]).unwrap_or(0.0);
    let reserve = common::series_sum(&text, "spillway_spills_total", &[("reason", "reserve")]).unwrap_or(0.0);
    assert!(counted > 0.0 && reserve > 0.0, "{text}");
    let hosted = [("backend", "hosted"), ("outcome", "completed")];
    assert_eq!(common::series_sum(&text, "spillway_requests_total", &hosted), Some(counted), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_load_costs_no_errors_for_requests_not_yet_started() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut fleet = start_fleet(2).await;
    let victim = fleet.nodes[1].take().unwrap();
    let kill: Box<dyn FnOnce() + Send> = Box::new(move || victim.shutdown());
    let rps = fleet_capacity_rps(2) * 0.6;
    let logs = drive(&fleet.url, &[(rps, 5.0)], Some((secs(2.0), kill))).await;
    // Requests started after the kill (plus a moment for the kill to land) all succeed.
    let after = report(&logs, secs(2.1), secs(5.0));
    assert_eq!(after.errors, 0, "{after:?}");
    let before = report(&logs, secs(0.0), secs(1.9));
    assert_eq!(before.errors, logs.iter().filter(|l| l.started < secs(1.9) && l.result.is_err()).count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_outage_brings_its_traffic_home_into_the_reserve() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut fleet = start_fleet(2).await;
    let hosted = fleet.hosted.take().unwrap();
    let outage: Box<dyn FnOnce() + Send> = Box::new(move || hosted.shutdown());
    // Above what the pool takes with its 20 % reserve kept: some spills while hosted is up.
    let rps = fleet_capacity_rps(2) * 0.9;
    let logs = drive(&fleet.url, &[(rps, 6.0)], Some((secs(2.5), outage))).await;
    let before = report(&logs, secs(0.5), secs(2.5));
    let after = report(&logs, secs(3.5), secs(6.0));
    assert!(before.local_share < 0.97, "some traffic was hosted before: {before:?}");
    assert!(after.local_share > 0.99, "it came home: {after:?}");
    assert_eq!(after.errors, 0, "{after:?}");
}
