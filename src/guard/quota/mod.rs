//! Hosted quotas: per-minute request and token limits of each hosted backend, counted before
//! a request is sent so that a backend over its quota is skipped instead of answering 429.
//!
//! The window is fixed, keyed by the minute since the Unix epoch ([`window`]). With a Redis
//! URL the counts are shared by every router replica (one hash per backend and minute,
//! updated by an atomic Lua script under a short timeout); without one, or while Redis is
//! unreachable, each replica counts on its own. Redis never fails a request and never holds
//! one for longer than the timeout: on any error the board counts locally, says so once, and
//! reconnects in the background. Note that local fallback counts per replica, so N replicas
//! may together let up to N times the quota through during an outage; the provider's own 429s,
//! which dispatch treats as retryable elsewhere, are the backstop.
//!
//! Nothing here decides priorities: the caller passes the share of the quota a request may
//! fill up to (`ceiling`).

pub(crate) mod shared;
pub mod window;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::canonical::BackendName;
use crate::config::Config;

use shared::Shared;
pub use window::{minute_of, until_next_window, Limits, MinuteWindow, WINDOW_MS};

/// Wall-clock milliseconds since the Unix epoch; replaceable so tests can move time.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock as a [`Clock`].
pub(crate) fn system_clock() -> Clock {
    Arc::new(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0))
}

/// The answer for one request on one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaDecision {
    /// Counted; send it.
    Granted,
    /// Not counted; skip this backend (it is not a failure). The window resets after `retry_after`.
    OverQuota { retry_after: Duration },
}

impl QuotaDecision {
    pub fn is_granted(&self) -> bool {
        matches!(self, QuotaDecision::Granted)
    }
}

/// How a board is built beyond the config.
#[derive(Clone)]
pub struct QuotaOptions {
    /// Redis for shared counters (already resolved from `state.redis_url` / `redis_url_env`).
    pub redis_url: Option<String>,
    /// Prefix of every Redis key (`{prefix}:{backend}:{minute}`).
    pub key_prefix: String,
    /// Longest a request waits on Redis before counting locally.
    pub timeout: Duration,
    pub clock: Clock,
}

impl Default for QuotaOptions {
    fn default() -> Self {
        QuotaOptions {
            redis_url: None,
            key_prefix: "spillway:quota".to_string(),
            timeout: Duration::from_millis(50),
            clock: system_clock(),
        }
    }
}

fn limits_of(config: &Config) -> HashMap<BackendName, Limits> {
    config
        .backends
        .iter()
        .filter_map(|b| {
            let q = b.hosted()?.quota.as_ref()?;
            let limits = Limits { rpm: q.rpm, tpm: q.tpm };
            limits.is_limited().then(|| (BackendName::from(&b.name), limits))
        })
        .collect()
}

/// Per-minute quota counters of every backend that has a `quota`.
pub struct QuotaBoard {
    /// Swapped whole on a config reload.
    limits: arc_swap::ArcSwap<HashMap<BackendName, Limits>>,
    /// This replica's view: its own counts, raised to the shared counts Redis last reported.
    local: Mutex<HashMap<BackendName, MinuteWindow>>,
    shared: Option<Arc<Shared>>,
    /// Redis was configured but its URL could not be used.
    broken_url: bool,
    clock: Clock,
}

impl QuotaBoard {
    /// A board for `config`'s backends; `redis_url` shares the counters between replicas.
    /// Inside a tokio runtime the first Redis connection starts at once, in the background.
    pub fn new(config: &Config, redis_url: Option<String>) -> Arc<QuotaBoard> {
        QuotaBoard::with_options(config, QuotaOptions { redis_url, ..QuotaOptions::default() })
    }

    pub fn with_options(config: &Config, options: QuotaOptions) -> Arc<QuotaBoard> {
        let limits = arc_swap::ArcSwap::from_pointee(limits_of(config));
        let mut broken_url = false;
        let shared = options.redis_url.as_deref().and_then(|url| {
            match Shared::new(url, options.key_prefix.clone(), options.timeout) {
                Ok(shared) => Some(shared),
                Err(e) => {
                    tracing::warn!(error = %e, "quota: the Redis URL cannot be used; counting locally");
                    broken_url = true;
                    None
                }
            }
        });
        if let Some(shared) = &shared {
            shared.ensure_connecting();
        }
        Arc::new(QuotaBoard {
            limits,
            local: Mutex::new(HashMap::new()),
            shared,
            broken_url,
            clock: options.clock,
        })
    }

