//! Every family Spillway exports, grouped by the component that feeds it, each with its typed
//! label set. Registered once, into the router's one registry, by [`super::Metrics::new`].

use prometheus::{exponential_buckets, CounterVec, GaugeVec, HistogramVec, IntCounterVec, IntGaugeVec};

use super::family::{counter, float_counter, gauge, histogram, int_gauge, label_set, Family, Registry};

/// TTFT and latency buckets (seconds): fine from 25 ms to 2 s, where TTFT SLOs live, then coarse.
const LATENCY_BUCKETS: [f64; 18] =
    [0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0];

label_set!(TaskBackendOutcome { task, backend, outcome });
label_set!(TaskBackend { task, backend });
label_set!(TaskBackendKind { task, backend, kind });
label_set!(TaskReason { task, reason });
label_set!(TaskDirection { task, direction });
label_set!(TaskPriority { task, priority });
label_set!(Failover { task, from, to, reason });
label_set!(BackendResult { backend, result });
label_set!(Backend { backend });
label_set!(BackendDecision { backend, decision, why });
label_set!(BackendPriority { backend, priority });
label_set!(BackendStatus { backend, status });
label_set!(Node { backend, node });
label_set!(Gpu { backend, node, gpu });
label_set!(Task { task });
label_set!(Store { store });
label_set!(BackendBusy { backend, busy });
label_set!(TaskSlo { task, slo });
label_set!(TaskSloWindow { task, slo, window });
label_set!(TaskPercentile { task, percentile });
label_set!(TaskBackendResult { task, backend, result });
label_set!(TaskBackendVerdict { task, backend, verdict });

/// Requests, from their outcome records.
pub(crate) struct RequestFamilies {
    pub finished: Family<IntCounterVec, TaskBackendOutcome<'static>>,
    pub ttft: Family<HistogramVec, TaskBackend<'static>>,
    pub inter_token: Family<HistogramVec, TaskBackend<'static>>,
    pub duration: Family<HistogramVec, TaskBackend<'static>>,
    pub tokens: Family<IntCounterVec, TaskBackendKind<'static>>,
    pub cost: Family<CounterVec, TaskBackend<'static>>,
    pub spills: Family<IntCounterVec, TaskReason<'static>>,
    pub unmeasured: Family<IntCounterVec, TaskBackend<'static>>,
    pub shed: Family<IntCounterVec, TaskPriority<'static>>,
    pub failovers: Family<IntCounterVec, Failover<'static>>,
    pub first_choice: Family<IntCounterVec, TaskBackend<'static>>,
    pub session_moves: Family<IntCounterVec, TaskDirection<'static>>,
}

impl RequestFamilies {
    pub(super) fn register(r: &Registry) -> RequestFamilies {
        let latency = LATENCY_BUCKETS.to_vec();
        let itl = exponential_buckets(0.002, 2.0, 10).expect("static buckets");
        RequestFamilies {
            finished: counter(
                r,
                "spillway_requests_total",
                "Finished requests by task, serving backend (empty: none) and outcome.",
            ),
            ttft: histogram(
                r,
                "spillway_ttft_seconds",
                "Time to first token as the client saw it.",
                latency.clone(),
            ),
            inter_token: histogram(
                r,
                "spillway_inter_token_seconds",
                "Mean time between output tokens of a request.",
                itl,
            ),
            duration: histogram(
                r,
                "spillway_request_duration_seconds",
                "Request duration, arrival to last byte.",
                latency.clone(),
            ),
            tokens: counter(
                r,
                "spillway_tokens_total",
                "Tokens by kind (input, cached_input, cache_write, output) as the serving backend counted them.",
            ),
            cost: float_counter(
                r,
                "spillway_cost_usd_total",
                "Hosted spend at list price, US dollars (GPU time is in the ledger reports).",
            ),
            spills: counter(
                r,
                "spillway_spills_total",
                "Requests the fleet did not serve although it was in their plan, by reason.",
            ),
            unmeasured: counter(
                r,
                "spillway_unmeasured_requests_total",
                "Requests a local pool served without telemetry (no node of it freshly scraped, nothing else eligible), within each node's capacity by the router's in-flight count.",
            ),
            shed: counter(
                r,
                "spillway_shed_total",
                "Requests refused for lack of capacity (429), by priority.",
            ),
            failovers: counter(
                r,
                "spillway_failovers_total",
                "Moves from a failed backend to the next, by error class.",
            ),
            first_choice: counter(
                r,
                "spillway_first_choice_total",
                "Plans by task and the backend that came first in them (an adaptive task's chain choice).",
            ),
            session_moves: counter(
                r,
                "spillway_session_moves_total",
                "Moves of a session (a session header or prompt_cache_key) from one request to the next: to_hosted, home (to the fleet), between_providers. Each session's own are at GET /admin/sessions.",
            ),
        }
    }
}

