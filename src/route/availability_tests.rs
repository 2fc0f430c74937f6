//! The availability score and its PID, with exact numbers.

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
    let mut off = Availability::with_slow_rule(PidConfig::default(), SlowRule { min_slow: 0, share: 0.5 });
    for _ in 0..5 {
        off.record_served("anthropic", true);
    }
    assert_eq!((off.effective("anthropic"), off.slow("anthropic")), (1.0, false));
    assert_eq!(off.effective("never-seen"), 1.0);
}
