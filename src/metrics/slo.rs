//! Each task's SLOs as SREs read them: TTFT attainment and availability over sliding windows
//! (5 m, 30 m, 1 h, 6 h), the error-budget burn rate of each, and TTFT percentiles over the
//! last five minutes. Kept in process from request outcomes in per-minute buckets; pure (the
//! caller passes the time), so windows and burn rates can be tested exactly.
//!
//! A request meets its TTFT SLO when its first token came within `slo.ttft_ms`; a request that
//! got no first token (failed, shed) misses it. It counts against availability when it failed
//! for a reason that is not the client's own, or was shed.

use std::collections::VecDeque;

use hdrhistogram::Histogram;

/// The windows burn rates are reported over, with their label.
pub(crate) const WINDOWS: [(&str, i64); 4] = [("5m", 300), ("30m", 1_800), ("1h", 3_600), ("6h", 21_600)];

/// How many recent minutes keep a TTFT histogram (for percentiles over five minutes).
const HISTOGRAM_MINUTES: i64 = 5;

/// One request, as the SLO windows see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Observation {
    /// Unix seconds at the end of the request.
    pub at_secs: i64,
    /// Time to first token; `None` when none came.
    pub ttft_ms: Option<u64>,
    /// Counts against availability.
    pub error: bool,
}

#[derive(Debug)]
struct Minute {
    /// Unix minute (seconds ÷ 60).
    index: i64,
    total: u64,
    ttft_good: u64,
    errors: u64,
    /// TTFT in milliseconds; only for the last few minutes.
    ttft: Option<Histogram<u64>>,
}

/// Counts over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct WindowStats {
    pub total: u64,
    pub ttft_good: u64,
    pub errors: u64,
}

impl WindowStats {
    /// Share of requests that met the TTFT SLO (1 with no requests: nothing was missed).
    pub(crate) fn ttft_attainment(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            self.ttft_good as f64 / self.total as f64
        }
    }

    /// Share of requests that did not fail.
    pub fn availability(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            1.0 - self.errors as f64 / self.total as f64
        }
    }
}

/// How fast the error budget of `objective` burns at `attainment`: 1 uses it up exactly over
/// the SLO period, 14.4 uses a 30-day budget in about two days.
pub(crate) fn burn_rate(attainment: f64, objective: f64) -> f64 {
    let budget = 1.0 - objective;
    if budget <= 0.0 {
        return if attainment >= 1.0 { 0.0 } else { f64::INFINITY };
    }
    (1.0 - attainment) / budget
}

/// One task's SLO windows.
#[derive(Debug)]
pub(crate) struct TaskSlo {
    ttft_target_ms: u64,
    minutes: VecDeque<Minute>,
}

impl TaskSlo {
    pub fn new(ttft_target_ms: u64) -> Self {
        TaskSlo { ttft_target_ms, minutes: VecDeque::new() }
    }

    /// A new target (config reload) applies to requests from now on.
    pub(crate) fn set_target(&mut self, ttft_target_ms: u64) {
        self.ttft_target_ms = ttft_target_ms;
    }

    fn minute(&mut self, index: i64) -> &mut Minute {
        if self.minutes.back().is_none_or(|m| m.index < index) {
            self.minutes.push_back(Minute { index, total: 0, ttft_good: 0, errors: 0, ttft: None });
        }
        let longest = WINDOWS[WINDOWS.len() - 1].1 / 60;
        while self.minutes.front().is_some_and(|m| m.index <= index - longest) {
            self.minutes.pop_front();
        }
        for m in self.minutes.iter_mut().filter(|m| m.index <= index - HISTOGRAM_MINUTES) {
            m.ttft = None;
        }
        // A late observation (clock step) lands in the newest minute rather than reopening one.
        self.minutes.back_mut().expect("a minute was just ensured")
    }

    pub fn record(&mut self, o: Observation) {
        let target = self.ttft_target_ms;
        let m = self.minute(o.at_secs.div_euclid(60));
        m.total += 1;
        m.errors += u64::from(o.error);
        if let Some(ttft) = o.ttft_ms {
            m.ttft_good += u64::from(ttft <= target);
            let h = m.ttft.get_or_insert_with(|| {
                Histogram::new_with_bounds(1, 3_600_000, 2).expect("static histogram bounds are valid")
            });
            let _ = h.record(ttft.clamp(1, 3_600_000));
        }
    }

