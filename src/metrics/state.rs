//! Gauges of current state, set from the published snapshot and the telemetry board when
//! `/metrics` is scraped: breakers, node load and staleness, quarantines, GPU utilisation,
//! provider availability and weights, SLO windows, each pool's queue and spilled tokens per
//! second. Series of nodes that left are dropped.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::families::{Backend, BackendPriority, Gpu, Node, TaskBackend, TaskPercentile, TaskSloWindow};
use super::slo::{burn_rate, WINDOWS};
use super::Metrics;
use crate::config::{Priority, Strategy};
use crate::fleet::headroom;
use crate::fleet::telemetry::TelemetryBoard;
use crate::snapshot::{BreakerView, Snapshot};

/// What the state gauges are read from.
pub struct StateView<'a> {
    pub snapshot: &'a Snapshot,
    pub telemetry: &'a TelemetryBoard,
    /// Ledger rows waiting to be written; `None` when the ledger is off.
    pub ledger_buffered: Option<u64>,
    /// The ledger spool's counts; `None` without one.
    pub ledger_spool: Option<crate::ledger::SpoolStats>,
    /// Requests waiting for a connection slot to the hosted origin at a base URL now.
    pub upstream_waiting: &'a dyn Fn(&str) -> usize,
    /// Each local pool's queue: (pool, requests waiting, their prompt tokens).
    pub queues: &'a [(String, usize, u64)],
    pub now: Instant,
}

impl Metrics {
    /// Set every state gauge from `v`.
    pub fn refresh(&self, v: &StateView<'_>) {
        let snap = v.snapshot;
        let f = &self.fleet;
        for family in
            [&f.node_running, &f.node_waiting, &f.node_kv_usage, &f.node_headroom, &f.node_telemetry_age]
        {
            family.reset();
        }
        f.gpu_utilization.reset();
        f.node_quarantined.reset();
        f.node_held.reset();
        f.breaker.reset();
        f.weight.reset();
        f.occupancy.reset();
        let pools: Vec<String> =
            snap.backends.iter().filter(|b| b.is_local()).map(|b| b.name.clone()).collect();
        self.queue.set_depths(&pools, v.queues);
        self.unserved.set(&pools, v.now);
        for b in &snap.backends {
            if b.is_local() {
                f.share.get(Backend { backend: &b.name }).set(b.share);
                let slots: f64 = b.nodes.iter().map(|n| headroom::slots(&n.signals, &b.limits)).sum();
                for priority in Priority::ALL {
                    let held: u64 = b.nodes.iter().map(|n| n.handle.load.in_flight_of(priority)).sum();
                    let share = if slots > 0.0 { held as f64 / slots } else { 0.0 };
                    f.occupancy
                        .get(BackendPriority { backend: &b.name, priority: priority.as_str() })
                        .set(share);
                }
            } else {
                f.availability.get(Backend { backend: &b.name }).set(b.availability);
                let waiting = b.nodes.first().map_or(0, |n| (v.upstream_waiting)(&n.base_url));
                f.upstream_waiting.get(Backend { backend: &b.name }).set(waiting as i64);
            }
            for n in &b.nodes {
                let labels = Node { backend: &b.name, node: &n.key };
                let state = match n.breaker {
                    BreakerView::Closed => 0,
                    BreakerView::HalfOpen => 1,
                    BreakerView::Open => 2,
                };
                f.breaker.get(labels).set(state);
                f.node_held.get(labels).set(i64::from(n.held.is_some()));
                if !b.is_local() {
                    continue;
                }
                let s = &n.signals;
                let age = s
                    .scraped_at
                    .map_or(f64::INFINITY, |at| v.now.saturating_duration_since(at).as_secs_f64());
                f.node_telemetry_age.get(labels).set(age);
                f.node_quarantined.get(labels).set(i64::from(n.quarantine.is_some()));
                if let Some(r) = s.running {
                    f.node_running.get(labels).set(r);
                }
                if let Some(w) = s.waiting {
                    f.node_waiting.get(labels).set(w);
                }
                if let Some(kv) = s.kv_usage {
                    f.node_kv_usage.get(labels).set(kv);
                }
                let ceiling = f64::from(b.limits.max_running) * (1.0 - b.limits.reserve);
                let held = s.running.unwrap_or(0.0) + s.waiting.unwrap_or(0.0);
                f.node_headroom.get(labels).set((ceiling - held).max(0.0));
                let agent = v.telemetry.get(&n.key).and_then(|t| t.agent).filter(|a| a.up);
                for gpu in agent.iter().flat_map(|a| a.gpus.iter()) {
                    if let Some(u) = gpu.utilization {
                        let index = gpu.index.to_string();
                        f.gpu_utilization.get(Gpu { backend: &b.name, node: &n.key, gpu: &index }).set(u);
                    }
                }
            }
        }
        for task in snap.config.tasks.iter().filter(|t| t.strategy == Strategy::Adaptive) {
            for (i, w) in crate::route::weights::task_weights(task, snap) {
                f.weight.get(TaskBackend { task: &task.name, backend: &snap.backends[i].name }).set(w);
            }
        }
        self.ledger_buffered.set(v.ledger_buffered.map_or(0, |n| n as i64));
        self.spool.set(&v.ledger_spool.unwrap_or_default());
        self.refresh_slo(snap);
    }

    fn refresh_slo(&self, snap: &Snapshot) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let windows = self.slo.lock().unwrap_or_else(|e| e.into_inner());
        for task in &snap.config.tasks {
            let Some(w) = windows.get(task.name.as_str()) else { continue };
            for (label, secs) in WINDOWS {
                let stats = w.window(now, secs);
                for (slo, attained, objective) in [
                    ("ttft", stats.ttft_attainment(), task.slo.objective),
                    ("availability", stats.availability(), task.slo.availability),
                ] {
                    let labels = TaskSloWindow { task: &task.name, slo, window: label };
                    self.slo_gauges.attainment.get(labels).set(attained);
                    self.slo_gauges.burn_rate.get(labels).set(burn_rate(attained, objective));
                }
            }
            let quantiles = [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")];
            let values = w.ttft_quantiles(now, &quantiles.map(|(q, _)| q));
            for ((_, label), value) in quantiles.iter().zip(values) {
                let g = self
                    .slo_gauges
                    .ttft_percentile
                    .get(TaskPercentile { task: &task.name, percentile: label });
                g.set(value.map_or(f64::NAN, |ms| ms as f64 / 1000.0));
            }
        }
    }
}
