//! The Prometheus exposition at `/metrics`: every family is registered once, in one registry
//! owned by the router (no globals), grouped by component with a typed label set each
//! (`families`), and the handles are passed to whoever records.
//!
//! Counters and histograms are fed from the bookkeeping loop (`observe`), never from the request
//! path; gauges of state (breakers, nodes, availability, SLO windows) are set from the current
//! snapshot when `/metrics` is scraped (`state`). Labels are low-cardinality by construction:
//! task, backend, node (the configured or discovered fleet), outcome, reason, HTTP status or
//! error class, priority, window. Never a client key, project, model text or request id.

mod batch;
mod edge;
mod families;
mod family;
mod observe;
mod opstate;
mod queue;
mod rate_window;
pub mod slo;
mod spool;
mod state;
mod telemetry;
mod unserved;

pub use batch::BatchMetrics;
use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{Encoder, IntGauge, TextEncoder};

use crate::canonical::TaskName;

pub use edge::{ConnectionEnd, EdgeMetrics};
use families::{FleetFamilies, GateFamilies, ProviderFamilies, RequestFamilies, SloFamilies};
pub use family::FamilyDoc;
use family::Registry;
pub use opstate::OperatorStateView;
pub use state::StateView;
pub use telemetry::TelemetryFamilies;

/// Every family Spillway exports, by component.
pub struct Metrics {
    registry: Registry,
    requests: RequestFamilies,
    providers: ProviderFamilies,
    fleet: FleetFamilies,
    slo_gauges: SloFamilies,
    gate: GateFamilies,
    ledger_buffered: IntGauge,
    spool: spool::SpoolFamilies,
    operator_state: opstate::OperatorStateFamilies,
    queue: queue::QueueFamilies,
    unserved: unserved::UnservedFamilies,
    /// Client connections at the HTTP edge.
    pub edge: EdgeMetrics,
    /// Batch jobs' lines (fed by the batch runner).
    pub batch: BatchMetrics,
    /// The scrape loop's (handed to it at start).
    pub telemetry: TelemetryFamilies,
    /// SLO windows by task.
    slo: Mutex<HashMap<TaskName, slo::TaskSlo>>,
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let ledger_buffered = IntGauge::new(
            "spillway_ledger_buffered_rows",
            "Ledger rows accepted and not yet written to the store.",
        )
        .expect("static metric definition");
        r.register(Box::new(ledger_buffered.clone())).expect("each family is registered once");
        Metrics {
            requests: RequestFamilies::register(&r),
            providers: ProviderFamilies::register(&r),
            fleet: FleetFamilies::register(&r),
            slo_gauges: SloFamilies::register(&r),
            gate: GateFamilies::register(&r),
            ledger_buffered,
            spool: spool::SpoolFamilies::register(&r),
            operator_state: opstate::OperatorStateFamilies::register(&r),
            queue: queue::QueueFamilies::register(&r),
            unserved: unserved::UnservedFamilies::register(&r),
            edge: EdgeMetrics::register(&r),
            batch: batch::BatchMetrics::register(&r),
            telemetry: TelemetryFamilies::register(&r),
            registry: r,
            slo: Mutex::new(HashMap::new()),
        }
    }

    /// Where the shared operator state stands on this replica.
    pub(crate) fn set_operator_state(&self, view: &OperatorStateView) {
        self.operator_state.set(view);
    }

    /// Every family this router exports (name, help, type, labels), in registration order:
    /// the source of the reference table of families, which a test compares.
    pub fn families(&self) -> Vec<FamilyDoc> {
        self.registry.families()
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
