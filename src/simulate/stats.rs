//! What one strategy's run came to: per-request outcomes folded into totals (SLO attainment,
//! client-visible errors, streams broken after their first token, hosted spend, cache hits,
//! provider switches) and into time buckets for the charts (load and TTFT per bucket,
//! availability and weights sampled at its end).
//!
//! It exists so that the engine only reports facts ("request 17 got its first token from
//! anthropic after 612 ms, 400 of 1000 prompt tokens cached") and every figure is defined in
//! one place. Outcomes are streamed: counters, and TTFT histograms ([`Histogram`]) in total and
//! per bucket, so a run's memory does not grow with its requests. It must not influence the
//! run: nothing here is read back by the engine.

use std::collections::BTreeMap;

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde::Serialize;

use super::clock::Micros;
use super::histogram::Histogram;
use super::scenario::{Batching, Run, StrategyName};
use crate::config::Price;
use crate::ledger::{hosted_cost, Tokens};

/// One chart bucket: requests that *arrived* in it, and what was sampled at its end.
#[derive(Debug, Clone, Default)]
pub struct Bucket {
    pub requests: u64,
    /// Client-visible errors, streams broken after their first token apart.
    pub errors: u64,
    /// Streams broken after their first token.
    pub broken_streams: u64,
    /// Requests served, by backend name.
    pub served: BTreeMap<String, u64>,
    /// Served requests whose first token came within their task's SLO (errors after it
    /// included).
    pub served_within_slo: u64,
    /// Client-visible TTFT of the served requests.
    pub ttft: Histogram,
    /// PID availability of each tracked backend at the bucket's end.
    pub availability: BTreeMap<String, f64>,
    /// First-choice weights of the first task's backends at the bucket's end.
    pub weights: BTreeMap<String, f64>,
}

impl Bucket {
    /// TTFT p95 of the bucket's served requests, ms.
    pub(crate) fn ttft_p95(&self) -> Option<f64> {
        self.ttft.quantile_ms(0.95)
    }
}

/// What became of a run's batch jobs (their lines are not in the interactive figures).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchStats {
    pub batching: Batching,
    pub lines: u64,
    /// Lines answered by the fleet, a provider's batch API and hosted realtime.
    pub fleet: u64,
    pub hosted_batch: u64,
    pub realtime: u64,
    /// Lines that ended in an error, and those still open when their window ended.
    pub failed: u64,
    pub expired: u64,
    /// What the hosted lines cost: the batch price at a provider's batch API, list price in
    /// realtime.
    pub cost: Decimal,
    /// Seconds from each job's submission to its end (`None`: it had not ended).
    pub completion_s: Vec<Option<f64>>,
}

impl BatchStats {
    pub fn new(batching: Batching, jobs: usize) -> BatchStats {
        BatchStats {
            batching,
            lines: 0,
            fleet: 0,
            hosted_batch: 0,
            realtime: 0,
            failed: 0,
            expired: 0,
            cost: Decimal::ZERO,
            completion_s: vec![None; jobs],
        }
    }
}

/// The fleet's GPU hours over the run's length, and how many its sequence slots stood empty.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FleetHours {
    pub gpu_hours: f64,
    pub idle_gpu_hours: f64,
    /// The pools' `gpu_hourly_usd` over the run (reserved GPUs cost the same busy or idle).
    pub cost: f64,
}

/// Everything counted during one run.
#[derive(Debug, Clone)]
pub struct Stats {
    pub strategy: StrategyName,
    pub batch: Option<BatchStats>,
    pub fleet: FleetHours,
    pub hours: f64,
    pub requests: u64,
    pub served: u64,
    pub within_slo: u64,
    /// Client-visible errors by kind (`exhausted`, `shed`, `no_backend`, `client`, …), streams
    /// broken after their first token apart.
    pub errors: BTreeMap<String, u64>,
    /// Streams broken after their first token (a node lost mid-stream).
    pub broken_streams: u64,
    pub attempts: u64,
    pub ttft: Histogram,
    pub served_by: BTreeMap<String, u64>,
    pub local_served: u64,
    pub hosted_input: u64,
    pub hosted_cached: u64,
    pub hosted_output: u64,
    pub hosted_cost: Decimal,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub switches: u64,
    /// Last backend (index) that served each project.
    last_backend: Vec<Option<usize>>,
    pub buckets: Vec<Bucket>,
}

