//! The retry budget: retries may be at most a fixed share of requests, plus a small floor per
//! second, so that a failing upstream cannot turn every request into several (a retry storm).
//!
//! A token bucket: each request deposits `ratio`, time deposits `min_per_sec`, each retry
//! withdraws one. Pure state with the time passed in.

use tokio::time::Instant;

#[derive(Debug, Clone)]
pub(crate) struct RetryBudget {
    ratio: f64,
    min_per_sec: f64,
    balance: f64,
    cap: f64,
    last: Instant,
}

impl RetryBudget {
    pub fn new(ratio: f64, min_per_sec: f64, now: Instant) -> Self {
        // Ten seconds of floor, or a hundred requests' worth, whichever is more.
        let cap = (min_per_sec * 10.0).max(ratio * 100.0).max(1.0);
        RetryBudget { ratio, min_per_sec, balance: cap, cap, last: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.balance = (self.balance + elapsed * self.min_per_sec).min(self.cap);
    }

    /// A new request arrived.
    pub(crate) fn deposit(&mut self, now: Instant) {
        self.refill(now);
        self.balance = (self.balance + self.ratio).min(self.cap);
    }

    /// May this request retry once more? Takes one retry's worth when it may.
    pub(crate) fn try_withdraw(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.balance >= 1.0 {
            self.balance -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn retries_stay_a_bounded_share_of_requests() {
        let t0 = Instant::now();
        let mut budget = RetryBudget::new(0.2, 0.0, t0);
        // Drain the initial allowance (20 retries).
        let mut initial = 0;
        while budget.try_withdraw(t0) {
            initial += 1;
        }
        assert_eq!(initial, 20);
        // Then 1000 requests that all want to retry: about 200 may.
        let mut allowed = 0;
        for _ in 0..1000 {
            budget.deposit(t0);
            if budget.try_withdraw(t0) {
                allowed += 1;
            }
        }
        assert!((199..=200).contains(&allowed), "{allowed}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_refills_with_time() {
        let t0 = Instant::now();
        let mut budget = RetryBudget::new(0.0, 2.0, t0);
        while budget.try_withdraw(t0) {}
        assert!(!budget.try_withdraw(t0 + Duration::from_millis(400)));
        assert!(budget.try_withdraw(t0 + Duration::from_millis(600)));
        assert!(!budget.try_withdraw(t0 + Duration::from_millis(600)));
    }
}
