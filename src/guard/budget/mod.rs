//! Limits and budgets per client key and per team, enforced once per request before dispatch
//! with reserve-then-settle: the request's worst-case cost (`cost::worst_case`) is reserved
//! against every USD budget of its key and team together with its rpm, tpm and concurrency
//! counts, and its actual cost is settled when it ends, however it ends (the [`Reservation`]
//! settles on drop). With Redis (`state.redis_url`) the counters are shared by every replica
//! through one atomic script (`shared`); without it, one replica counts alone (`local`).
//! While a configured Redis is down, `budgets.when_redis_down` decides per kind of limit:
//! `open` counts on this replica alone, `closed` refuses.
//!
//! It never retries or fails over: a refusal is the client's answer (402 or 429). It never sees
//! a key's secret: scopes are named by the key's variable or id and by team.

pub mod cost;
pub mod limits;
mod local;
mod reservation;
mod shared;
pub mod window;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rust_decimal::Decimal;

use crate::canonical::Principal;
use crate::config::{BudgetsConfig, FailMode, KeyLimits};
use crate::guard::quota::shared::Shared;
use crate::guard::quota::{system_clock, Clock};
pub use limits::{Caps, Demand, Limit, Scope, ScopeKind};
use local::LocalCounters;
pub use reservation::Reservation;
use reservation::Settlement;
use shared::{Decided, Scripts};
use window::{from_nanos, retry_after_secs, to_nanos};

/// How a board is built beyond its config.
#[derive(Clone)]
pub struct BudgetOptions {
    /// Redis for shared counters (already resolved from `state.redis_url` / `redis_url_env`).
    pub redis_url: Option<String>,
    /// Prefix of every Redis key.
    pub key_prefix: String,
    /// Longest a request waits on Redis before the `when_redis_down` rule applies.
    pub timeout: Duration,
    pub clock: Clock,
}

impl Default for BudgetOptions {
    fn default() -> Self {
        BudgetOptions {
            redis_url: None,
            key_prefix: "spillway:budget".into(),
            timeout: Duration::from_millis(50),
            clock: system_clock(),
        }
    }
}

/// What a request asks of its budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// Prompt estimate plus `max_tokens`.
    pub tokens: u64,
    /// Its worst-case cost.
    pub worst_case: Decimal,
}

/// Why a request may not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It would go over `limit` of its key's or team's (`scope`); a rate limit says how many
    /// seconds until it has room again.
    Over { scope: ScopeKind, limit: Limit, retry_after_secs: u64 },
    /// Redis is down and `when_redis_down` is `closed` for this kind of limit.
    Unavailable { budget: bool },
}

/// Limits and spend per key and team.
pub struct BudgetBoard {
    config: ArcSwap<BudgetsConfig>,
    scripts: Option<Scripts>,
    /// Redis was configured but its URL could not be used.
    broken_url: bool,
    local: Mutex<LocalCounters>,
    clock: Clock,
    /// This board's reservation ids: a random replica part and a sequence.
    replica: u64,
    next: AtomicU64,
}

impl BudgetBoard {
    pub fn new(config: &BudgetsConfig, options: BudgetOptions) -> Arc<BudgetBoard> {
        let mut broken_url = false;
        let scripts = options.redis_url.as_deref().and_then(|url| {
            match Shared::named("budgets", url, options.key_prefix.clone(), options.timeout) {
                Ok(shared) => Some(Scripts::new(shared)),
                Err(e) => {
                    tracing::warn!(error = %e, "budgets: the Redis URL cannot be used");
                    broken_url = true;
                    None
                }
            }
        });
        if let Some(s) = &scripts {
            s.shared.ensure_connecting();
        }
        Arc::new(BudgetBoard {
            config: ArcSwap::from_pointee(config.clone()),
            scripts,
            broken_url,
            local: Mutex::new(LocalCounters::default()),
            clock: options.clock,
            replica: rand::random(),
            next: AtomicU64::new(1),
        })
    }

    /// Take the limits of a reloaded config; counts and spend so far are kept.
    pub(crate) fn set_config(&self, config: &BudgetsConfig) {
        self.config.store(Arc::new(config.clone()));
    }

    pub fn config(&self) -> Arc<BudgetsConfig> {
        self.config.load_full()
    }

    /// The scopes whose limits apply to `principal`, with their caps: its key's (by variable
    /// or id: `own`, the limits an issued key was created with, each overridden by the
    /// config's `budgets.keys` entry where that sets it), its team's. Empty when nothing
    /// limits it (then nothing is counted).
    pub(crate) fn scopes(&self, principal: &Principal, own: &KeyLimits) -> Vec<(Scope, Caps)> {
        let config = self.config.load();
        let mut scopes = Vec::new();
        let key = match config.keys.get(principal.name()) {
            Some(configured) => own.overridden_by(configured),
            None => own.clone(),
        };
        if key.any() {
            let scope = Scope { kind: ScopeKind::Key, name: principal.name().to_string() };
            scopes.push((scope, Caps::of(&key)));
        }
        if let Some((team, limits)) = principal.team().and_then(|t| Some((t, config.teams.get(t)?))) {
            if limits.any() {
                scopes.push((Scope { kind: ScopeKind::Team, name: team.to_string() }, Caps::of(limits)));
            }
        }
        scopes
    }