    /// Counts over the `secs` seconds before `now_secs` (whole minutes, the current one
    /// included).
    pub fn window(&self, now_secs: i64, secs: i64) -> WindowStats {
        let first = now_secs.div_euclid(60) - secs / 60 + 1;
        self.minutes.iter().filter(|m| m.index >= first).fold(WindowStats::default(), |w, m| WindowStats {
            total: w.total + m.total,
            ttft_good: w.ttft_good + m.ttft_good,
            errors: w.errors + m.errors,
        })
    }

    /// TTFT quantiles (0–1) in milliseconds over the last five minutes; `None` without data.
    pub(crate) fn ttft_quantiles(&self, now_secs: i64, quantiles: &[f64]) -> Vec<Option<u64>> {
        let first = now_secs.div_euclid(60) - HISTOGRAM_MINUTES + 1;
        let mut merged: Option<Histogram<u64>> = None;
        for h in self.minutes.iter().filter(|m| m.index >= first).filter_map(|m| m.ttft.as_ref()) {
            match &mut merged {
                Some(all) => {
                    let _ = all.add(h);
                }
                None => merged = Some(h.clone()),
            }
        }
        quantiles.iter().map(|q| merged.as_ref().map(|h| h.value_at_quantile(*q))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000; // a minute boundary

    fn obs(at: i64, ttft: Option<u64>, error: bool) -> Observation {
        Observation { at_secs: at, ttft_ms: ttft, error }
    }

    #[test]
    fn windows_count_only_their_minutes() {
        let mut s = TaskSlo::new(500);
        // Two hours ago: 10 slow requests. Twenty minutes ago: 10 failures. Now: 80 fast.
        for _ in 0..10 {
            s.record(obs(NOW - 7_200, Some(900), false));
        }
        for _ in 0..10 {
            s.record(obs(NOW - 1_200, None, true));
        }
        for _ in 0..80 {
            s.record(obs(NOW + 5, Some(120), false));
        }
        let w5 = s.window(NOW + 5, 300);
        assert_eq!((w5.total, w5.ttft_good, w5.errors), (80, 80, 0));
        let w30 = s.window(NOW + 5, 1_800);
        assert_eq!((w30.total, w30.errors), (90, 10));
        assert!((w30.availability() - 8.0 / 9.0).abs() < 1e-12);
        let w6h = s.window(NOW + 5, 21_600);
        assert_eq!((w6h.total, w6h.ttft_good), (100, 80));
        assert_eq!(s.window(NOW + 5, 3_600).ttft_attainment(), 80.0 / 90.0);
    }

    #[test]
    fn old_minutes_are_dropped_and_late_ones_kept() {
        let mut s = TaskSlo::new(500);
        s.record(obs(NOW - 30_000, Some(10), false));
        s.record(obs(NOW, Some(10), false));
        assert_eq!(s.minutes.len(), 1, "beyond six hours is forgotten");
        s.record(obs(NOW - 120, Some(10), false));
        assert_eq!(s.window(NOW, 300).total, 2);
    }

    #[test]
    fn burn_rates() {
        assert_eq!(burn_rate(1.0, 0.99), 0.0);
        assert!((burn_rate(0.99, 0.99) - 1.0).abs() < 1e-9);
        assert!((burn_rate(0.856, 0.99) - 14.4).abs() < 1e-9);
        assert_eq!(burn_rate(0.5, 1.0), f64::INFINITY);
        assert_eq!(WindowStats::default().ttft_attainment(), 1.0);
    }

    #[test]
    fn quantiles_over_five_minutes() {
        let mut s = TaskSlo::new(500);
        assert_eq!(s.ttft_quantiles(NOW, &[0.5]), vec![None]);
        for i in 1..=100 {
            s.record(obs(NOW - 60 * (i % 3), Some(i as u64 * 10), false));
        }
        s.record(obs(NOW - 600, Some(999_999), false)); // ten minutes ago: not in the five
        let q = s.ttft_quantiles(NOW, &[0.5, 0.95, 0.99]);
        // Two significant digits: within a few per cent.
        let near = |v: Option<u64>, want: u64| v.is_some_and(|v| v.abs_diff(want) <= want * 3 / 100);
        assert!(near(q[0], 500) && near(q[1], 950) && near(q[2], 990), "{q:?}");
    }
}
