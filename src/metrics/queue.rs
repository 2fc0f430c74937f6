//! The families of the queue in front of each local pool (`serve::wait`): how many requests
//! wait there now and their prompt tokens (demand the fleet has not yet served: what an
//! autoscaler grows it by), how long each waited, and what was decided for each, with the
//! prediction's error once its first token came. Depths are set when `/metrics` is scraped;
//! decisions are fed from the bookkeeping loop.

use prometheus::{GaugeVec, HistogramVec, IntCounterVec, IntGaugeVec};

use super::families::{Backend, BackendDecision};
use super::family::{counter, gauge, histogram, int_gauge, Family, Registry};
use crate::outcome::QueueRecord;

/// Seconds a request waited for a slot: from a few ms to the longest wait allowed.
const WAIT_BUCKETS: [f64; 12] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

pub(crate) struct QueueFamilies {
    depth: Family<IntGaugeVec, Backend<'static>>,
    tokens: Family<GaugeVec, Backend<'static>>,
    wait: Family<HistogramVec, Backend<'static>>,
    decisions: Family<IntCounterVec, BackendDecision<'static>>,
    late: Family<HistogramVec, Backend<'static>>,
}

impl QueueFamilies {
    pub(crate) fn register(r: &Registry) -> QueueFamilies {
        QueueFamilies {
            depth: int_gauge(r, "spillway_queue_depth", "Requests waiting for a slot on a local pool now."),
            tokens: gauge(
                r,
                "spillway_queue_tokens",
                "Prompt tokens of the requests waiting for a slot on a local pool now (demand the fleet has not served yet).",
            ),
            wait: histogram(
                r,
                "spillway_queue_wait_seconds",
                "How long requests waited for a slot on a local pool, whatever became of them.",
                WAIT_BUCKETS.to_vec(),
            ),
            decisions: counter(
                r,
                "spillway_queue_decisions_total",
                "Requests that met a full local pool whose slot was predicted in time: waited (took a slot) or spilled, and why (slot, slo, max_wait, draining, queue_full, queue_share).",
            ),
            late: histogram(
                r,
                "spillway_queue_ttft_error_seconds",
                "First token as it came less as predicted when the request joined the queue (negative: sooner), for the requests that waited.",
                vec![-5.0, -1.0, -0.25, -0.05, 0.0, 0.05, 0.25, 1.0, 5.0],
            ),
        }
    }

    /// Each pool's queue now: (pool, requests, prompt tokens).
    pub(crate) fn set_depths(&self, pools: &[String], depths: &[(String, usize, u64)]) {
        self.depth.reset();
        self.tokens.reset();
        for pool in pools {
            let (n, tokens) = depths.iter().find(|d| &d.0 == pool).map_or((0, 0), |d| (d.1, d.2));
            self.depth.get(Backend { backend: pool }).set(n as i64);
            self.tokens.get(Backend { backend: pool }).set(tokens as f64);
        }
    }

    pub(crate) fn observe(&self, r: &QueueRecord) {
        let backend = Backend { backend: &r.pool };
        self.wait.get(backend).observe(r.waited.as_secs_f64());
        self.decisions.get(BackendDecision { backend: &r.pool, decision: r.outcome, why: r.why }).inc();
        if let (Some(actual), "waited") = (r.ttft_ms, r.outcome) {
            self.late.get(backend).observe((f64::from(actual) - f64::from(r.predicted_ttft_ms)) / 1000.0);
        }
    }
}