/// A served request, as the engine reports it.
pub struct ServedRequest<'a> {
    pub bucket: usize,
    pub project: usize,
    pub backend: usize,
    pub backend_name: &'a str,
    pub local: bool,
    pub price: Option<&'a Price>,
    pub ttft: Micros,
    pub within_slo: bool,
    pub prompt: u32,
    pub cached: u32,
    /// Prompt tokens written to a hosted provider's cache.
    pub cache_write: u32,
    pub output: u32,
}

/// One more for `name`, allocating its key only the first time.
fn bump(counts: &mut BTreeMap<String, u64>, name: &str) {
    match counts.get_mut(name) {
        Some(n) => *n += 1,
        None => {
            counts.insert(name.to_string(), 1);
        }
    }
}

impl Stats {
    pub fn new(run: Run, jobs: usize, hours: f64, projects: usize, buckets: usize) -> Stats {
        Stats {
            strategy: run.strategy,
            batch: run.batching.map(|b| BatchStats::new(b, jobs)),
            fleet: FleetHours::default(),
            hours,
            requests: 0,
            served: 0,
            within_slo: 0,
            errors: BTreeMap::new(),
            broken_streams: 0,
            attempts: 0,
            ttft: Histogram::default(),
            served_by: BTreeMap::new(),
            local_served: 0,
            hosted_input: 0,
            hosted_cached: 0,
            hosted_output: 0,
            hosted_cost: Decimal::ZERO,
            prompt_tokens: 0,
            cached_tokens: 0,
            switches: 0,
            last_backend: vec![None; projects],
            buckets: vec![Bucket::default(); buckets.max(1)],
        }
    }

    /// The run's name in reports.
    pub fn label(&self) -> String {
        Run { strategy: self.strategy, batching: self.batch.as_ref().map(|b| b.batching) }.label()
    }

    pub fn bucket(&mut self, i: usize) -> &mut Bucket {
        let last = self.buckets.len() - 1;
        &mut self.buckets[i.min(last)]
    }

    pub fn arrived(&mut self, bucket: usize) {
        self.requests += 1;
        self.bucket(bucket).requests += 1;
    }

    pub fn served(&mut self, r: ServedRequest<'_>) {
        self.served += 1;
        self.within_slo += u64::from(r.within_slo);
        self.ttft.record(r.ttft);
        bump(&mut self.served_by, r.backend_name);
        self.prompt_tokens += u64::from(r.prompt);
        self.cached_tokens += u64::from(r.cached);
        if r.local {
            self.local_served += 1;
        } else {
            let uncached = u64::from(r.prompt - r.cached);
            self.hosted_input += uncached;
            self.hosted_cached += u64::from(r.cached);
            self.hosted_output += u64::from(r.output);
            if let Some(p) = r.price {
                let tokens = Tokens {
                    input: u64::from(r.prompt),
                    cached_input: u64::from(r.cached),
                    cache_write: u64::from(r.cache_write),
                    output: u64::from(r.output),
                };
                self.hosted_cost += hosted_cost(p, &tokens);
            }
        }
        if let Some(last) = self.last_backend.get_mut(r.project) {
            if last.is_some_and(|b| b != r.backend) {
                self.switches += 1;
            }
            *last = Some(r.backend);
        }
        let b = self.bucket(r.bucket);
        bump(&mut b.served, r.backend_name);
        b.served_within_slo += u64::from(r.within_slo);
        b.ttft.record(r.ttft);
    }

    /// A request ended, before its first token, with an error the client sees.
    pub fn error(&mut self, bucket: usize, kind: &str) {
        bump(&mut self.errors, kind);
        self.bucket(bucket).errors += 1;
    }

    /// A stream broke after its first token. `was_within_slo`: it had been served in time
    /// before it broke (its SLO credit is taken back).
    pub fn broken_stream(&mut self, bucket: usize, was_within_slo: bool) {
        self.broken_streams += 1;
        if was_within_slo {
            self.within_slo -= 1;
        }
        self.bucket(bucket).broken_streams += 1;
    }

