//! The availability loop: hosted backends' outcomes feed a PID controller per backend, which
//! every interval publishes an availability in [0, 1]; the snapshot loop copies it into each
//! snapshot, and `strategy: adaptive` turns it into weights and chains.
//!
//! Only hosted backends are tracked (a local pool's availability is its live headroom). Only
//! failures that count against a backend (rate limits, overload, server errors, timeouts)
//! lower it; client errors do not.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::canonical::ErrorClass;
use crate::config::Config;
use crate::route::availability::Availability;

/// The shared PID state.
pub struct AvailabilityBoard {
    inner: Mutex<Availability>,
    hosted: Mutex<Vec<String>>,
}

impl AvailabilityBoard {
    pub fn new(config: &Config) -> Arc<Self> {
        let mut availability = Availability::from_settings(&config.balancing);
        let hosted: Vec<String> =
            config.backends.iter().filter(|b| !b.kind().is_local()).map(|b| b.name.clone()).collect();
        for name in &hosted {
            availability.track(name);
        }
        Arc::new(AvailabilityBoard { inner: Mutex::new(availability), hosted: Mutex::new(hosted) })
    }

    /// Start tracking the hosted backends a reloaded config added (kept ones keep their state).
    pub(crate) fn track_new(&self, config: &Config) {
        let mut hosted = self.hosted.lock().unwrap_or_else(|e| e.into_inner());
        for b in config.backends.iter().filter(|b| !b.kind().is_local()) {
            if !hosted.contains(&b.name) {
                self.lock().track(&b.name);
                hosted.push(b.name.clone());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Availability> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An upstream call to `backend` reached its first token (`None`; `slow` when later than
    /// its task's SLO) or failed.
    pub fn record(&self, backend: &str, failure: Option<ErrorClass>, slow: bool) {
        if !self.hosted.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|h| h == backend) {
            return;
        }
        match failure {
            None => self.lock().record_served(backend, slow),
            Some(class) => self.lock().record_failure(backend, class),
        }
    }

    /// Close an interval of `dt`.
    pub fn tick(&self, dt: Duration) {
        let published = self.lock().tick(dt);
        tracing::debug!(?published, "availability");
    }

    /// A backend's availability now (1 for anything untracked).
    pub fn get(&self, backend: &str) -> f64 {
        self.lock().get(backend)
    }

    /// What the next snapshot shows for `backend`: its availability, 0 while the open
    /// interval is slow (`route::slowness`).
    pub(crate) fn effective(&self, backend: &str) -> f64 {
        self.lock().effective(backend)
    }

    /// Whether `backend` is written off for slowness (`route::slowness`).
    pub fn slow(&self, backend: &str) -> bool {
        self.lock().slow(backend)
    }

    pub fn all(&self) -> std::collections::BTreeMap<crate::canonical::BackendName, f64> {
        self.lock().all()
    }
}

/// Tick the board every `interval`, passing the real elapsed time, until stopped.
pub async fn run(board: Arc<AvailabilityBoard>, interval: Duration) {
    let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        let now = tick.tick().await;
        board.tick(now.saturating_duration_since(last));
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn hosted_overload_lowers_availability_and_client_errors_do_not() {
        let config = crate::config::parse(include_str!("../../spillway.example.yaml")).unwrap();
        let board = AvailabilityBoard::new(&config);
        for _ in 0..20 {
            board.record("openai", Some(ErrorClass::InvalidRequest), false);
            board.record("anthropic", Some(ErrorClass::Overloaded), false);
            board.record("local-llama", Some(ErrorClass::Overloaded), false);
        }
        let handle = tokio::spawn(run(Arc::clone(&board), Duration::from_secs(30)));
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert_eq!(board.get("openai"), 1.0, "client errors do not count");
        assert_eq!(board.get("anthropic"), 0.0, "20 overloads in an interval: down at once");
        assert_eq!(board.get("local-llama"), 1.0, "local pools are not tracked");
        handle.abort();
    }
}
