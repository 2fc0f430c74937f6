//! Batch jobs as an SRE watches them: lines waiting and running over every active job, lines
//! ended by task, backend and how, and the batch lines each pool runs now beside interactive
//! traffic. Fed by the batch runner.

use super::family::Registry;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

/// The batch families' handles (cheap to clone).
#[derive(Clone)]
pub struct BatchMetrics {
    lines: IntGaugeVec,
    ended: IntCounterVec,
    in_flight: IntGaugeVec,
}

impl BatchMetrics {
    pub(super) fn register(r: &Registry) -> BatchMetrics {
        let lines = IntGaugeVec::new(
            Opts::new("spillway_batch_lines", "Lines of the active batch jobs by state (queued, running)."),
            &["state"],
        )
        .expect("static metric definition");
        r.register(Box::new(lines.clone())).expect("each family is registered once");
        for state in ["queued", "running"] {
            lines.with_label_values(&[state]);
        }
        let ended = IntCounterVec::new(
            Opts::new(
                "spillway_batch_lines_ended_total",
                "Batch lines ended, by task, the backend that answered (empty: none) and state (succeeded, errored, expired, canceled).",
            ),
            &["task", "backend", "state"],
        )
        .expect("static metric definition");
        r.register(Box::new(ended.clone())).expect("each family is registered once");
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "spillway_batch_in_flight",
                "Batch lines this replica runs now, by pool (`hosted`: lines of tasks with no pool, or spilled to realtime).",
            ),
            &["backend"],
        )
        .expect("static metric definition");
        r.register(Box::new(in_flight.clone())).expect("each family is registered once");
        BatchMetrics { lines, ended, in_flight }
    }

    /// The active jobs' lines now.
    pub fn set_lines(&self, queued: u64, running: u64) {
        self.lines.with_label_values(&["queued"]).set(queued as i64);
        self.lines.with_label_values(&["running"]).set(running as i64);
    }

    pub fn ended(&self, task: &str, backend: &str, state: &str) {
        self.ended.with_label_values(&[task, backend, state]).inc();
    }

    pub fn set_in_flight(&self, backend: &str, n: u64) {
        self.in_flight.with_label_values(&[backend]).set(n as i64);
    }
}
