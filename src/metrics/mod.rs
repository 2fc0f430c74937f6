//! The Prometheus exposition at `/metrics`: every family is registered once here, in one
//! registry owned by the router (no globals), and the handles are passed to whoever records.
//!
//! Counters and histograms are fed from the bookkeeping loop (`observe`), never from the request
//! path; gauges of state (breakers, nodes, availability, SLO windows) are set from the current
//! snapshot when `/metrics` is scraped (`state`). Labels are low-cardinality by construction:
//! task, backend, node (the configured or discovered fleet), outcome, reason, HTTP status or
//! error class, priority, window. Never a client key, project, model text or request id.

mod edge;
mod observe;
pub mod slo;
mod state;

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{
    exponential_buckets, CounterVec, Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use edge::{ConnectionEnd, EdgeMetrics};
pub use state::StateView;

/// TTFT and latency buckets (seconds): fine from 25 ms to 2 s, where TTFT SLOs live, then coarse.
const LATENCY_BUCKETS: [f64; 18] =
    [0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0];

/// Every family Spillway exports.
pub struct Metrics {
    registry: Registry,
    // Requests, from outcomes.
    requests: IntCounterVec,
    ttft: HistogramVec,
    inter_token: HistogramVec,
    duration: HistogramVec,
    tokens: IntCounterVec,
    cost: CounterVec,
    spills: IntCounterVec,
    shed: IntCounterVec,
    failovers: IntCounterVec,
    canaries: IntCounterVec,
    gpu_samples: IntCounterVec,
    // Upstream calls per provider (the first seed document's five metrics, with failovers).
    provider_calls: IntCounterVec,
    provider_successes: IntCounterVec,
    provider_failures: IntCounterVec,
    provider_latency: HistogramVec,
    last_success: GaugeVec,
    // State, set at scrape time.
    breaker_state: IntGaugeVec,
    availability: GaugeVec,
    weight: GaugeVec,
    node_running: GaugeVec,
    node_waiting: GaugeVec,
    node_kv_usage: GaugeVec,
    node_headroom: GaugeVec,
    node_telemetry_age: GaugeVec,
    node_quarantined: IntGaugeVec,
    node_held: IntGaugeVec,
    gpu_utilization: GaugeVec,
    slo_target: GaugeVec,
    slo_objective: GaugeVec,
    slo_attainment: GaugeVec,
    slo_burn_rate: GaugeVec,
    ttft_percentile: GaugeVec,
    ledger_buffered: IntGauge,
    // The evaluation gate and shadow traffic.
    gate_passing: IntGaugeVec,
    gate_failed: IntGaugeVec,
    gate_runs: IntCounterVec,
    shadows: IntCounterVec,
    shadow_grades: IntCounterVec,
    /// Client connections at the HTTP edge.
    pub edge: EdgeMetrics,
    /// SLO windows by task.
    slo: Mutex<HashMap<String, slo::TaskSlo>>,
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition");
    r.register(Box::new(c.clone())).expect("each family is registered once");
    c
}

fn float_counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> CounterVec {
    let c = CounterVec::new(Opts::new(name, help), labels).expect("static metric definition");
    r.register(Box::new(c.clone())).expect("each family is registered once");
    c
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels).expect("static metric definition");
    r.register(Box::new(g.clone())).expect("each family is registered once");
    g
}

fn int_gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition");
    r.register(Box::new(g.clone())).expect("each family is registered once");
    g
}