    /// Reserve `ask` against every limit of `principal`'s key and team, or say which it would
    /// pass. `None`: nothing limits this principal (no I/O was done).
    pub async fn admit(
        self: &Arc<Self>,
        principal: &Principal,
        own: &KeyLimits,
        ask: &Ask,
    ) -> Result<Option<Reservation>, Refused> {
        let scopes = self.scopes(principal, own);
        if scopes.is_empty() {
            return Ok(None);
        }
        let config = self.config.load_full();
        let now = (self.clock)();
        let ttl_ms = config.reservation_ttl_secs * 1_000;
        let demand = Demand { tokens: ask.tokens, reserve_nanos: to_nanos(ask.worst_case) };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let over = |(i, limit): (usize, Limit)| {
            let scope: &Scope = &scopes[i].0;
            let retry_after_secs = if limit == Limit::Concurrent { 1 } else { retry_after_secs(now) };
            Refused::Over { scope: scope.kind, limit, retry_after_secs }
        };
        let reservation = |shared: bool| {
            let names = scopes.iter().map(|(s, _)| s.clone()).collect();
            Reservation::new(Arc::clone(self), names, id, shared, demand)
        };
        if let Some(scripts) = &self.scripts {
            match scripts.admit(now, &scopes, &demand, &self.redis_id(id), ttl_ms).await {
                Some(Decided::Admitted) => return Ok(Some(reservation(true))),
                Some(Decided::Refused { scope, limit }) => {
                    return Err(over((scope.min(scopes.len() - 1), limit)))
                }
                None => {}
            }
        }
        if self.scripts.is_some() || self.broken_url {
            let applies = |budget: bool| {
                scopes
                    .iter()
                    .any(|(_, caps)| Limit::ALL.iter().any(|l| l.is_budget() == budget && caps.has(*l)))
            };
            let down = config.when_redis_down;
            if down.budgets == FailMode::Closed && applies(true) {
                return Err(Refused::Unavailable { budget: true });
            }
            if down.rate_limits == FailMode::Closed && applies(false) {
                return Err(Refused::Unavailable { budget: false });
            }
        }
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        local.admit(now, &scopes, &demand, id, ttl_ms).map_err(over)?;
        Ok(Some(reservation(false)))
    }

    fn redis_id(&self, id: u64) -> String {
        format!("{:016x}-{id}", self.replica)
    }

    /// Write a reservation's end: in Redis when it was counted there (on failure the spend is
    /// counted here and the reservation lapses at its TTL), else here.
    async fn settle(&self, end: Settlement) {
        let now = (self.clock)();
        if let (true, Some(scripts)) = (end.shared, &self.scripts) {
            let id = self.redis_id(end.id);
            if scripts.settle(now, &end.scopes, &id, end.actual_nanos, end.token_delta).await {
                return;
            }
        }
        let mut counters = self.local.lock().unwrap_or_else(|e| e.into_inner());
        counters.settle(now, &end.scopes, end.id, end.actual_nanos, end.token_delta);
    }

    /// Settled spend of `scope` this UTC day and month (Redis when it answers, else this
    /// replica's own counts).
    pub async fn spent(&self, scope: &Scope) -> (Decimal, Decimal) {
        let now = (self.clock)();
        if let Some(scripts) = &self.scripts {
            if let Some((day, month)) = scripts.spent(now, scope).await {
                return (from_nanos(day), from_nanos(month));
            }
        }
        let (day, month) = self.local.lock().unwrap_or_else(|e| e.into_inner()).spent(now, scope);
        (from_nanos(day), from_nanos(month))
    }

    /// Whether shared counting works: true without Redis configured, false while a configured
    /// Redis is unreachable (and until the first connection is made).
    pub fn shared_state_ok(&self) -> bool {
        !self.broken_url && self.scripts.as_ref().is_none_or(|s| s.shared.ok())
    }

    /// Whether counters are meant to be shared (Redis was configured).
    pub fn is_shared(&self) -> bool {
        self.scripts.is_some() || self.broken_url
    }

    /// Wait up to `within` for the shared counters (at start, before serving).
    pub async fn wait_shared(&self, within: Duration) -> bool {
        let Some(scripts) = &self.scripts else { return !self.broken_url };
        scripts.shared.ensure_connecting();
        let deadline = tokio::time::Instant::now() + within;
        while !scripts.shared.ok() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}
