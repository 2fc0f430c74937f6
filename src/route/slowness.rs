//! A fast slowness signal for hosted providers, beside the PID availability of
//! [`crate::route::availability`].
//!
//! The PID score sees a slowdown only when its interval closes (30 s by default), and a
//! provider written off for slowness climbs back through the bias, so projects whose sticky
//! chain draws it first at its small bias weight send it a burst of requests that arrive
//! late. Two rules, both on counts the availability loop already keeps, close those gaps:
//!
//! - **Slow now** ([`slow_now`]): while the interval still open has at least `min_slow`
//!   slow answers (first token after the task's SLO) and they are at least `share` of its
//!   answers (errors included), the snapshot shows the provider at availability 0. Each
//!   snapshot (each scrape) sees it, so detection takes a couple of late answers, not an
//!   interval. A rate-limited provider whose answers come in time never shows it: its 429s
//!   count among the answers, not among the slow ones.
//! - **Written off for slowness** ([`SlowVerdict::close`]): when an interval closes, a
//!   provider is marked slow if that interval was slow by the same rule, stays marked while
//!   slow answers are at least `share` of its answers (fewer than `min_slow` of them keep
//!   the mark), loses it when they are not, and keeps it through idle intervals. Planning
//!   puts a hosted backend that is down *and* marked slow after the local pool for the
//!   projects outside that pool's share (`route::sticky`), so their chains no longer draw it
//!   at its bias weight while it is late; a provider down for errors (rate limits, an
//!   outage) keeps its place.
//!
//! Pure: counts in, verdicts out; no clock, no I/O.

/// The settings of both rules (`balancing.slow_signal`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowRule {
    /// Slow answers the open interval needs before the provider shows as slow; 0 turns both
    /// rules off.
    pub min_slow: u64,
    /// The share of the interval's answers (successes and errors) that must be slow.
    pub share: f64,
}

impl Default for SlowRule {
    fn default() -> Self {
        SlowRule { min_slow: 2, share: 0.5 }
    }
}

impl SlowRule {
    pub(crate) fn from_settings(b: &crate::config::BalancingConfig) -> SlowRule {
        SlowRule { min_slow: b.slow_signal.min_slow, share: b.slow_signal.share }
    }

    fn slow_share(&self, successes: u64, slow: u64, errors: u64) -> bool {
        let answers = successes.saturating_add(errors);
        answers > 0 && slow.min(successes) as f64 >= self.share * answers as f64
    }
}

/// Is the provider slow now, by the counts of the interval still open? (`slow` counts among
/// `successes`.)
pub(crate) fn slow_now(successes: u64, slow: u64, errors: u64, rule: &SlowRule) -> bool {
    rule.min_slow > 0 && slow.min(successes) >= rule.min_slow && rule.slow_share(successes, slow, errors)
}

/// Whether a provider is written off for slowness, carried from one interval to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SlowVerdict {
    pub slow: bool,
}

impl SlowVerdict {
    /// Close an interval with these counts: marked when it was [`slow_now`], kept while slow
    /// answers are at least the rule's share, dropped when they are fewer, unchanged when
    /// idle.
    pub fn close(&mut self, successes: u64, slow: u64, errors: u64, rule: &SlowRule) -> bool {
        if rule.min_slow == 0 {
            self.slow = false;
        } else if successes.saturating_add(errors) > 0 {
            self.slow = slow_now(successes, slow, errors, rule)
                || (self.slow && rule.slow_share(successes, slow, errors));
        }
        self.slow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_now_needs_enough_slow_answers_and_a_share_of_them() {
        let rule = SlowRule::default();
        assert!(!slow_now(0, 0, 0, &rule));
        // One late answer is jitter, however few answers there are.
        assert!(!slow_now(1, 1, 0, &rule));
        // Two of two, two of four: slow.
        assert!(slow_now(2, 2, 0, &rule));
        assert!(slow_now(4, 2, 0, &rule));
        // Two of five: 0.4 < 0.5.
        assert!(!slow_now(5, 2, 0, &rule));
        // Errors count among the answers: a rate-limited provider (10 × 429, 3 answers, 2 of
        // them late) is not slow; 5 late of 8 answers and 2 errors is (5 ≥ 0.5 × 10).
        assert!(!slow_now(3, 2, 10, &rule));
        assert!(slow_now(8, 5, 2, &rule));
        // `slow` counts only among successes.
        assert!(!slow_now(1, 9, 0, &rule));
        // k = 3, share 0.25: 3 of 12.
        let rule = SlowRule { min_slow: 3, share: 0.25 };
        assert!(slow_now(12, 3, 0, &rule));
        assert!(!slow_now(13, 3, 0, &rule));
        assert!(!slow_now(8, 2, 0, &rule));
        // 0 turns it off.
        assert!(!slow_now(100, 100, 0, &SlowRule { min_slow: 0, share: 0.5 }));
    }

    #[test]
    fn the_verdict_is_set_by_a_slow_interval_kept_while_late_and_through_idle_ones() {
        let rule = SlowRule::default();
        let mut v = SlowVerdict::default();
        // On time: not marked. One late of one: not enough to mark.
        assert!(!v.close(20, 0, 0, &rule));
        assert!(!v.close(1, 1, 0, &rule));
        // 72 % late: marked.
        assert!(v.close(25, 18, 0, &rule));
        // Idle intervals keep it; one late answer of one keeps it (below k, but a majority).
        assert!(v.close(0, 0, 0, &rule));
        assert!(v.close(1, 1, 0, &rule));
        // One of three late: dropped.
        assert!(!v.close(3, 1, 0, &rule));
        assert!(!v.close(0, 0, 0, &rule));
        // A provider down for rate limits: 40 errors, 5 answers in time: never marked.
        assert!(!v.close(5, 0, 40, &rule));
        // Marked, then an interval of errors only (an outage on top): dropped, since none of
        // its answers were late.
        assert!(v.close(4, 4, 0, &rule));
        assert!(!v.close(0, 0, 7, &rule));
        // Off: never marked, and a mark is dropped.
        let off = SlowRule { min_slow: 0, share: 0.5 };
        let mut v = SlowVerdict { slow: true };
        assert!(!v.close(0, 0, 0, &off));
        assert!(!v.close(10, 10, 0, &off));
    }
}