/// Upstream calls per backend (the first seed document's five metrics) and canaries.
pub(crate) struct ProviderFamilies {
    pub calls: Family<IntCounterVec, Backend<'static>>,
    pub successes: Family<IntCounterVec, Backend<'static>>,
    pub failures: Family<IntCounterVec, BackendStatus<'static>>,
    pub latency: Family<HistogramVec, Backend<'static>>,
    pub last_success: Family<GaugeVec, Backend<'static>>,
    pub canaries: Family<IntCounterVec, BackendResult<'static>>,
    pub quota_shared_state: Family<IntGaugeVec, Store<'static>>,
    pub budget_shared_state: Family<IntGaugeVec, Store<'static>>,
    pub issued_keys_age: Family<GaugeVec, Store<'static>>,
}

impl ProviderFamilies {
    pub(super) fn register(r: &Registry) -> ProviderFamilies {
        let latency = LATENCY_BUCKETS.to_vec();
        ProviderFamilies {
            calls: counter(r, "spillway_provider_calls_total", "Upstream calls per backend."),
            successes: counter(
                r,
                "spillway_provider_successes_total",
                "Upstream calls that produced a first token.",
            ),
            failures: counter(
                r,
                "spillway_provider_failures_total",
                "Upstream calls that failed, by HTTP status or error class.",
            ),
            latency: histogram(
                r,
                "spillway_provider_latency_seconds",
                "Upstream call time to first token or failure.",
                latency,
            ),
            last_success: gauge(
                r,
                "spillway_backend_last_success_timestamp_seconds",
                "Unix time of the backend's last served request (0: none since start).",
            ),
            canaries: counter(
                r,
                "spillway_canaries_total",
                "Canary probes of fallback backends, by result (ok, failed).",
            ),
            quota_shared_state: int_gauge(
                r,
                "spillway_quota_shared_state_up",
                "1 while the store hosted quotas share across replicas answers, 0 while each replica counts alone (absent without one).",
            ),
            budget_shared_state: int_gauge(
                r,
                "spillway_budget_shared_state_up",
                "1 while the store key limits and budgets share across replicas answers, 0 while it is down and budgets.when_redis_down applies (absent without one).",
            ),
            issued_keys_age: gauge(
                r,
                "spillway_issued_keys_age_seconds",
                "Seconds since this router last read the issued client keys from its store (absent without one); past issued_keys.refresh_ms, a key revoked elsewhere may still pass here.",
            ),
        }
    }
}

/// Breakers, nodes, availability and weights, set from the snapshot at scrape time.
pub(crate) struct FleetFamilies {
    pub breaker: Family<IntGaugeVec, Node<'static>>,
    pub availability: Family<GaugeVec, Backend<'static>>,
    pub share: Family<GaugeVec, Backend<'static>>,
    pub weight: Family<GaugeVec, TaskBackend<'static>>,
    pub occupancy: Family<GaugeVec, BackendPriority<'static>>,
    pub upstream_waiting: Family<IntGaugeVec, Backend<'static>>,
    pub node_running: Family<GaugeVec, Node<'static>>,
    pub node_waiting: Family<GaugeVec, Node<'static>>,
    pub node_kv_usage: Family<GaugeVec, Node<'static>>,
    pub node_headroom: Family<GaugeVec, Node<'static>>,
    pub node_telemetry_age: Family<GaugeVec, Node<'static>>,
    pub node_quarantined: Family<IntGaugeVec, Node<'static>>,
    pub node_held: Family<IntGaugeVec, Node<'static>>,
    pub gpu_utilization: Family<GaugeVec, Gpu<'static>>,
    pub gpu_samples: Family<IntCounterVec, BackendBusy<'static>>,
}

