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
use super::scenario::StrategyName;
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

/// Everything counted during one run.
#[derive(Debug, Clone)]
pub struct Stats {
    pub strategy: StrategyName,
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
    pub fn new(strategy: StrategyName, hours: f64, projects: usize, buckets: usize) -> Stats {
        Stats {
            strategy,
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
        Summary {
            strategy: self.strategy.as_str().to_string(),
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
        }
    }
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
}
