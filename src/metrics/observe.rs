//! Feeding the counters, histograms and SLO windows from dispatch records. Called by the
//! bookkeeping loop only; each call is a few atomic adds and one short lock.

use std::time::{SystemTime, UNIX_EPOCH};

use super::families::{
    Backend, BackendBusy, BackendResult, BackendStatus, Failover, Store, Task, TaskBackend, TaskBackendKind,
    TaskBackendOutcome, TaskBackendResult, TaskBackendVerdict, TaskDirection, TaskPriority, TaskReason,
    TaskSlo,
};
use super::slo::{self, Observation};
use super::Metrics;
use crate::config::Config;
use crate::outcome::{AttemptRecord, Ending, RequestOutcome};

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Metrics {
    /// Take the tasks' SLO targets and objectives (at start and on every config reload).
    pub(crate) fn configure(&self, config: &Config) {
        let mut windows = self.slo.lock().unwrap_or_else(|e| e.into_inner());
        windows.retain(|task, _| config.task(task).is_some());
        for task in &config.tasks {
            let target = task.slo.ttft_ms;
            windows
                .entry(task.name.as_str().into())
                .or_insert_with(|| slo::TaskSlo::new(target))
                .set_target(target);
            self.slo_gauges.target.get(Task { task: &task.name }).set(target as f64 / 1000.0);
            self.slo_gauges.objective.get(TaskSlo { task: &task.name, slo: "ttft" }).set(task.slo.objective);
            self.slo_gauges
                .objective
                .get(TaskSlo { task: &task.name, slo: "availability" })
                .set(task.slo.availability);
        }
        for b in &config.backends {
            // Present from the start, so that "never served" is a value alerts can see.
            self.providers.last_success.get(Backend { backend: &b.name });
        }
    }

    /// One upstream call (skipped targets are not calls).
    pub(crate) fn observe_attempt(&self, a: &AttemptRecord) {
        if a.skipped.is_some() {
            return;
        }
        let backend = Backend { backend: &a.backend };
        self.providers.calls.get(backend).inc();
        self.providers.latency.get(backend).observe(a.elapsed.as_secs_f64());
        match a.error_class {
            Some(class) => {
                let status = a.status.map_or_else(|| class.as_str().to_string(), |s| s.to_string());
                self.providers.failures.get(BackendStatus { backend: &a.backend, status: &status }).inc();
            }
            None => {
                self.providers.successes.get(backend).inc();
                self.providers.last_success.get(backend).set(unix_secs(SystemTime::now()));
            }
        }
    }

    /// Where each gated (task, backend) stands now (set at scrape time): `(task, backend,
    /// passing, last run failed)`.
    pub(crate) fn set_gate<'a>(&self, standings: impl IntoIterator<Item = (&'a str, &'a str, bool, bool)>) {
        self.gate.passing.reset();
        self.gate.failed.reset();
        for (task, backend, passing, last_run_failed) in standings {
            let labels = TaskBackend { task, backend };
            self.gate.passing.get(labels).set(i64::from(passing));
            self.gate.failed.get(labels).set(i64::from(last_run_failed));
        }
    }

    /// A gate run this router made.
    pub(crate) fn observe_gate_run(&self, task: &str, backend: &str, passed: bool) {
        self.gate
            .runs
            .get(TaskBackendResult { task, backend, result: if passed { "pass" } else { "fail" } })
            .inc();
    }

    /// A shadow copy sent (`result`: ok, error, over_quota).
    pub(crate) fn observe_shadow(&self, task: &str, backend: &str, result: &str) {
        self.gate.shadows.get(TaskBackendResult { task, backend, result }).inc();
    }

    /// A shadow answer graded.
    pub(crate) fn observe_shadow_grade(&self, task: &str, backend: &str, passed: bool) {
        self.gate
            .shadow_grades
            .get(TaskBackendVerdict { task, backend, verdict: if passed { "pass" } else { "fail" } })
            .inc();
    }

    /// One canary probe of a backend.
    pub(crate) fn observe_canary(&self, backend: &str, ok: bool) {
        self.providers
            .canaries
            .get(BackendResult { backend, result: if ok { "ok" } else { "failed" } })
            .inc();
    }

    /// What the queue in front of a local pool decided for a request.
    pub(crate) fn observe_queue(&self, r: &crate::outcome::QueueRecord) {
        self.queue.observe(r);
    }

    /// Local pools that did not serve a request although it was theirs to serve.
    pub(crate) fn observe_spilled(&self, r: &crate::outcome::SpillRecord) {
        self.unserved.observe(r);
    }

    /// A plan was made; `first` is the backend that came first in it.
    pub(crate) fn observe_planned(&self, task: &str, first: &str) {
        self.requests.first_choice.get(TaskBackend { task, backend: first }).inc();
    }

    /// Whether the store shared quotas are kept in answers (`None`: there is none).
    pub(crate) fn set_quota_shared_state(&self, up: Option<bool>) {
        self.providers.quota_shared_state.reset();
        if let Some(up) = up {
            self.providers.quota_shared_state.get(Store { store: "redis" }).set(i64::from(up));
        }
    }

    /// Whether the store key limits and budgets are kept in answers (`None`: there is none).
    pub(crate) fn set_budget_shared_state(&self, up: Option<bool>) {
        self.providers.budget_shared_state.reset();
        if let Some(up) = up {
            self.providers.budget_shared_state.get(Store { store: "redis" }).set(i64::from(up));
        }
    }

    /// How long ago the issued keys were read from the ledger store (`None`: never, or none).
    pub(crate) fn set_issued_keys_age(&self, age_secs: Option<f64>) {
        self.providers.issued_keys_age.reset();
        if let Some(age) = age_secs {
            self.providers.issued_keys_age.get(Store { store: "ledger" }).set(age);
        }
    }

    /// One sample of a local node for GPU time.
    pub(crate) fn observe_gpu_sample(&self, backend: &str, busy: bool) {
        self.fleet.gpu_samples.get(BackendBusy { backend, busy: if busy { "true" } else { "false" } }).inc();
    }

    /// Dispatch moved on from a backend that failed.
    pub(crate) fn observe_session_move(&self, task: &str, direction: &str) {
        self.requests.session_moves.get(TaskDirection { task, direction }).inc();
    }

    pub(crate) fn observe_failover(&self, task: &str, from: &str, to: &str, reason: &str) {
        self.requests.failovers.get(Failover { task, from, to, reason }).inc();
    }

    /// One finished request; `cost_usd` is its hosted list-price cost, if any.
    pub(crate) fn observe_request(&self, r: &RequestOutcome, cost_usd: Option<f64>) {
        if r.meta.synthetic {
            return;
        }
        let outcome = match r.ending {
            Ending::InFlight => return,
            Ending::Completed => "completed",
            Ending::Failed(_) => "failed",
            Ending::Cancelled => "cancelled",
            Ending::Shed => "shed",
        };
        let tb = TaskBackend { task: &r.task, backend: &r.backend };
        self.requests.finished.get(TaskBackendOutcome { task: &r.task, backend: &r.backend, outcome }).inc();
        if r.ending == Ending::Shed {
            self.requests.shed.get(TaskPriority { task: &r.task, priority: r.meta.priority.as_str() }).inc();
        }
        if let Some(reason) = r.spill {
            self.requests.spills.get(TaskReason { task: &r.task, reason: reason.as_str() }).inc();
        }
        if r.unmeasured {
            self.requests.unmeasured.get(tb).inc();
        }
        if let Some(ttft) = r.ttft {
            self.requests.ttft.get(tb).observe(ttft.as_secs_f64());
            let output = r.usage.output_tokens;
            if output > 1 && r.duration > ttft {
                let itl = (r.duration - ttft).as_secs_f64() / f64::from(output - 1);
                self.requests.inter_token.get(tb).observe(itl);
            }
        }
        if !r.backend.is_empty() {
            self.requests.duration.get(tb).observe(r.duration.as_secs_f64());
            let u = &r.usage;
            for (kind, n) in [
                ("input", u.input_tokens),
                ("cached_input", u.cached_input_tokens),
                ("cache_write", u.cache_write_tokens),
                ("output", u.output_tokens),
            ] {
                self.requests
                    .tokens
                    .get(TaskBackendKind { task: &r.task, backend: &r.backend, kind })
                    .inc_by(u64::from(n));
            }
        }
        if let Some(cost) = cost_usd.filter(|c| *c > 0.0) {
            self.requests.cost.get(tb).inc_by(cost);
        }
        if let Some(o) = slo_observation(r) {
            if let Some(w) = self.slo.lock().unwrap_or_else(|e| e.into_inner()).get_mut(r.task.as_str()) {
                w.record(o);
            }
        }
    }
}

/// What a request counts for in the SLO windows: nothing when the client caused its failure
/// (a bad request is not a breach) or left before a first token.
fn slo_observation(r: &RequestOutcome) -> Option<Observation> {
    let error = match r.ending {
        Ending::Failed(class) if !class.counts_against_backend() => return None,
        Ending::Cancelled if r.ttft.is_none() => return None,
        Ending::Failed(_) | Ending::Shed => true,
        _ => false,
    };
    let end = r.meta.arrived_at + r.duration;
    Some(Observation { at_secs: unix_secs(end) as i64, ttft_ms: r.ttft.map(|t| t.as_millis() as u64), error })
}