    /// Take the quotas of a reloaded config; counts so far this minute are kept.
    pub(crate) fn set_limits(&self, config: &Config) {
        self.limits.store(Arc::new(limits_of(config)));
    }

    /// The configured limits of `backend`, if it has a quota.
    pub fn limits(&self, backend: &str) -> Option<Limits> {
        self.limits.load().get(backend).copied()
    }

    /// Count one request of `tokens` (in this backend's own tokens: input plus the output cap)
    /// against `backend`'s quota, allowing it to fill the quota up to `ceiling` in (0, 1].
    /// Backends without a quota are granted at once, without I/O. Never fails: Redis trouble
    /// means local counting.
    pub async fn try_take(&self, backend: &str, tokens: u64, ceiling: f64) -> QuotaDecision {
        let Some(limits) = self.limits(backend) else { return QuotaDecision::Granted };
        let now = (self.clock)();
        let minute = minute_of(now);
        let over = QuotaDecision::OverQuota { retry_after: until_next_window(now) };
        if let Some(shared) = &self.shared {
            let key = shared.key(backend, minute);
            if let Some(counted) = shared.take(&key, &limits.scaled(ceiling), tokens).await {
                let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
                let window = local.entry(BackendName::from(backend)).or_default();
                window.observe(minute, counted.requests, counted.tokens);
                if counted.granted {
                    return QuotaDecision::Granted;
                }
                if ceiling >= 1.0 && window.minute == minute {
                    window.refused_at_full = true;
                }
                return over;
            }
        }
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let window = local.entry(BackendName::from(backend)).or_default();
        if window.try_take(minute, &limits, tokens, ceiling) {
            QuotaDecision::Granted
        } else {
            over
        }
    }

    /// Correct a granted request's token count once its real usage is known (`actual`, in
    /// this backend's tokens, against the `estimated` it was counted with). The correction
    /// lands in the current minute, which is the minute the request was counted in unless it
    /// straddled a boundary; a fixed window is an approximation either way. Shared counters
    /// are adjusted in the background; nothing here waits.
    pub fn refund(&self, backend: &str, tokens_estimated: u64, tokens_actual: u64) {
        let Some(limits) = self.limits(backend) else { return };
        if limits.tpm.is_none() || tokens_estimated == tokens_actual {
            return;
        }
        let delta = (tokens_actual as i128 - tokens_estimated as i128)
            .clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        let minute = minute_of((self.clock)());
        {
            let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(window) = local.get_mut(backend) {
                window.adjust_tokens(minute, delta);
            }
        }
        if let Some(shared) = &self.shared {
            shared.adjust(shared.key(backend, minute), delta);
        }
    }

    /// Whether `backend`'s quota is used up for the current minute, in this replica's view
    /// (its own counts and the shared counts Redis last reported). Cheap, no I/O: for the
    /// snapshot loop. False for backends without a quota.
    pub fn exhausted(&self, backend: &str) -> bool {
        let Some(limits) = self.limits(backend) else { return false };
        let minute = minute_of((self.clock)());
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        local.get(backend).is_some_and(|w| w.exhausted(minute, &limits))
    }

    /// This replica's view of `backend`'s current minute, for metrics and the snapshot.
    pub fn usage(&self, backend: &str) -> Option<MinuteWindow> {
        self.limits(backend)?;
        let minute = minute_of((self.clock)());
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let window = local.get(backend).copied().unwrap_or_default();
        Some(if window.minute == minute {
            window
        } else {
            MinuteWindow { minute, ..MinuteWindow::default() }
        })
    }

    /// Whether shared counting works: true without Redis configured, false while a
    /// configured Redis is unreachable (and until the first connection is made).
    pub fn shared_state_ok(&self) -> bool {
        if self.broken_url {
            return false;
        }
        self.shared.as_ref().is_none_or(|s| s.ok())
    }

    /// Whether counters are meant to be shared (a usable Redis URL was given).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Wait up to `within` for the shared counters to become available (at start, before
    /// serving, so the first requests are counted across replicas). True if they are.
    pub async fn wait_shared(&self, within: Duration) -> bool {
        let Some(shared) = &self.shared else { return !self.broken_url };
        shared.ensure_connecting();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if shared.ok() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
