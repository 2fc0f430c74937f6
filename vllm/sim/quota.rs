//! Per-minute request and token quotas for the simulated hosted providers.
//!
//! Hosted APIs answer 429 with `Retry-After` once a key's requests-per-minute or
//! tokens-per-minute budget is spent; the router's quota tracking and failover are tested
//! against this. The window is a fixed minute starting at the first request after the
//! previous one ended. Tokens are charged up front as prompt + the max-tokens estimate.
//! Pure apart from the `Instant` the caller passes in.

use std::sync::Mutex;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(60);

/// A granted request's view of the quota (for `x-ratelimit-*` headers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Remaining {
    pub requests: Option<u64>,
    pub tokens: Option<u64>,
    pub reset: Duration,
}

/// A refusal: which limit, and the seconds until the window ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exceeded {
    pub tokens: bool,
    pub retry_after_secs: u64,
}

struct Window {
    start: Instant,
    requests: u64,
    tokens: u64,
}

/// `--rpm` / `--tpm` limits (0 = unlimited) and the current window.
pub struct Quota {
    pub rpm: u64,
    pub tpm: u64,
    window: Mutex<Option<Window>>,
}

impl Quota {
    pub fn new(rpm: u64, tpm: u64) -> Quota {
        Quota { rpm, tpm, window: Mutex::new(None) }
    }

    /// Charge one request of `tokens` at `now`, or refuse it.
    pub fn check(&self, tokens: u64, now: Instant) -> Result<Remaining, Exceeded> {
        let mut guard = self.window.lock().expect("quota lock");
        let w = match guard.as_mut() {
            Some(w) if now.duration_since(w.start) < WINDOW => w,
            _ => guard.insert(Window { start: now, requests: 0, tokens: 0 }),
        };
        let reset = WINDOW.saturating_sub(now.duration_since(w.start));
        let retry_after_secs = reset.as_secs_f64().ceil().max(1.0) as u64;
        if self.rpm > 0 && w.requests + 1 > self.rpm {
            return Err(Exceeded { tokens: false, retry_after_secs });
        }
        if self.tpm > 0 && w.tokens + tokens > self.tpm {
            return Err(Exceeded { tokens: true, retry_after_secs });
        }
        w.requests += 1;
        w.tokens += tokens;
        Ok(Remaining {
            requests: (self.rpm > 0).then(|| self.rpm - w.requests),
            tokens: (self.tpm > 0).then(|| self.tpm - w.tokens),
            reset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpm_and_tpm_refuse_until_window_ends() {
        let q = Quota::new(2, 100);
        let t0 = Instant::now();
        assert_eq!(q.check(10, t0).unwrap().requests, Some(1));
        assert_eq!(q.check(10, t0).unwrap().tokens, Some(80));
        let e = q.check(10, t0 + Duration::from_secs(15)).unwrap_err();
        assert_eq!(e, Exceeded { tokens: false, retry_after_secs: 45 });
        assert!(q.check(10, t0 + Duration::from_secs(61)).is_ok());
        assert!(q.check(500, t0 + Duration::from_secs(61)).unwrap_err().tokens);
        assert!(Quota::new(0, 0).check(1_000_000, t0).is_ok());
    }
}
