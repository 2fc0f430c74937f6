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

use crate::canonical::ErrorClass;
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
pub fn score(successes: u64, errors: u64, error_weight: f64) -> f64 {
    successes as f64 - error_weight * errors as f64 + 1.0
}

/// The score divided by `requests + prior_requests`: what the controller holds at zero.
pub fn normalised_score(successes: u64, errors: u64, cfg: &PidConfig) -> f64 {
    let requests = successes as f64 + errors as f64;
    score(successes, errors, cfg.error_weight) / (requests + cfg.prior_requests.max(1e-9))
}

/// [`normalised_score`] less `S` for each slow answer (already counted among `successes`),
/// on the same denominator.
pub fn latency_aware_score(successes: u64, slow: u64, errors: u64, cfg: &PidConfig) -> f64 {
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
    providers: BTreeMap<String, Provider>,
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
            self.providers.insert(backend.to_string(), fresh);
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
    pub fn record_served(&mut self, backend: &str, slow: bool) {
        self.record_counts(backend, 1, 0);
        if slow {
            let p = self.provider(backend);
            p.slow = p.slow.saturating_add(1);
        }
    }

    /// Count a failure of this class; classes that do not count against the backend (client
    /// mistakes) are ignored entirely.
    pub fn record_failure(&mut self, backend: &str, class: ErrorClass) {
        if class.counts_against_backend() {
            self.record_counts(backend, 0, 1);
        }
    }

    /// Count many outcomes at once.
    pub fn record_counts(&mut self, backend: &str, successes: u64, errors: u64) {
        let p = self.provider(backend);
        p.successes = p.successes.saturating_add(successes);
        p.errors = p.errors.saturating_add(errors);
    }

    /// Close the interval: step every tracked provider with its counts (zero for idle ones),
    /// reset the counts, and return every availability. A zero `dt` changes nothing (the
    /// counts carry over to the next tick).
    pub fn tick(&mut self, dt: Duration) -> BTreeMap<String, f64> {
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
    pub fn effective(&self, backend: &str) -> f64 {
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
    pub fn all(&self) -> BTreeMap<String, f64> {
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
    pub fn from_settings(b: &crate::config::BalancingConfig) -> PidConfig {
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
mod tests {
    use super::*;

    const I: f64 = 30.0; // one nominal interval, seconds

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[track_caller]
    fn assert_close(got: f64, want: f64) {
        assert!(close(got, want), "got {got}, want {want}");
    }

    fn step(pid: &mut Pid, successes: u64, errors: u64, cfg: &PidConfig) -> f64 {
        pid.step(normalised_score(successes, errors, cfg), I, cfg)
    }

    #[test]
    fn score_and_its_normalisation() {
        let cfg = PidConfig::default();
        assert_eq!(score(0, 0, 200.0), 1.0);
        assert_eq!(score(1000, 0, 200.0), 1001.0);
        assert_eq!(score(19, 1, 200.0), -180.0);
        assert_eq!(score(995, 5, 200.0), -4.0);
        // Idle: the bias over the prior. 5 %: −180 / 24. Healthy: 97 / 100.
        assert_eq!(normalised_score(0, 0, &cfg), 0.25);
        assert_eq!(normalised_score(19, 1, &cfg), -7.5);
        assert_eq!(normalised_score(96, 0, &cfg), 0.97);
        // The same error rate gives about the same signal at any volume.
        let low = normalised_score(190, 10, &cfg);
        let high = normalised_score(19_000, 1_000, &cfg);
        assert!((low - high).abs() < 0.2, "{low} vs {high}");
        // The zero crossing is the target: 1 error per 201 requests, less the bias.
        assert_eq!(normalised_score(199, 1, &cfg), 0.0);
    }

    #[test]
    fn five_percent_errors_drop_availability_within_three_intervals() {
        let cfg = PidConfig::default();
        let mut pid = Pid::new(&cfg);
        assert_eq!(pid.output, 1.0);
        // e = −7.5: integral 1 − 0.05·7.5 = 0.625, output 0.625 − 0.02·7.5 = 0.475.
        assert_close(step(&mut pid, 19, 1, &cfg), 0.475);
        assert_close(pid.integral, 0.625);
        // integral 0.25, output 0.1.
        assert_close(step(&mut pid, 19, 1, &cfg), 0.1);
        assert_close(pid.integral, 0.25);
        // integral −0.125 → 0, output −0.15 → 0.
        assert_eq!(step(&mut pid, 19, 1, &cfg), 0.0);
        assert_eq!(pid.integral, 0.0);
        // At 1000 requests per interval: e = −9049/1004.
        let mut pid = Pid::new(&cfg);
        let e = -9049.0 / 1004.0;
        assert_close(step(&mut pid, 950, 50, &cfg), 1.0 + 0.05 * e + 0.02 * e);
        assert!((pid.output - 0.369).abs() < 1e-3, "{}", pid.output);
        assert_eq!(step(&mut pid, 950, 50, &cfg), 0.0);
        // A hard outage: zero in one interval.
        let mut pid = Pid::new(&cfg);
        assert_eq!(step(&mut pid, 0, 10, &cfg), 0.0);
    }

    #[test]
    fn healthy_traffic_saturates_at_one_and_banks_no_credit() {
        let cfg = PidConfig::default();
        let mut pid = Pid::new(&cfg);
        for _ in 0..1000 {
            assert_eq!(step(&mut pid, 1000, 0, &cfg), 1.0);
            assert_eq!(pid.integral, 1.0);
        }
        // Under the target (1 error in 400) is still healthy.
        assert_eq!(step(&mut pid, 399, 1, &cfg), 1.0);
        // After the long healthy spell the response to errors is that of a fresh controller.
        let mut fresh = Pid::new(&cfg);
        assert_eq!(step(&mut pid, 19, 1, &cfg), step(&mut fresh, 19, 1, &cfg));
        assert_close(pid.output, 0.475);
    }

    #[test]
    fn idle_provider_climbs_back_from_zero_through_the_bias() {
        let cfg = PidConfig::default();
        let mut pid = Pid::new(&cfg);
        step(&mut pid, 0, 10, &cfg);
        assert_eq!((pid.output, pid.integral), (0.0, 0.0));
        // Each idle interval: e = 1/4, integral += 0.0125, output = integral + 0.005.
        assert_close(step(&mut pid, 0, 0, &cfg), 0.0175);
        let mut intervals = 1;
        let mut passed = Vec::new();
        for threshold in [0.1, 0.5] {
            while pid.output <= threshold {
                step(&mut pid, 0, 0, &cfg);
                intervals += 1;
            }
            passed.push(intervals);
        }
        assert_eq!(passed, [8, 40]); // 4 and 20 minutes at 30 s
        assert_close(pid.output, 40.0 * 0.0125 + 0.005);
        while pid.output < 1.0 {
            step(&mut pid, 0, 0, &cfg);
            intervals += 1;
        }
        assert_eq!(intervals, 80);
        // Healthy traffic climbs faster: e = 0.97 gives integral 0.0485, output 0.0679.
        let mut pid = Pid::new(&cfg);
        step(&mut pid, 0, 10, &cfg);
        assert_close(step(&mut pid, 96, 0, &cfg), 0.0485 + 0.0194);
    }

    #[test]
    fn a_long_outage_does_not_wind_up_the_integral() {
        let cfg = PidConfig::default();
        let recover = |outage_intervals: usize| {
            let mut pid = Pid::new(&cfg);
            for _ in 0..outage_intervals {
                step(&mut pid, 0, 50, &cfg);
            }
            assert_eq!(pid.integral, 0.0);
            (0..10).map(|_| step(&mut pid, 0, 0, &cfg)).collect::<Vec<_>>()
        };
        // An unclamped integral would sit at about −0.05 × 185 × 1000 ≈ −9 300 after 1000
        // intervals and need ~740 000 idle intervals to come back; clamped, recovery after
        // 1000 intervals of outage is identical to recovery after one.
        let after_one = recover(1);
        assert_eq!(after_one, recover(1000));
        assert_close(after_one[9], 10.0 * 0.0125 + 0.005);
    }

    #[test]
    fn derivative_term_and_elapsed_time() {
        let cfg = PidConfig { gains: PidGains { kp: 0.02, ki: 0.02, kd: 0.01 }, ..PidConfig::default() };
        let mut pid = Pid::new(&cfg);
        // Idle, first step: no derivative yet; integral 1.005 → 1; output 1.005 → 1.
        assert_eq!(step(&mut pid, 0, 0, &cfg), 1.0);
        // e: 0.25 → −7.5: integral 0.85, P −0.15, D 0.01·(−7.75) = −0.0775.
        assert_close(step(&mut pid, 19, 1, &cfg), 0.6225);
        // Same signal: D = 0; integral 0.7, P −0.15.
        assert_close(step(&mut pid, 19, 1, &cfg), 0.55);
        // Back to idle: integral 0.705, P 0.005, D +0.0775.
        assert_close(step(&mut pid, 0, 0, &cfg), 0.7875);
        assert_close(step(&mut pid, 0, 0, &cfg), 0.715);

        // One late tick of two intervals integrates as much as two on-time ones.
        let cfg = PidConfig::default();
        let mut late = Pid::new(&cfg);
        assert_close(late.step(-7.5, 2.0 * I, &cfg), 0.25 - 0.15);
        assert_close(late.integral, 0.25);
        // No elapsed time, or NaN: nothing moves.
        let before = late;
        assert_eq!(late.step(-100.0, 0.0, &cfg), before.output);
        assert_eq!(late.step(f64::NAN, I, &cfg), before.output);
        assert_eq!(late, before);
    }

    #[test]
    fn availability_counts_per_provider_and_ticks_idle_ones() {
        let mut av = Availability::new(PidConfig::default());
        av.track("idle");
        for _ in 0..19 {
            av.record("flaky", true);
        }
        av.record("flaky", false);
        // Client mistakes are not counted at all; overload is an error.
        av.record_failure("flaky", ErrorClass::InvalidRequest);
        av.record_failure("flaky", ErrorClass::ContextLength);
        av.record_counts("busy", 500, 0);
        // A zero dt changes nothing and keeps the counts.
        let unchanged = av.tick(Duration::ZERO);
        assert_eq!(unchanged.values().copied().collect::<Vec<_>>(), [1.0, 1.0, 1.0]);
        let out = av.tick(Duration::from_secs(30));
        assert_eq!(out.len(), 3);
        assert_close(out["flaky"], 0.475);
        assert_eq!(out["idle"], 1.0);
        assert_eq!(out["busy"], 1.0);
        assert_close(av.get("flaky"), 0.475);
        assert_eq!(av.get("never-seen"), 1.0);
        // Counts were reset: the next tick is idle for everyone (integral 0.6375, +0.005).
        let out = av.tick(Duration::from_secs(30));
        assert_close(out["flaky"], 0.6425);
        av.record_failure("flaky", ErrorClass::Overloaded);
        av.record_failure("flaky", ErrorClass::RateLimited);
        assert_eq!(av.tick(Duration::from_secs(30))["flaky"], 0.0);
        av.retain(|name| name != "idle");
        assert_eq!(av.all().keys().collect::<Vec<_>>(), ["busy", "flaky"]);
        assert_eq!(av.pid("flaky").unwrap().integral, 0.0);
    }

    #[test]
    fn slow_answers_lower_availability_smoothly_and_it_comes_back() {
        let cfg = PidConfig::default();
        // No slow answers: the plain score. 96 in time: 97 / 100.
        assert_eq!(latency_aware_score(96, 0, 0, &cfg), 0.97);
        // 4 of 96 slow: (97 − 20 × 4) / 100 = 0.17, still positive (about 4 % slow).
        assert_close(latency_aware_score(96, 4, 0, &cfg), 0.17);
        // 6 of 96 slow: (97 − 120) / 100 = −0.23: above the 5 % line, it starts to give way.
        assert_close(latency_aware_score(96, 6, 0, &cfg), -0.23);
        // Everything slow: (97 − 1920) / 100 = −18.23.
        assert_close(latency_aware_score(96, 96, 0, &cfg), -18.23);
        // Slow counts only among successes; S = 0 turns the term off.
        assert_eq!(latency_aware_score(10, 50, 0, &cfg), latency_aware_score(10, 10, 0, &cfg));
        let off = PidConfig { slow_weight: 0.0, ..cfg };
        assert_eq!(latency_aware_score(96, 96, 0, &off), 0.97);

        let mut av = Availability::new(cfg);
        // Slightly slow (6 %): e = −0.23, integral 1 − 0.05 × 0.23 = 0.9885, output 0.9839.
        for i in 0..96 {
            av.record_served("slowish", i < 6);
        }
        assert_close(av.tick(Duration::from_secs(30))["slowish"], 0.9885 - 0.02 * 0.23);
        // All slow: e = −18.23 → integral 0.9885 − 0.9115 = 0.077, output 0.077 − 0.3646 → 0.
        for _ in 0..96 {
            av.record_served("slowish", true);
        }
        assert_eq!(av.tick(Duration::from_secs(30))["slowish"], 0.0);
        assert_close(av.pid("slowish").unwrap().integral, 0.9885 - 0.05 * 18.23);
        // Answers in time again (20 a probe interval): e = 21 / 24 = 0.875, integral + 0.04375,
        // output + 0.0175 on top.
        for _ in 0..20 {
            av.record_served("slowish", false);
        }
        let integral = 0.9885 - 0.05 * 18.23 + 0.05 * 0.875;
        assert_close(av.tick(Duration::from_secs(30))["slowish"], integral + 0.02 * 0.875);
    }

    #[test]
    fn a_slow_open_interval_shows_at_zero_and_marks_the_provider_until_answers_are_in_time() {
        let mut av = Availability::new(PidConfig::default());
        av.track("anthropic");
        av.track("openai");
        assert_eq!((av.effective("anthropic"), av.slow("anthropic")), (1.0, false));
        // 3 in time, 1 late: PID says 1, the open interval is not slow (1 < k = 2).
        for slow in [false, false, false, true] {
            av.record_served("anthropic", slow);
        }
        assert_eq!((av.effective("anthropic"), av.slow("anthropic")), (1.0, false));
        // 3 in time, 3 late: half of 6 with k = 2: at 0 at once, before any tick; the PID
        // output has not moved.
        for _ in 0..2 {
            av.record_served("anthropic", true);
        }
        assert_eq!((av.effective("anthropic"), av.slow("anthropic")), (0.0, true));
        assert_eq!(av.get("anthropic"), 1.0);
        // openai rate-limited: 20 × 429 and 4 answers, 2 of them late: not slow.
        for _ in 0..20 {
            av.record_failure("openai", ErrorClass::RateLimited);
        }
        for slow in [true, true, false, false] {
            av.record_served("openai", slow);
        }
        assert_eq!((av.effective("openai"), av.slow("openai")), (1.0, false));
        // The tick: anthropic's e = (7 − 60) / 10 = −5.3 → integral 0.735, output 0.629;
        // marked slow. openai's errors write it off, unmarked.
        let out = av.tick(Duration::from_secs(30));
        assert_close(out["anthropic"], 1.0 - 0.05 * 5.3 - 0.02 * 5.3);
        assert_close(av.effective("anthropic"), 1.0 - 0.07 * 5.3);
        assert!(av.slow("anthropic"));
        assert_eq!((av.effective("openai"), av.slow("openai")), (0.0, false));
        // Idle: the mark stays; 2 in time of 3: it goes.
        av.tick(Duration::from_secs(30));
        assert!(av.slow("anthropic"));
        for slow in [false, true, false] {
            av.record_served("anthropic", slow);
        }
        assert!(av.slow("anthropic"), "the open interval does not clear a mark");
        av.tick(Duration::from_secs(30));
        assert!(!av.slow("anthropic"));
        // k = 0 turns it off: 5 late of 5 show the PID output.
        let mut off =
            Availability::with_slow_rule(PidConfig::default(), SlowRule { min_slow: 0, share: 0.5 });
        for _ in 0..5 {
            off.record_served("anthropic", true);
        }
        assert_eq!((off.effective("anthropic"), off.slow("anthropic")), (1.0, false));
        assert_eq!(off.effective("never-seen"), 1.0);
    }
}