    pub fn summary(&self) -> Summary {
        let errors: u64 = self.errors.values().sum();
        let projects = self.last_backend.iter().filter(|b| b.is_some()).count().max(1) as f64;
        let n = self.requests.max(1) as f64;
        let batch = self.batch.as_ref().map(|b| BatchSummary {
            batching: b.batching,
            lines: b.lines,
            fleet: b.fleet,
            hosted_batch: b.hosted_batch,
            realtime: b.realtime,
            failed: b.failed,
            expired: b.expired,
            cost_usd: b.cost.round_dp(2).to_f64().unwrap_or(0.0),
            completion_hours: b.completion_s.iter().map(|s| s.map(|s| s / 3600.0)).collect(),
        });
        Summary {
            strategy: self.label(),
            requests: self.requests,
            slo_attainment: self.within_slo as f64 / n,
            errors,
            errors_by_kind: self.errors.clone(),
            broken_streams: self.broken_streams,
            ttft_p50_ms: self.ttft.quantile_ms(0.5).unwrap_or(0.0),
            ttft_p95_ms: self.ttft.quantile_ms(0.95).unwrap_or(0.0),
            local_share: self.local_served as f64 / self.served.max(1) as f64,
            hosted_tokens: self.hosted_input + self.hosted_cached + self.hosted_output,
            hosted_cost_usd: self.hosted_cost.round_dp(2).to_f64().unwrap_or(0.0),
            cache_hit_rate: self.cached_tokens as f64 / self.prompt_tokens.max(1) as f64,
            switches_per_project_hour: self.switches as f64 / projects / self.hours.max(1e-9),
            attempts_per_request: self.attempts as f64 / n,
            served_by: self.served_by.clone(),
            gpu_hours: self.fleet.gpu_hours,
            idle_gpu_hours: self.fleet.idle_gpu_hours,
            fleet_cost_usd: (self.fleet.cost * 100.0).round() / 100.0,
            batch,
        }
    }
}

/// What became of the batch jobs, as printed and as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchSummary {
    pub batching: Batching,
    pub lines: u64,
    pub fleet: u64,
    pub hosted_batch: u64,
    pub realtime: u64,
    pub failed: u64,
    pub expired: u64,
    /// The batch lines' hosted spend: the batch price at a provider's batch API, list price in
    /// realtime (the fleet's GPUs are paid for either way: `fleet_cost_usd`).
    pub cost_usd: f64,
    /// Hours from each job's submission to its end (`null`: it had not ended).
    pub completion_hours: Vec<Option<f64>>,
}

/// The figures of one run, as printed and as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub strategy: String,
    pub requests: u64,
    /// Share of all requests that got their first token within the task's TTFT SLO and did
    /// not end in an error.
    pub slo_attainment: f64,
    /// Client-visible errors, streams broken after their first token apart.
    pub errors: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Streams broken after their first token (by a node lost mid-stream): client-visible too,
    /// but unavoidable without stitching two models' answers.
    pub broken_streams: u64,
    /// TTFT percentiles of served requests, from a histogram: within 0.78 % of the exact
    /// nearest-rank values.
    pub ttft_p50_ms: f64,
    pub ttft_p95_ms: f64,
    /// Share of served requests served by the fleet.
    pub local_share: f64,
    /// Hosted input (cached and not) plus output tokens.
    pub hosted_tokens: u64,
    pub hosted_cost_usd: f64,
    /// Share of served prompt tokens that came from a prefix or prompt cache (fleet or hosted).
    pub cache_hit_rate: f64,
    /// Times a project's request was served by a different backend than its previous one, per
    /// project that sent anything, per hour.
    pub switches_per_project_hour: f64,
    /// Upstream calls per request (1 = no failover).
    pub attempts_per_request: f64,
    pub served_by: BTreeMap<String, u64>,
    /// The fleet's GPU hours over the run, and those its sequence slots stood empty (GPU hours ×
    /// the share of slots unused).
    pub gpu_hours: f64,
    pub idle_gpu_hours: f64,
    /// The pools' `gpu_hourly_usd` over the run.
    pub fleet_cost_usd: f64,
    /// Only in runs with batch jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchSummary>,
}
