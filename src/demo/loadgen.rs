//! A small open-loop traffic generator: streamed chat completions at a fixed rate, recording
//! time to first token, duration and which backend served (`x-spillway-backend`). Used by the
//! demo and by the load benchmark.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Full chat-completions URL.
    pub url: String,
    pub model: String,
    pub rps: f64,
    /// Stop after this long (`None`: forever).
    pub duration: Option<Duration>,
    pub max_tokens: u32,
    /// Print a summary line this often.
    pub report_every: Option<Duration>,
}

/// What a run saw. Latencies are in microseconds.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub ok: u64,
    pub errors: u64,
    pub by_backend: BTreeMap<String, u64>,
    pub ttft_us: Histogram<u64>,
    pub total_us: Histogram<u64>,
    pub elapsed: Duration,
    /// What the first failed request said.
    pub first_error: Option<String>,
}

impl LoadReport {
    fn new() -> Self {
        LoadReport {
            ok: 0,
            errors: 0,
            by_backend: BTreeMap::new(),
            ttft_us: Histogram::new_with_bounds(1, 600_000_000, 3).expect("static bounds"),
            total_us: Histogram::new_with_bounds(1, 600_000_000, 3).expect("static bounds"),
            elapsed: Duration::ZERO,
            first_error: None,
        }
    }

    fn add(&mut self, result: &Result<Served, String>) {
        match result {
            Ok(served) => {
                self.ok += 1;
                *self.by_backend.entry(served.backend.clone()).or_default() += 1;
                let _ = self.ttft_us.record(served.ttft.as_micros().max(1) as u64);
                let _ = self.total_us.record(served.total.as_micros().max(1) as u64);
            }
            Err(e) => {
                self.errors += 1;
                tracing::debug!("load request failed: {e}");
                self.first_error.get_or_insert_with(|| e.clone());
            }
        }
    }

    /// One line: counts, backend shares, TTFT percentiles.
    pub fn summary(&self) -> String {
        let shares: Vec<String> = self.by_backend.iter().map(|(b, n)| format!("{b} {n}")).collect();
        format!(
            "{} ok, {} errors | {} | ttft p50 {:.1} ms p99 {:.1} ms",
            self.ok,
            self.errors,
            shares.join(", "),
            self.ttft_us.value_at_quantile(0.5) as f64 / 1000.0,
            self.ttft_us.value_at_quantile(0.99) as f64 / 1000.0,
        )
    }
}

/// What one streamed request saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// `x-spillway-backend`, or `direct` when the server is not Spillway.
    pub backend: String,
    pub ttft: Duration,
    pub total: Duration,
    /// Input plus output tokens, from the usage chunk.
    pub tokens: u64,
    /// Spillway's prediction of the serving node's TTFT and what it measured upstream, ms.
    pub predicted_ttft_ms: Option<f64>,
    pub upstream_ttft_ms: Option<f64>,
    /// Why the fleet did not serve it (`x-spillway-spill`), when it did not.
    pub spill: Option<String>,
}

/// One streamed request, or an error description.
pub async fn one_request(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    max_tokens: u32,
    n: u64,
) -> Result<Served, String> {
    let started = Instant::now();
    let body = json!({
        "model": model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": format!("Ticket {n}: the printer on floor 3 jams on every job. Summarise.")}],
    });
    let resp = client.post(url).json(&body).send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let backend = header("x-spillway-backend").unwrap_or_else(|| "direct".into());
    let predicted_ttft_ms = header("x-spillway-predicted-ttft-ms").and_then(|v| v.parse().ok());
    let upstream_ttft_ms = header("x-spillway-ttft-ms").and_then(|v| v.parse().ok());
    let spill = header("x-spillway-spill");
    if !status.is_success() {
        return Err(format!("{status}: {}", resp.text().await.unwrap_or_default()));
    }
    let mut events = resp.bytes_stream().eventsource();
    let mut ttft = None;
    let mut done = false;
    let mut tokens = 0;
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| e.to_string())?;
        if event.data == "[DONE]" {
            done = true;
            break;
        }
        if event.data.contains("\"error\"") {
            return Err(event.data);
        }
        if ttft.is_none() && event.data.contains("\"content\":\"") && !event.data.contains("\"content\":\"\"")
        {
            ttft = Some(started.elapsed());
        }
        if event.data.contains("\"usage\"") {
            let chunk: serde_json::Value = serde_json::from_str(&event.data).map_err(|e| e.to_string())?;
            tokens = chunk["usage"]["total_tokens"].as_u64().unwrap_or(0);
        }
    }
    if !done {
        return Err("stream ended without [DONE]".into());
    }
    let total = started.elapsed();
    Ok(Served {
        backend,
        ttft: ttft.unwrap_or(total),
        total,
        tokens,
        predicted_ttft_ms,
        upstream_ttft_ms,
        spill,
    })
}

