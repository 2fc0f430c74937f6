//! Feeding the counters, histograms and SLO windows from dispatch records. Called by the
//! bookkeeping loop only; each call is a few atomic adds and one short lock.

use std::time::{SystemTime, UNIX_EPOCH};

use super::slo::{Observation, TaskSlo};
use super::Metrics;
use crate::config::Config;
use crate::outcome::{AttemptRecord, Ending, RequestOutcome};

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Metrics {
    /// Take the tasks' SLO targets and objectives (at start and on every config reload).
    pub fn configure(&self, config: &Config) {
        let mut windows = self.slo.lock().unwrap_or_else(|e| e.into_inner());
        windows.retain(|task, _| config.task(task).is_some());
        for task in &config.tasks {
            let target = task.slo.ttft_ms;
            windows.entry(task.name.clone()).or_insert_with(|| TaskSlo::new(target)).set_target(target);
            self.slo_target.with_label_values(&[&task.name]).set(target as f64 / 1000.0);
            self.slo_objective.with_label_values(&[&task.name, "ttft"]).set(task.slo.objective);
            self.slo_objective.with_label_values(&[&task.name, "availability"]).set(task.slo.availability);
        }
        for b in &config.backends {
            // Present from the start, so that "never served" is a value alerts can see.
            self.last_success.with_label_values(&[&b.name]);
        }
    }

    /// One upstream call (skipped targets are not calls).
    pub fn observe_attempt(&self, a: &AttemptRecord) {
        if a.skipped.is_some() {
            return;
        }
        let backend = [a.backend.as_str()];
        self.provider_calls.with_label_values(&backend).inc();
        self.provider_latency.with_label_values(&backend).observe(a.elapsed.as_secs_f64());
        match a.error_class {
            Some(class) => {
                let status = a.status.map_or_else(|| class.as_str().to_string(), |s| s.to_string());
                self.provider_failures.with_label_values(&[a.backend.as_str(), &status]).inc();
            }
            None => {
                self.provider_successes.with_label_values(&backend).inc();
                self.last_success.with_label_values(&backend).set(unix_secs(SystemTime::now()));
            }
        }
    }

    /// Where each gated (task, backend) stands now (set at scrape time): `(task, backend,
    /// passing, last run failed)`.
    pub fn set_gate<'a>(&self, standings: impl IntoIterator<Item = (&'a str, &'a str, bool, bool)>) {
        self.gate_passing.reset();
        self.gate_failed.reset();
        for (task, backend, passing, last_run_failed) in standings {
            let labels = [task, backend];
            self.gate_passing.with_label_values(&labels).set(i64::from(passing));
            self.gate_failed.with_label_values(&labels).set(i64::from(last_run_failed));
        }
    }

    /// A gate run this router made.
    pub fn observe_gate_run(&self, task: &str, backend: &str, passed: bool) {
        self.gate_runs.with_label_values(&[task, backend, if passed { "pass" } else { "fail" }]).inc();
    }

    /// A shadow copy sent (`result`: ok, error, over_quota).
    pub fn observe_shadow(&self, task: &str, backend: &str, result: &str) {
        self.shadows.with_label_values(&[task, backend, result]).inc();
    }

    /// A shadow answer graded.
    pub fn observe_shadow_grade(&self, task: &str, backend: &str, passed: bool) {
        self.shadow_grades.with_label_values(&[task, backend, if passed { "pass" } else { "fail" }]).inc();
    }

    /// One canary probe of a backend.
    pub fn observe_canary(&self, backend: &str, ok: bool) {
        self.canaries.with_label_values(&[backend, if ok { "ok" } else { "failed" }]).inc();
    }

    /// One sample of a local node for GPU time.
    pub fn observe_gpu_sample(&self, backend: &str, busy: bool) {
        self.gpu_samples.with_label_values(&[backend, if busy { "true" } else { "false" }]).inc();
    }

    /// Dispatch moved on from a backend that failed.
    pub fn observe_failover(&self, task: &str, from: &str, to: &str, reason: &str) {
        self.failovers.with_label_values(&[task, from, to, reason]).inc();
    }

    /// One finished request; `cost_usd` is its hosted list-price cost, if any.
    pub fn observe_request(&self, r: &RequestOutcome, cost_usd: Option<f64>) {
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
        let tb = [r.task.as_str(), r.backend.as_str()];
        self.requests.with_label_values(&[&r.task, &r.backend, outcome]).inc();
        if r.ending == Ending::Shed {
            self.shed.with_label_values(&[&r.task, r.meta.priority.as_str()]).inc();
        }
        if let Some(reason) = r.spill {
            self.spills.with_label_values(&[&r.task, reason.as_str()]).inc();
        }
        if let Some(ttft) = r.ttft {
            self.ttft.with_label_values(&tb).observe(ttft.as_secs_f64());
            let output = r.usage.output_tokens;
            if output > 1 && r.duration > ttft {
                let itl = (r.duration - ttft).as_secs_f64() / f64::from(output - 1);
                self.inter_token.with_label_values(&tb).observe(itl);
            }
        }
        if !r.backend.is_empty() {
            self.duration.with_label_values(&tb).observe(r.duration.as_secs_f64());
            let u = &r.usage;
            for (kind, n) in [
                ("input", u.input_tokens),
                ("cached_input", u.cached_input_tokens),
                ("output", u.output_tokens),
            ] {
                self.tokens.with_label_values(&[&r.task, &r.backend, kind]).inc_by(u64::from(n));
            }
        }
        if let Some(cost) = cost_usd.filter(|c| *c > 0.0) {
            self.cost.with_label_values(&tb).inc_by(cost);
        }
        if let Some(o) = slo_observation(r) {
            if let Some(w) = self.slo.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&r.task) {
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