impl FleetFamilies {
    pub(super) fn register(r: &Registry) -> FleetFamilies {
        FleetFamilies {
            breaker: int_gauge(
                r,
                "spillway_breaker_state",
                "Circuit breaker per backend node: 0 closed, 1 half-open, 2 open.",
            ),
            availability: gauge(
                r,
                "spillway_backend_availability",
                "Hosted backend availability from the PID loop (0-1).",
            ),
            share: gauge(
                r,
                "spillway_pool_share",
                "Share of projects a local pool takes first while it cannot take them all (0-1; sticky spill).",
            ),
            weight: gauge(
                r,
                "spillway_backend_weight",
                "Share of an adaptive task's first choices each backend gets now.",
            ),
            occupancy: gauge(
                r,
                "spillway_pool_occupancy_ratio",
                "Share of a local pool's sequence slots the router's own requests hold now, by priority (interactive, standard, batch).",
            ),
            upstream_waiting: int_gauge(
                r,
                "spillway_upstream_waiting",
                "Requests waiting for a connection or stream slot to a hosted backend now (every connection allowed is full).",
            ),
            node_running: gauge(r, "spillway_node_running", "Sequences a vLLM node runs (its last scrape)."),
            node_waiting: gauge(
                r,
                "spillway_node_waiting",
                "Requests queued on a vLLM node (its last scrape).",
            ),
            node_kv_usage: gauge(r, "spillway_node_kv_usage_ratio", "KV cache use of a vLLM node (0-1)."),
            node_headroom: gauge(
                r,
                "spillway_node_headroom",
                "Sequences a vLLM node can still take within its reserve.",
            ),
            node_telemetry_age: gauge(
                r,
                "spillway_node_telemetry_age_seconds",
                "Seconds since the node's last good scrape (+Inf: never).",
            ),
            node_quarantined: int_gauge(
                r,
                "spillway_node_quarantined",
                "1 when the node differs from its pool's pin and serves nothing.",
            ),
            node_held: int_gauge(
                r,
                "spillway_node_held",
                "1 while an operator holds the node out of every plan (drained or disabled).",
            ),
            gpu_utilization: gauge(
                r,
                "spillway_gpu_utilization_ratio",
                "GPU utilisation from the NVML agent (0-1).",
            ),
            gpu_samples: counter(
                r,
                "spillway_gpu_samples_total",
                "Node samples taken for the ledger's GPU-time rows, by whether the node was serving.",
            ),
        }
    }
}

/// SLO targets, windows and burn rates, set at scrape time.
pub(crate) struct SloFamilies {
    pub target: Family<GaugeVec, Task<'static>>,
    pub objective: Family<GaugeVec, TaskSlo<'static>>,
    pub attainment: Family<GaugeVec, TaskSloWindow<'static>>,
    pub burn_rate: Family<GaugeVec, TaskSloWindow<'static>>,
    pub ttft_percentile: Family<GaugeVec, TaskPercentile<'static>>,
}

impl SloFamilies {
    pub(super) fn register(r: &Registry) -> SloFamilies {
        SloFamilies {
            target: gauge(r, "spillway_slo_ttft_target_seconds", "The task's TTFT SLO."),
            objective: gauge(r, "spillway_slo_objective_ratio", "Share of requests that must meet the SLO."),
            attainment: gauge(
                r,
                "spillway_slo_attainment_ratio",
                "Share of requests that met the SLO over the window.",
            ),
            burn_rate: gauge(
                r,
                "spillway_slo_burn_rate",
                "Error-budget burn rate over the window (1: the budget lasts exactly the SLO period).",
            ),
            ttft_percentile: gauge(
                r,
                "spillway_ttft_percentile_seconds",
                "TTFT percentiles (p50, p95, p99) over the last five minutes.",
            ),
        }
    }
}

/// The evaluation gate and shadow traffic.
pub(crate) struct GateFamilies {
    pub passing: Family<IntGaugeVec, TaskBackend<'static>>,
    pub failed: Family<IntGaugeVec, TaskBackend<'static>>,
    pub runs: Family<IntCounterVec, TaskBackendResult<'static>>,
    pub shadows: Family<IntCounterVec, TaskBackendResult<'static>>,
    pub shadow_grades: Family<IntCounterVec, TaskBackendVerdict<'static>>,
}

impl GateFamilies {
    pub(super) fn register(r: &Registry) -> GateFamilies {
        GateFamilies {
            passing: int_gauge(
                r,
                "spillway_gate_passing",
                "1 when the backend's current fingerprint has a passing gate result for the task.",
            ),
            failed: int_gauge(
                r,
                "spillway_gate_failed",
                "1 when the latest gate run of the task on the backend failed (alert on it).",
            ),
            runs: counter(
                r,
                "spillway_gate_runs_total",
                "Gate runs made by this router (pin changes, admin), by result (pass, fail).",
            ),
            shadows: counter(
                r,
                "spillway_shadow_requests_total",
                "Shadow copies of live requests, by result (ok, error, over_quota).",
            ),
            shadow_grades: counter(
                r,
                "spillway_shadow_graded_total",
                "Shadow answers graded against the primary's answer, by verdict (pass, fail).",
            ),
        }
    }
}
