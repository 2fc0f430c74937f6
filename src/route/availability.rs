//! Adaptive availability of hosted providers: every interval each provider gets
//! `score = successes − E × errors + 1`, and a PID controller moves its availability in
//! [0, 1] to hold that score near zero (with `E = 200`, an error rate near 0.5 %). The
//! availabilities feed [`crate::route::weights`], which turns them into traffic weights.
//!
//! This file exists so the controller is a plain value that tests can step by hand. It must
//! stay pure: no clock reads, no I/O, no tasks, no randomness. Time enters only as an explicit
//! `dt`; the control loop that owns an [`Availability`] records outcomes, calls
//! [`Availability::tick`] once per interval and publishes the result into the next snapshot.
//!
//! **Which errors count** is decided by the caller with
//! [`ErrorClass::counts_against_backend`]: rate limits (429), overload (503/529), other 5xx,
//! timeouts and broken connections count as errors; client mistakes (invalid request, auth,
//! content policy, context length) say nothing about the provider's capacity and are not
//! recorded at all, neither as an error nor as a success ([`Availability::record_failure`]
//! does that filtering).
//!
//! **Normalisation.** The raw score grows with traffic, so gains tuned for 10 requests per
//! interval would be 100 times too strong at 1000. The controller therefore sees
//! `score / (requests + prior_requests)` ([`normalised_score`]): with `n ≫ prior_requests`
//! that is `≈ 1 − (E + 1) × error_rate` whatever the volume (`+1` at 0 % errors, `0` at
//! `1/(E+1) ≈ 0.5 %`, `−9` at 5 %, `→ −E` when everything fails). The pseudo-count
//! `prior_requests` shrinks the signal of a thin interval toward the bias: an interval with no
//! traffic yields `1 / prior_requests`, a fraction of what a healthy busy interval yields, so an
//! unused provider climbs back *slowly*. The zero crossing (the error target) does not depend
//! on the denominator.
//!
//! **Slow answers.** A provider that stays up but answers late hurts the SLO as surely as
//! one that fails. An answer whose first token came later than its task's TTFT SLO counts as
//! *slow*, and each slow answer takes `S = slow_weight` off the score beside the success it
//! also is ([`latency_aware_score`]): `successes − E × errors − S × slow + 1`. With `S = 20`
//! the zero crossing is at about 5 % slow answers (`1/S`, errors aside): a provider all of
//! whose answers are late gets a signal near `1 − S = −19` per request and loses its weight
//! within an interval or two, like a hard outage, while a few late answers from jitter stay
//! well below it. It regains weight as its answers come back in time (or, with no traffic,
//! through the bias). `S = 0` turns the term off. The default was chosen with `spillway
//! simulate` on the shipped `hosted-slowdown` scenario (see `benches/README.md`).
//!
//! **Anti-windup** is by clamping: the integral term (kept in availability units, i.e. already
//! multiplied by `ki`) is held in `[0, integral_limit]`, default `[0, 1]`. It can represent any
//! equilibrium availability and nothing beyond, so a long outage cannot bank negative credit
//! that would delay recovery, and a long healthy spell cannot bank positive credit that would
//! delay the response to errors.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::canonical::{BackendName, ErrorClass};
use crate::route::slowness::{self, SlowRule, SlowVerdict};

/// The three gains. Per nominal interval: a step of `dt = interval` adds `ki × e` to the
/// integral term.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PidGains {
    /// Proportional gain: an immediate, transient response to this interval's signal.
    pub kp: f64,
    /// Integral gain: the persistent part; the integral term alone is the equilibrium
    /// availability.
    pub ki: f64,
    /// Derivative gain, on the change of the signal since the previous step.
    pub kd: f64,
}

/// Controller settings.
///
/// Defaults (`kp = 0.02`, `ki = 0.05`, `kd = 0`, `E = 200`, `interval = 30 s`,
/// `integral_limit = 1`, `prior_requests = 4`) and what they give, each checked by a test:
/// - 0 % errors with steady traffic: the signal is positive, the integral sits at its limit,
///   availability stays exactly 1.
/// - 5 % errors (19 successes, 1 error per interval): signal `−180 / 24 = −7.5`; availability
///   1 → 0.475 → 0.1 → 0 over three intervals. At 1000 requests per interval (signal ≈ −9.01)
///   it is ≈ 0.369 after one interval and 0 after two.
/// - A hard outage drops it to 0 in one interval.
/// - No traffic from availability 0: the bias gives a signal of `1/4`, the integral climbs
///   `0.0125` per interval, so availability passes 0.1 after 8 intervals (4 min), 0.5 after 40
///   (20 min) and is back at 1 after 80 (40 min). Healthy traffic climbs about 4 times faster
///   (≈ 0.05 per interval plus the proportional `0.02`).
/// - `kd = 0`: the per-interval error rate is a noisy count, and its difference would mostly
///   add jitter (and a kick upward the moment an error burst ends); P and I already give the
///   response above. The term is implemented and tested for operators who want it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PidConfig {
    pub gains: PidGains,
    /// `E`: how many successes one error cancels. `1 / (E + 1)` is the target error rate.
    pub error_weight: f64,
    /// The nominal step; `dt` is measured in multiples of it.
    pub interval: Duration,
    /// Upper clamp of the integral term (availability units; lower clamp is 0).
    pub integral_limit: f64,
    /// Pseudo-count added to the request count when normalising the score (must be > 0 for
    /// an idle interval to yield a finite signal; values ≤ 0 are treated as a tiny positive).
    pub prior_requests: f64,
    /// `S`: how many successes one slow answer (first token after the task's SLO) cancels.
    pub slow_weight: f64,
}

