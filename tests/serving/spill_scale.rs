//! A spill at scale (issue 38, part 3): hundreds of streams at once to one hosted provider over
//! TLS and HTTP/2, which advertises a number of streams per connection. The router spreads them
//! over connections so that none waits for a stream slot; against a provider that also takes
//! only 8 connections, the rest wait in the open (`spillway_upstream_waiting`) and, past their
//! first-token deadline, fail over as attempts. None hangs. `benches/spill_scale.rs` runs both
//! at 1,000 streams and 100 a connection in release; here the first runs 500 streams at 50 a
//! connection and the second 300 at 25, so that a debug build on two shared cores, beside the
//! other tests, still starts each within its deadline.

use std::time::Duration;

use spillway::demo::loadgen::spill_burst;
use spillway::sim::SimKind;

use crate::common::{router, sim};
use crate::tls::ca_file;

const STREAMS: usize = 500;

/// A router trusting the simulators' CA, with room for every stream and no ledger, then `rest`.
fn config(ca: &std::path::Path, rest: &str) -> String {
    format!(
        "listen: 127.0.0.1:0\nledger: {{enabled: false}}\nlimits: {{max_concurrency: 5000}}\ntls: {{ca_file: \"{}\"}}\n{rest}",
        ca.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundreds_of_streams_spill_over_tls_and_http2_with_no_hidden_queue() {
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |a| {
        a.tls = true;
        a.max_concurrent_streams = 50;
        a.ttft_ms = 200;
    })
    .await;
    let ca = ca_file(hosted.ca_pem().unwrap());
    let yaml = config(
        &ca,
        &format!(
            r#"dispatch: {{hosted_streams_per_connection: 50}}
backends:
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - {{name: chat, backends: [hosted], slo: {{ttft_ms: 10000}}}}
"#,
            hosted.base_url()
        ),
    );
    let r = router(&yaml, &[]).await;
    let (report, waiting) = spill_burst(&r.url, "chat", "hosted", STREAMS, 4, Duration::from_secs(60)).await;
    let (_, peak, accepted) = hosted.connections();
    let ttft_max = report.ttft_us.max() as f64 / 1000.0;
    eprintln!(
        "{STREAMS} streams: {} ok, {} errors, TTFT p50 {:.0} ms max {ttft_max:.0} ms; {peak} connections at \
         once ({accepted} in all); at most {waiting} waiting",
        report.ok,
        report.errors,
        report.ttft_us.value_at_quantile(0.5) as f64 / 1000.0,
    );
    assert_eq!(
        report.ok as usize,
        STREAMS,
        "every stream answered: {} {:?}",
        report.summary(),
        report.first_error
    );
    // A debug build on two shared cores; benches/spill_scale.rs measures the release build.
    assert!(ttft_max < 10_000.0, "every stream started within the SLO: {}", report.summary());
    assert_eq!(waiting, 0, "none waited for a stream slot");
    assert!(
        (10..=20).contains(&peak),
        "about one connection per 50 streams, not one per stream nor one for all: {peak}"
    );
    std::fs::remove_file(ca).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_a_providers_connection_limit_streams_wait_in_the_open_and_fail_over_at_the_deadline() {
    // 8 connections of 25 streams: 200 in flight, each holding its slot for about 4 s, and 100
    // more waiting. Every request may fail over (the retry budget holds 1,000 retries here; by
    // default it holds 100, and refuses the rest with a 503).
    const STREAMS: usize = 300;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |a| {
        a.tls = true;
        a.max_concurrent_streams = 25;
        a.max_connections = 8;
        a.ttft_ms = 100;
        a.tokens_per_sec = 5.0;
    })
    .await;
    let spare = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let ca = ca_file(hosted.ca_pem().unwrap());
    let yaml = config(
        &ca,
        &format!(
            r#"dispatch: {{hosted_max_connections: 8, hosted_streams_per_connection: 25, stream_idle_timeout_ms: 30000, retry_budget_min_per_sec: 100}}
backends:
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: spare, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - {{name: chat, backends: [hosted, spare], strategy: priority, slo: {{ttft_ms: 1500}}}}
"#,
            hosted.base_url(),
            spare.base_url()
        ),
    );
    let r = router(&yaml, &[]).await;
    let (report, waiting) = spill_burst(&r.url, "chat", "hosted", STREAMS, 20, Duration::from_secs(60)).await;
    let on = |b: &str| report.by_backend.get(b).copied().unwrap_or(0);
    let (_, peak, _) = hosted.connections();
    eprintln!(
        "{STREAMS} streams, 8 connections of 25: {} on hosted, {} failed over to spare, {} errors; at most \
         {waiting} waiting; {peak} connections; took {:.1} s",
        on("hosted"),
        on("spare"),
        report.errors,
        report.elapsed.as_secs_f64()
    );
    assert_eq!(
        report.ok as usize,
        STREAMS,
        "none hung or failed: {} {:?}",
        report.summary(),
        report.first_error
    );
    assert!(peak <= 8, "never more than the provider's connections: {peak}");
    assert!(on("hosted") <= 200, "at most 25 streams on each of 8 connections: {}", on("hosted"));
    assert!(on("spare") >= 100, "the rest failed over at their deadline: {}", on("spare"));
    assert!(waiting >= 25, "the waiting metric rose: {waiting}");
    std::fs::remove_file(ca).ok();
}
