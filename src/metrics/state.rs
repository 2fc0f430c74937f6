//! Gauges of current state, set from the published snapshot and the telemetry board when
//! `/metrics` is scraped: breakers, node load and staleness, quarantines, GPU utilisation,
//! provider availability and weights, SLO windows. Series of nodes that left are dropped.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::slo::{burn_rate, WINDOWS};
use super::Metrics;
use crate::config::Strategy;
use crate::fleet::telemetry::TelemetryBoard;
use crate::snapshot::{BreakerView, Snapshot};

/// What the state gauges are read from.
pub struct StateView<'a> {
    pub snapshot: &'a Snapshot,
    pub telemetry: &'a TelemetryBoard,
    /// Ledger rows waiting to be written; `None` when the ledger is off.
    pub ledger_buffered: Option<u64>,
    pub now: Instant,
}

impl Metrics {
    /// Set every state gauge from `v`.
    pub fn refresh(&self, v: &StateView<'_>) {
        let snap = v.snapshot;
        for family in [&self.node_running, &self.node_waiting, &self.node_kv_usage, &self.node_headroom] {
            family.reset();
        }
        self.node_telemetry_age.reset();
        self.gpu_utilization.reset();
        self.node_quarantined.reset();
        self.node_held.reset();
        self.breaker_state.reset();
        self.weight.reset();
        for b in &snap.backends {
            if !b.is_local() {
                self.availability.with_label_values(&[&b.name]).set(b.availability);
            }
            for n in &b.nodes {
                let labels = [b.name.as_str(), n.key.as_str()];
                let state = match n.breaker {
                    BreakerView::Closed => 0,
                    BreakerView::HalfOpen => 1,
                    BreakerView::Open => 2,
                };
                self.breaker_state.with_label_values(&labels).set(state);
                self.node_held.with_label_values(&labels).set(i64::from(n.held.is_some()));
                if !b.is_local() {
                    continue;
                }
                let s = &n.signals;
                let age = s
                    .scraped_at
                    .map_or(f64::INFINITY, |at| v.now.saturating_duration_since(at).as_secs_f64());
                self.node_telemetry_age.with_label_values(&labels).set(age);
                self.node_quarantined.with_label_values(&labels).set(i64::from(n.quarantine.is_some()));
                if let Some(r) = s.running {
                    self.node_running.with_label_values(&labels).set(r);
                }
                if let Some(w) = s.waiting {
                    self.node_waiting.with_label_values(&labels).set(w);
                }
                if let Some(kv) = s.kv_usage {
                    self.node_kv_usage.with_label_values(&labels).set(kv);
                }
                let ceiling = f64::from(b.limits.max_running) * (1.0 - b.limits.reserve);
                let held = s.running.unwrap_or(0.0) + s.waiting.unwrap_or(0.0);
                self.node_headroom.with_label_values(&labels).set((ceiling - held).max(0.0));
                let agent = v.telemetry.get(&n.key).and_then(|t| t.agent).filter(|a| a.up);
                for gpu in agent.iter().flat_map(|a| a.gpus.iter()) {
                    if let Some(u) = gpu.utilization {
                        let index = gpu.index.to_string();
                        self.gpu_utilization.with_label_values(&[&b.name, &n.key, &index]).set(u);
                    }
                }
            }
        }
        for task in snap.config.tasks.iter().filter(|t| t.strategy == Strategy::Adaptive) {
            for (i, w) in crate::route::weights::task_weights(task, snap) {
                self.weight.with_label_values(&[&task.name, &snap.backends[i].name]).set(w);
            }
        }
        self.ledger_buffered.set(v.ledger_buffered.map_or(0, |n| n as i64));
        self.refresh_slo(snap);
    }

    fn refresh_slo(&self, snap: &Snapshot) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let windows = self.slo.lock().unwrap_or_else(|e| e.into_inner());
        for task in &snap.config.tasks {
            let Some(w) = windows.get(&task.name) else { continue };
            for (label, secs) in WINDOWS {
                let stats = w.window(now, secs);
                for (slo, attained, objective) in [
                    ("ttft", stats.ttft_attainment(), task.slo.objective),
                    ("availability", stats.availability(), task.slo.availability),
                ] {
                    let labels = [task.name.as_str(), slo, label];
                    self.slo_attainment.with_label_values(&labels).set(attained);
                    self.slo_burn_rate.with_label_values(&labels).set(burn_rate(attained, objective));
                }
            }
            let quantiles = [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")];
            let values = w.ttft_quantiles(now, &quantiles.map(|(q, _)| q));
            for ((_, label), value) in quantiles.iter().zip(values) {
                let g = self.ttft_percentile.with_label_values(&[task.name.as_str(), label]);
                g.set(value.map_or(f64::NAN, |ms| ms as f64 / 1000.0));
            }
        }
    }
}