impl Default for PidConfig {
    fn default() -> Self {
        PidConfig {
            gains: PidGains { kp: 0.02, ki: 0.05, kd: 0.0 },
            error_weight: 200.0,
            interval: Duration::from_secs(30),
            integral_limit: 1.0,
            prior_requests: 4.0,
            slow_weight: 20.0,
        }
    }
}

/// The raw score of one interval: `successes − E × errors + 1`. Only errors whose class
/// [`counts_against_backend`](ErrorClass::counts_against_backend) belong in `errors`.
pub(crate) fn score(successes: u64, errors: u64, error_weight: f64) -> f64 {
    successes as f64 - error_weight * errors as f64 + 1.0
}

/// The score divided by `requests + prior_requests`: what the controller holds at zero.
pub(crate) fn normalised_score(successes: u64, errors: u64, cfg: &PidConfig) -> f64 {
    let requests = successes as f64 + errors as f64;
    score(successes, errors, cfg.error_weight) / (requests + cfg.prior_requests.max(1e-9))
}

/// [`normalised_score`] less `S` for each slow answer (already counted among `successes`),
/// on the same denominator.
pub(crate) fn latency_aware_score(successes: u64, slow: u64, errors: u64, cfg: &PidConfig) -> f64 {
    let requests = successes as f64 + errors as f64;
    normalised_score(successes, errors, cfg)
        - cfg.slow_weight * slow.min(successes) as f64 / (requests + cfg.prior_requests.max(1e-9))
}

/// One provider's controller state. Starts at availability 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pid {
    /// The integral term, already multiplied by `ki`, in `[0, integral_limit]`.
    pub integral: f64,
    /// The signal of the previous step; `None` before the first (no derivative then).
    pub prev_error: Option<f64>,
    /// The availability after the last step.
    pub output: f64,
}

impl Default for Pid {
    fn default() -> Self {
        Pid { integral: 1.0, prev_error: None, output: 1.0 }
    }
}

impl Pid {
    /// A fresh controller at availability 1 (integral term at `min(1, integral_limit)`).
    pub fn new(cfg: &PidConfig) -> Self {
        Pid { integral: cfg.integral_limit.clamp(0.0, 1.0), ..Pid::default() }
    }

    /// Advance by `dt` seconds with this interval's normalised score (see
    /// [`normalised_score`]; positive means "can take more"). Returns the availability in
    /// `[0, 1]`.
    ///
    /// With `τ = dt / interval`: `integral = clamp(integral + ki·e·τ, 0, integral_limit)`,
    /// `output = clamp(kp·e + integral + kd·(e − prev)/τ, 0, 1)`. A step with no elapsed time
    /// (or a NaN score) changes nothing and returns the current availability.
    pub fn step(&mut self, score: f64, dt: f64, cfg: &PidConfig) -> f64 {
        let interval = cfg.interval.as_secs_f64();
        if dt.is_nan() || dt <= 0.0 || interval <= 0.0 || score.is_nan() {
            return self.output;
        }
        let tau = dt / interval;
        let PidGains { kp, ki, kd } = cfg.gains;
        let limit = cfg.integral_limit.max(0.0);
        self.integral = (self.integral + ki * score * tau).clamp(0.0, limit);
        let derivative = self.prev_error.map_or(0.0, |prev| kd * (score - prev) / tau);
        self.prev_error = Some(score);
        self.output = (kp * score + self.integral + derivative).clamp(0.0, 1.0);
        self.output
    }
}

/// One provider's controller and the outcomes counted since the last tick.
#[derive(Debug, Clone, PartialEq)]
struct Provider {
    pid: Pid,
    successes: u64,
    /// Successes whose first token came after the task's SLO.
    slow: u64,
    errors: u64,
    /// Written off for slowness by the intervals closed so far ([`slowness`]).
    verdict: SlowVerdict,
}

/// The availability of every tracked provider. Pure: outcomes in, availabilities out.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    cfg: PidConfig,
    rule: SlowRule,
    providers: BTreeMap<BackendName, Provider>,
}

impl Availability {
    pub fn new(cfg: PidConfig) -> Self {
        Availability { cfg, rule: SlowRule::default(), providers: BTreeMap::new() }
    }

    /// The same, with this slowness rule ([`slowness`]) instead of the default.
    pub fn with_slow_rule(cfg: PidConfig, rule: SlowRule) -> Self {
        Availability { cfg, rule, providers: BTreeMap::new() }
    }

