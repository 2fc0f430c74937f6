//! An amount per second over the last minute, as a sliding window of twelve 5-second buckets:
//! the arithmetic behind `spillway_pool_spilled_tokens_per_second`, apart from any clock (every
//! call is given its time) so that its tests are exact. It reads exactly 0 once a full window
//! has passed without an amount, unlike a decayed rate, which only tends to 0.

use std::time::Duration;

use tokio::time::Instant;

/// The width of one bucket.
const BUCKET: Duration = Duration::from_secs(5);
/// Buckets in the window: the one filling now and the eleven before it.
const BUCKETS: usize = 12;

/// Amounts recorded in the last minute, by 5-second bucket since `origin`.
#[derive(Debug, Clone)]
pub(crate) struct RateWindow {
    origin: Instant,
    /// Per slot: the number of the bucket it holds (counted from `origin`) and its amount.
    slots: [(u64, u64); BUCKETS],
}

impl RateWindow {
    /// A window with nothing recorded; buckets are counted from `origin`.
    pub(crate) fn new(origin: Instant) -> RateWindow {
        RateWindow { origin, slots: [(0, 0); BUCKETS] }
    }

    /// The bucket `at` falls in, and how far into it (before `origin`: the first bucket).
    fn bucket(&self, at: Instant) -> (u64, Duration) {
        let since = at.saturating_duration_since(self.origin);
        let (n, into) = (since.as_nanos() / BUCKET.as_nanos(), since.as_nanos() % BUCKET.as_nanos());
        (n as u64, Duration::from_nanos(into as u64))
    }

    /// Add `amount` at `at`. An amount older than the window is dropped.
    pub(crate) fn record(&mut self, at: Instant, amount: u64) {
        let (n, _) = self.bucket(at);
        let slot = &mut self.slots[(n % BUCKETS as u64) as usize];
        match slot.0.cmp(&n) {
            std::cmp::Ordering::Equal => slot.1 += amount,
            std::cmp::Ordering::Less => *slot = (n, amount),
            // The slot holds a bucket at least a window later: `at` is out of the window.
            std::cmp::Ordering::Greater => {}
        }
    }

    /// The amount per second at `now`: what the last eleven whole buckets and the one filling
    /// now hold, over the time they span (55 s, plus how far into its bucket `now` is). A steady
    /// rate reads exactly; a window with nothing in it reads 0.
    pub(crate) fn rate(&self, now: Instant) -> f64 {
        let (n, into) = self.bucket(now);
        let held: u64 = self
            .slots
            .iter()
            .filter(|(bucket, _)| *bucket <= n && n - bucket < BUCKETS as u64)
            .map(|(_, amount)| amount)
            .sum();
        let span = BUCKET * (BUCKETS as u32 - 1) + into;
        held as f64 / span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn nothing_recorded_reads_zero() {
        let t0 = Instant::now();
        let w = RateWindow::new(t0);
        for s in [0.0, 3.0, 60.0, 3600.0] {
            assert_eq!(w.rate(t0 + secs(s)), 0.0);
        }
    }

    #[test]
    fn an_amount_counts_over_the_span_of_the_window() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        w.record(t0 + secs(1.0), 1100);
        // At 5 s a new bucket starts: the window spans the 55 s before it.
        assert_eq!(w.rate(t0 + secs(5.0)), 20.0);
        // 1 s into the bucket: 56 s.
        assert_eq!(w.rate(t0 + secs(6.0)), 1100.0 / 56.0);
        // Its bucket is still in the window at 59.9 s, and gone at 60 s.
        assert_eq!(w.rate(t0 + secs(59.0)), 1100.0 / 59.0);
        assert_eq!(w.rate(t0 + secs(60.0)), 0.0);
    }

    #[test]
    fn a_steady_rate_reads_exactly_at_any_moment() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        // 300 tokens every second, for two minutes.
        for s in 0..120 {
            w.record(t0 + secs(f64::from(s)), 300);
        }
        // Recorded up to 119 s; at 120 s the window is the 55 s from 65 s.
        assert_eq!(w.rate(t0 + secs(120.0)), 300.0);
    }

    #[test]
    fn the_rate_decays_to_zero_once_spilling_stops() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        for s in 0..60 {
            w.record(t0 + secs(f64::from(s)), 100);
        }
        // Spilling stops at 60 s; at 90 s only the buckets from 35 s to 59 s are left (25 s of
        // them), over 55 s; at 120 s none.
        assert_eq!(w.rate(t0 + secs(60.0)), 100.0);
        assert_eq!(w.rate(t0 + secs(90.0)), 2500.0 / 55.0);
        assert_eq!(w.rate(t0 + secs(120.0)), 0.0);
        assert_eq!(w.rate(t0 + secs(7200.0)), 0.0);
    }

    #[test]
    fn a_bucket_reused_a_window_later_starts_afresh_and_late_amounts_are_dropped() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        w.record(t0 + secs(2.0), 500);
        // Bucket 12 takes bucket 0's slot.
        w.record(t0 + secs(61.0), 550);
        assert_eq!(w.rate(t0 + secs(65.0)), 10.0);
        // An amount from bucket 0, arriving late, is out of the window: dropped, not added.
        w.record(t0 + secs(3.0), 1000);
        assert_eq!(w.rate(t0 + secs(65.0)), 10.0);
        // One before the window's origin counts in its first bucket.
        let mut early = RateWindow::new(t0 + secs(1.0));
        early.record(t0, 550);
        assert_eq!(early.rate(t0 + secs(6.0)), 10.0);
    }
}