/// Send `n` streamed requests at once (each on its own connection) and wait for all of them:
/// a spill burst. Each is bounded by `timeout`, so a stuck request counts as an error, never a
/// hang.
pub async fn burst(url: &str, model: &str, n: usize, max_tokens: u32, timeout: Duration) -> LoadReport {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(n)
        .timeout(timeout)
        .build()
        .expect("static client settings");
    let started = Instant::now();
    let sends = (0..n).map(|i| one_request(&client, url, model, max_tokens, i as u64));
    let mut report = LoadReport::new();
    for result in futures::future::join_all(sends).await {
        report.add(&result);
    }
    report.elapsed = started.elapsed();
    report
}

/// A [`burst`] through a router, with the most requests its `/metrics` showed waiting for an
/// upstream connection or stream slot toward `backend` meanwhile (`spillway_upstream_waiting`,
/// sampled every 25 ms).
pub async fn spill_burst(
    router: &str,
    model: &str,
    backend: &str,
    n: usize,
    max_tokens: u32,
    timeout: Duration,
) -> (LoadReport, i64) {
    let client = reqwest::Client::new();
    let metrics = format!("{router}/metrics");
    let series = format!("spillway_upstream_waiting{{backend=\"{backend}\"}} ");
    let waiting_now = || async {
        let text = client.get(&metrics).send().await.ok()?.text().await.ok()?;
        text.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.trim().parse::<i64>().ok())
    };
    let url = format!("{router}/v1/chat/completions");
    let run = burst(&url, model, n, max_tokens, timeout);
    tokio::pin!(run);
    let mut peak = 0;
    loop {
        tokio::select! {
            report = &mut run => return (report, peak),
            now = async {
                let now = waiting_now().await;
                tokio::time::sleep(Duration::from_millis(25)).await;
                now
            } => peak = peak.max(now.unwrap_or(0)),
        }
    }
}

/// Send requests at `spec.rps` until the duration ends; wait for those in flight; report.
pub async fn run(spec: LoadSpec) -> LoadReport {
    let client =
        reqwest::Client::builder().pool_max_idle_per_host(1024).build().expect("static client settings");
    let report = Arc::new(Mutex::new(LoadReport::new()));
    let window = Arc::new(Mutex::new(LoadReport::new()));
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / spec.rps.max(0.001)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut next_report = spec.report_every.map(|p| started + p);
    let mut in_flight = tokio::task::JoinSet::new();
    let mut n = 0u64;
    loop {
        tick.tick().await;
        if spec.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if let (Some(at), Some(period)) = (next_report, spec.report_every) {
            if Instant::now() >= at {
                let mut w = window.lock().unwrap_or_else(|e| e.into_inner());
                println!("  last {}s: {}", period.as_secs(), w.summary());
                *w = LoadReport::new();
                next_report = Some(at + period);
            }
        }
        n += 1;
        let (client, spec, report, window) = (client.clone(), spec.clone(), report.clone(), window.clone());
        in_flight.spawn(async move {
            let result = one_request(&client, &spec.url, &spec.model, spec.max_tokens, n).await;
            for r in [&report, &window] {
                r.lock().unwrap_or_else(|e| e.into_inner()).add(&result);
            }
        });
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
    let mut final_report = report.lock().unwrap_or_else(|e| e.into_inner()).clone();
    final_report.elapsed = started.elapsed();
    final_report
}
