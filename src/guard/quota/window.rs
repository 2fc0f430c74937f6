//! The pure per-minute window behind every quota decision: no clock reads, no I/O.
//!
//! A fixed window keyed by the minute since the Unix epoch (`unix_ms / 60_000`): every router
//! replica computes the same key from its own clock, which is what lets them share one Redis
//! counter per (backend, minute). A fixed window lets up to twice the limit through across a
//! minute boundary in the worst case; providers' own limiters are usually smoother, so a
//! backend near its quota may still answer 429, which dispatch treats as retryable elsewhere.

use std::time::Duration;

/// Milliseconds in one window.
pub const WINDOW_MS: u64 = 60_000;

/// The window (minute number) that contains `unix_ms`.
pub fn minute_of(unix_ms: u64) -> u64 {
    unix_ms / WINDOW_MS
}

/// Time from `unix_ms` until the next window starts: in (0, 60 s].
pub fn until_next_window(unix_ms: u64) -> Duration {
    Duration::from_millis(WINDOW_MS - unix_ms % WINDOW_MS)
}

/// A backend's per-minute limits (requests, tokens); `None` is no limit on that axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
}

impl Limits {
    /// Whether there is anything to count.
    pub(crate) fn is_limited(&self) -> bool {
        self.rpm.is_some() || self.tpm.is_some()
    }

    /// The limits a request may fill up to: `ceiling` × each limit, rounded down. A ceiling
    /// outside (0, 1] is clamped into [0, 1]; NaN counts as 1.
    pub fn scaled(&self, ceiling: f64) -> Limits {
        let c = if ceiling.is_nan() { 1.0 } else { ceiling.clamp(0.0, 1.0) };
        let scale = |limit: u64| (limit as f64 * c).floor() as u64;
        Limits { rpm: self.rpm.map(scale), tpm: self.tpm.map(scale) }
    }

    /// Whether one more request of `tokens` fits on top of `requests`/`used_tokens`.
    pub(crate) fn admits(&self, requests: u64, used_tokens: u64, tokens: u64) -> bool {
        self.rpm.is_none_or(|rpm| requests.saturating_add(1) <= rpm)
            && self.tpm.is_none_or(|tpm| used_tokens.saturating_add(tokens) <= tpm)
    }
}

/// One backend's counts for one minute, as this replica knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MinuteWindow {
    pub minute: u64,
    pub requests: u64,
    pub tokens: u64,
    /// A request that could use the whole quota (ceiling 1) was refused this minute.
    pub refused_at_full: bool,
}

impl MinuteWindow {
    /// Start over if `minute` is a later window than the one held.
    pub(crate) fn roll(&mut self, minute: u64) {
        if minute > self.minute {
            *self = MinuteWindow { minute, ..MinuteWindow::default() };
        }
    }

    /// Count one request of `tokens` if it fits under `limits` scaled by `ceiling`.
    pub fn try_take(&mut self, minute: u64, limits: &Limits, tokens: u64, ceiling: f64) -> bool {
        self.roll(minute);
        if minute < self.minute {
            // A clock that stepped back: count against the window held, never an older one.
            return self.try_take(self.minute, limits, tokens, ceiling);
        }
        if limits.scaled(ceiling).admits(self.requests, self.tokens, tokens) {
            self.requests = self.requests.saturating_add(1);
            self.tokens = self.tokens.saturating_add(tokens);
            true
        } else {
            if ceiling >= 1.0 {
                self.refused_at_full = true;
            }
            false
        }
    }

    /// Take in the shared counts another source (Redis) reported for `minute`; counts only
    /// grow within a window, so the larger of the two views wins.
    pub fn observe(&mut self, minute: u64, requests: u64, tokens: u64) {
        self.roll(minute);
        if minute == self.minute {
            self.requests = self.requests.max(requests);
            self.tokens = self.tokens.max(tokens);
        }
    }

    /// Move the token count by `delta` (a correction once usage is known), never below zero.
    pub fn adjust_tokens(&mut self, minute: u64, delta: i64) {
        self.roll(minute);
        if minute == self.minute {
            self.tokens = self.tokens.saturating_add_signed(delta);
        }
    }

    /// Whether the quota is used up for `minute` in this view: a limit reached, or a
    /// full-ceiling request refused.
    pub fn exhausted(&self, minute: u64, limits: &Limits) -> bool {
        if minute != self.minute {
            return false;
        }
        self.refused_at_full
            || limits.rpm.is_some_and(|rpm| self.requests >= rpm)
            || limits.tpm.is_some_and(|tpm| self.tokens >= tpm)
    }
}