    /// An availability loop as the `balancing` keys describe it.
    pub fn from_settings(b: &crate::config::BalancingConfig) -> Self {
        Availability::with_slow_rule(PidConfig::from_settings(b), SlowRule::from_settings(b))
    }

    pub fn config(&self) -> &PidConfig {
        &self.cfg
    }

    fn provider(&mut self, backend: &str) -> &mut Provider {
        if !self.providers.contains_key(backend) {
            let fresh = Provider {
                pid: Pid::new(&self.cfg),
                successes: 0,
                slow: 0,
                errors: 0,
                verdict: SlowVerdict::default(),
            };
            self.providers.insert(BackendName::from(backend), fresh);
        }
        self.providers.get_mut(backend).expect("inserted above")
    }

    /// Start tracking a provider (at availability 1) so that idle intervals step it too.
    pub fn track(&mut self, backend: &str) {
        self.provider(backend);
    }

    /// Stop tracking providers for which `keep` is false (removed from the config).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.providers.retain(|name, _| keep(name));
    }

    /// Count one outcome. `success: false` only for errors that count against the backend.
    pub fn record(&mut self, backend: &str, success: bool) {
        if success {
            self.record_counts(backend, 1, 0);
        } else {
            self.record_counts(backend, 0, 1);
        }
    }

    /// Count an answer that reached its first token; `slow`: later than its task's SLO.
    pub(crate) fn record_served(&mut self, backend: &str, slow: bool) {
        self.record_counts(backend, 1, 0);
        if slow {
            let p = self.provider(backend);
            p.slow = p.slow.saturating_add(1);
        }
    }

    /// Count a failure of this class; classes that do not count against the backend (client
    /// mistakes) are ignored entirely.
    pub(crate) fn record_failure(&mut self, backend: &str, class: ErrorClass) {
        if class.counts_against_backend() {
            self.record_counts(backend, 0, 1);
        }
    }

    /// Count many outcomes at once.
    pub(crate) fn record_counts(&mut self, backend: &str, successes: u64, errors: u64) {
        let p = self.provider(backend);
        p.successes = p.successes.saturating_add(successes);
        p.errors = p.errors.saturating_add(errors);
    }

    /// Close the interval: step every tracked provider with its counts (zero for idle ones),
    /// reset the counts, and return every availability. A zero `dt` changes nothing (the
    /// counts carry over to the next tick).
    pub fn tick(&mut self, dt: Duration) -> BTreeMap<BackendName, f64> {
        let secs = dt.as_secs_f64();
        let (cfg, rule) = (self.cfg, self.rule);
        for p in self.providers.values_mut() {
            if secs > 0.0 {
                let e = latency_aware_score(p.successes, p.slow, p.errors, &cfg);
                p.pid.step(e, secs, &cfg);
                p.verdict.close(p.successes, p.slow, p.errors, &rule);
                p.successes = 0;
                p.slow = 0;
                p.errors = 0;
            }
        }
        self.all()
    }

    /// A provider's current availability; 1 for one never seen (the starting value).
    pub fn get(&self, backend: &str) -> f64 {
        self.providers.get(backend).map_or(1.0, |p| p.pid.output)
    }

    /// What a snapshot shows: 0 while the open interval is [`slowness::slow_now`], else
    /// [`Availability::get`].
    pub(crate) fn effective(&self, backend: &str) -> f64 {
        match self.providers.get(backend) {
            Some(p) if slowness::slow_now(p.successes, p.slow, p.errors, &self.rule) => 0.0,
            Some(p) => p.pid.output,
            None => 1.0,
        }
    }

    /// Written off for slowness: the open interval is slow now, or the closed ones marked it
    /// ([`SlowVerdict`]). False for a provider never seen.
    pub fn slow(&self, backend: &str) -> bool {
        self.providers
            .get(backend)
            .is_some_and(|p| p.verdict.slow || slowness::slow_now(p.successes, p.slow, p.errors, &self.rule))
    }

    /// Every tracked provider's current availability.
    pub fn all(&self) -> BTreeMap<BackendName, f64> {
        self.providers.iter().map(|(name, p)| (name.clone(), p.pid.output)).collect()
    }

    /// A provider's controller state, for display and tests.
    pub fn pid(&self, backend: &str) -> Option<&Pid> {
        self.providers.get(backend).map(|p| &p.pid)
    }
}

impl PidConfig {
    /// The PID settings the `balancing` keys describe (anti-windup and normalisation at their
    /// defaults).
    pub(crate) fn from_settings(b: &crate::config::BalancingConfig) -> PidConfig {
        PidConfig {
            gains: PidGains { kp: b.kp, ki: b.ki, kd: b.kd },
            error_weight: b.error_weight,
            interval: Duration::from_secs(b.interval_secs),
            slow_weight: b.slow_weight,
            ..PidConfig::default()
        }
    }
}

#[cfg(test)]
#[path = "availability_tests.rs"]
mod tests;