fn histogram(r: &Registry, name: &str, help: &str, labels: &[&str], buckets: Vec<f64>) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("static metric definition");
    r.register(Box::new(h.clone())).expect("each family is registered once");
    h
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let tb = &["task", "backend"];
        let latency = LATENCY_BUCKETS.to_vec();
        let itl = exponential_buckets(0.002, 2.0, 10).expect("static buckets");
        let ledger_buffered = IntGauge::new(
            "spillway_ledger_buffered_rows",
            "Ledger rows accepted and not yet written to the store.",
        )
        .expect("static metric definition");
        r.register(Box::new(ledger_buffered.clone())).expect("each family is registered once");
        Metrics {
            requests: counter(
                &r,
                "spillway_requests_total",
                "Finished requests by task, serving backend (empty: none) and outcome.",
                &["task", "backend", "outcome"],
            ),
            ttft: histogram(
                &r,
                "spillway_ttft_seconds",
                "Time to first token as the client saw it.",
                tb,
                latency.clone(),
            ),
            inter_token: histogram(
                &r,
                "spillway_inter_token_seconds",
                "Mean time between output tokens of a request.",
                tb,
                itl,
            ),
            duration: histogram(
                &r,
                "spillway_request_duration_seconds",
                "Request duration, arrival to last byte.",
                tb,
                latency.clone(),
            ),
            tokens: counter(
                &r,
                "spillway_tokens_total",
                "Tokens by kind (input, cached_input, output) as the serving backend counted them.",
                &["task", "backend", "kind"],
            ),
            cost: float_counter(
                &r,
                "spillway_cost_usd_total",
                "Hosted spend at list price, US dollars (GPU time is in the ledger reports).",
                tb,
            ),
            spills: counter(
                &r,
                "spillway_spills_total",
                "Requests the fleet did not serve although it was in their plan, by reason.",
                &["task", "reason"],
            ),
            shed: counter(
                &r,
                "spillway_shed_total",
                "Requests refused for lack of capacity (429), by priority.",
                &["task", "priority"],
            ),
            failovers: counter(
                &r,
                "spillway_failovers_total",
                "Moves from a failed backend to the next, by error class.",
                &["task", "from", "to", "reason"],
            ),
            canaries: counter(
                &r,
                "spillway_canaries_total",
                "Canary probes of fallback backends, by result (ok, failed).",
                &["backend", "result"],
            ),
            gpu_samples: counter(
                &r,
                "spillway_gpu_samples_total",
                "Node samples taken for the ledger's GPU-time rows, by whether the node was serving.",
                &["backend", "busy"],
            ),
            provider_calls: counter(
                &r,
                "spillway_provider_calls_total",
                "Upstream calls per backend.",
                &["backend"],
            ),
            provider_successes: counter(
                &r,
                "spillway_provider_successes_total",
                "Upstream calls that produced a first token.",
                &["backend"],
            ),
            provider_failures: counter(
                &r,
                "spillway_provider_failures_total",
                "Upstream calls that failed, by HTTP status or error class.",
                &["backend", "status"],
            ),
            provider_latency: histogram(
                &r,
                "spillway_provider_latency_seconds",
                "Upstream call time to first token or failure.",
                &["backend"],
                latency,
            ),
            last_success: gauge(
                &r,
                "spillway_backend_last_success_timestamp_seconds",
                "Unix time of the backend's last served request (0: none since start).",
                &["backend"],
            ),
            breaker_state: int_gauge(
                &r,
                "spillway_breaker_state",
                "Circuit breaker per backend node: 0 closed, 1 half-open, 2 open.",
                &["backend", "node"],
            ),
            availability: gauge(
                &r,
                "spillway_backend_availability",
                "Hosted backend availability from the PID loop (0-1).",
                &["backend"],
            ),
            weight: gauge(
                &r,
                "spillway_backend_weight",
                "Share of an adaptive task's first choices each backend gets now.",
                tb,
            ),
            node_running: gauge(
                &r,
                "spillway_node_running",
                "Sequences a vLLM node runs (its last scrape).",
                &["backend", "node"],
            ),
            node_waiting: gauge(
                &r,
                "spillway_node_waiting",
                "Requests queued on a vLLM node (its last scrape).",
                &["backend", "node"],
            ),
            node_kv_usage: gauge(
                &r,
                "spillway_node_kv_usage_ratio",
                "KV cache use of a vLLM node (0-1).",
                &["backend", "node"],
            ),
            node_headroom: gauge(
                &r,
                "spillway_node_headroom",
                "Sequences a vLLM node can still take within its reserve.",
                &["backend", "node"],
            ),
            node_telemetry_age: gauge(
                &r,
                "spillway_node_telemetry_age_seconds",
                "Seconds since the node's last good scrape (+Inf: never).",
                &["backend", "node"],
            ),
            node_quarantined: int_gauge(
                &r,
                "spillway_node_quarantined",
                "1 when the node differs from its pool's pin and serves nothing.",
                &["backend", "node"],
            ),
            node_held: int_gauge(
                &r,
                "spillway_node_held",
                "1 while an operator holds the node out of every plan (drained or disabled).",
                &["backend", "node"],
            ),
            gpu_utilization: gauge(
                &r,
                "spillway_gpu_utilization_ratio",
                "GPU utilisation from the NVML agent (0-1).",
                &["backend", "node", "gpu"],
            ),
            slo_target: gauge(&r, "spillway_slo_ttft_target_seconds", "The task's TTFT SLO.", &["task"]),
            slo_objective: gauge(
                &r,
                "spillway_slo_objective_ratio",
                "Share of requests that must meet the SLO.",
                &["task", "slo"],
            ),
            slo_attainment: gauge(
                &r,
                "spillway_slo_attainment_ratio",
                "Share of requests that met the SLO over the window.",
                &["task", "slo", "window"],
            ),
            slo_burn_rate: gauge(
                &r,
                "spillway_slo_burn_rate",
                "Error-budget burn rate over the window (1: the budget lasts exactly the SLO period).",
                &["task", "slo", "window"],
            ),
            ttft_percentile: gauge(
                &r,
                "spillway_ttft_percentile_seconds",
                "TTFT percentiles (p50, p95, p99) over the last five minutes.",
                &["task", "percentile"],
            ),
            gate_passing: int_gauge(
                &r,
                "spillway_gate_passing",
                "1 when the backend's current fingerprint has a passing gate result for the task.",
                tb,
            ),
            gate_failed: int_gauge(
                &r,
                "spillway_gate_failed",
                "1 when the latest gate run of the task on the backend failed (alert on it).",
                tb,
            ),
            gate_runs: counter(
                &r,
                "spillway_gate_runs_total",
                "Gate runs made by this router (pin changes, admin), by result (pass, fail).",
                &["task", "backend", "result"],
            ),
            shadows: counter(
                &r,
                "spillway_shadow_requests_total",
                "Shadow copies of live requests, by result (ok, error, over_quota).",
                &["task", "backend", "result"],
            ),
            shadow_grades: counter(
                &r,
                "spillway_shadow_graded_total",
                "Shadow answers graded against the primary's answer, by verdict (pass, fail).",
                &["task", "backend", "verdict"],
            ),
            ledger_buffered,
            edge: EdgeMetrics::register(&r),
            registry: r,
            slo: Mutex::new(HashMap::new()),
        }
    }

    /// The exposition in Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!("metrics encoding failed: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
