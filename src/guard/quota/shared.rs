//! The Redis side of the quota board: one hash per (backend, minute) shared by every router
//! replica, updated atomically by a Lua script, behind a short timeout. The connection handling
//! ([`Shared`]: bounded calls, outage signalling, reconnecting) is also what the key budgets
//! (`guard::budget`) and shared scraping (`control::scrape_share`) run their own scripts
//! through: one Redis client path.
//!
//! It must never fail or stall a request: every call is bounded by the board's timeout, a
//! failure drops the connection and hands the board back to local counting, and one
//! background task reconnects with exponential backoff. An outage is logged once when it
//! starts and once when it ends, never per request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};

use super::window::Limits;

/// Counts one request if it fits under the (already scaled) limits. KEYS[1]: the window hash
/// (fields `r` requests, `t` tokens). ARGV: rpm limit, tpm limit (-1: none), tokens, ttl.
/// Returns {granted (0/1), requests, tokens} after the decision. Check and increment run as
/// one script, so replicas racing for the last slot cannot both get it.
const TAKE: &str = r#"
local v = redis.call('HMGET', KEYS[1], 'r', 't')
local r = tonumber(v[1] or '0')
local t = tonumber(v[2] or '0')
local rl = tonumber(ARGV[1])
local tl = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if (rl >= 0 and r + 1 > rl) or (tl >= 0 and t + n > tl) then
  return {0, r, t}
end
r = redis.call('HINCRBY', KEYS[1], 'r', 1)
t = redis.call('HINCRBY', KEYS[1], 't', n)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return {1, r, t}
"#;

/// Moves the token count of an existing window by ARGV[1], never below zero. A window that
/// has expired (or never existed) is left alone, so no key is created without a TTL.
const ADJUST: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then
  local t = redis.call('HINCRBY', KEYS[1], 't', ARGV[1])
  if t < 0 then redis.call('HSET', KEYS[1], 't', 0) end
  return 1
end
return 0
"#;

/// Window keys live two minutes: long enough for late adjustments, short enough to tidy up.
const KEY_TTL_SECS: u64 = 120;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub(crate) struct Shared {
    /// Who uses it, for the outage log lines (`quota`, `budgets`).
    what: &'static str,
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    /// Connected and the last call worked.
    ok: AtomicBool,
    /// A reconnect task is running.
    connecting: AtomicBool,
    /// The current outage has been logged.
    in_outage: AtomicBool,
    /// Whether outages are logged here (a user that logs its own passes `false`).
    log_outages: bool,
    timeout: Duration,
    prefix: String,
    take: Script,
    adjust: Script,
}

/// What Redis decided for one request, with the window's counts after it.
pub(crate) struct Counted {
    pub granted: bool,
    pub requests: u64,
    pub tokens: u64,
}

impl Shared {
    pub fn new(url: &str, prefix: String, timeout: Duration) -> Result<Arc<Shared>, String> {
        Shared::named("quota", url, prefix, timeout)
    }

    /// A connection for `what` (its outage lines say so), keys under `prefix`.
    pub fn named(
        what: &'static str,
        url: &str,
        prefix: String,
        timeout: Duration,
    ) -> Result<Arc<Shared>, String> {
        Shared::build(what, url, prefix, timeout, true)
    }

    /// [`Shared::named`] that logs no outage of its own: its user says when Redis is away.
    pub fn silent(
        what: &'static str,
        url: &str,
        prefix: String,
        timeout: Duration,
    ) -> Result<Arc<Shared>, String> {
        Shared::build(what, url, prefix, timeout, false)
    }

    fn build(
        what: &'static str,
        url: &str,
        prefix: String,
        timeout: Duration,
        log_outages: bool,
    ) -> Result<Arc<Shared>, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        Ok(Arc::new(Shared {
            what,
            client,
            conn: Mutex::new(None),
            ok: AtomicBool::new(false),
            connecting: AtomicBool::new(false),
            in_outage: AtomicBool::new(false),
            log_outages,
            timeout,
            prefix,
            take: Script::new(TAKE),
            adjust: Script::new(ADJUST),
        }))
    }

    pub fn ok(&self) -> bool {
        self.ok.load(Ordering::Relaxed)
    }

    /// The prefix every key of this user starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Run `script` with `keys` and `args` under the timeout. `None`: Redis is not available
    /// now (the caller falls back); a failure is signalled and the reconnect started.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        self: &Arc<Self>,
        script: &Script,
        keys: &[String],
        args: &[String],
    ) -> Option<T> {
        let Some(mut conn) = self.connection() else {
            self.ensure_connecting();
            return None;
        };
        let mut call = script.prepare_invoke();
        for key in keys {
            call.key(key);
        }
        for arg in args {
            call.arg(arg);
        }
        match tokio::time::timeout(self.timeout, call.invoke_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.mark_down(&e.to_string());
                None
            }
            Err(_) => {
                self.mark_down(&format!("no reply within {} ms", self.timeout.as_millis()));
                None
            }
        }
    }

    pub fn key(&self, backend: &str, minute: u64) -> String {
        format!("{}:{backend}:{minute}", self.prefix)
    }

    fn connection(&self) -> Option<MultiplexedConnection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Count one request in Redis. `None`: Redis is not available now (the caller counts
    /// locally); the board is already reconnecting.
    pub async fn take(self: &Arc<Self>, key: &str, limits: &Limits, tokens: u64) -> Option<Counted> {
        let limit = |l: Option<u64>| l.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX)).to_string();
        let args = [limit(limits.rpm), limit(limits.tpm), tokens.to_string(), KEY_TTL_SECS.to_string()];
        let v: Vec<i64> = self.invoke(&self.take, &[key.to_string()], &args).await?;
        if v.len() != 3 {
            self.mark_down(&format!("unexpected script reply {v:?}"));
            return None;
        }
        Some(Counted { granted: v[0] == 1, requests: v[1].max(0) as u64, tokens: v[2].max(0) as u64 })
    }

    /// Move a window's token count, in the background (never awaited by a request).
    pub(crate) fn adjust(self: &Arc<Self>, key: String, delta: i64) {
        let Some(mut conn) = self.connection() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let shared = Arc::clone(self);
        runtime.spawn(async move {
            let mut call = shared.adjust.key(&key);
            call.arg(delta);
            match tokio::time::timeout(shared.timeout, call.invoke_async::<i64>(&mut conn)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => shared.mark_down(&e.to_string()),
                Err(_) => shared.mark_down("adjustment timed out"),
            }
        });
    }

    /// Drop the connection, switch to local counting, log the outage once, reconnect.
    fn mark_down(self: &Arc<Self>, why: &str) {
        *self.conn.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.ok.store(false, Ordering::Relaxed);
        if !self.in_outage.swap(true, Ordering::Relaxed) && self.log_outages {
            tracing::warn!(
                error = why,
                store = self.what,
                "shared state in Redis unavailable; this replica works on its own until it returns"
            );
        }
        self.ensure_connecting();
    }

    /// Start the reconnect task unless one runs (needs a tokio runtime; without one the next
    /// request, which runs inside one, starts it).
    pub(crate) fn ensure_connecting(self: &Arc<Self>) {
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.connecting.store(false, Ordering::Release);
            return;
        };
        runtime.spawn(reconnect(Arc::downgrade(self)));
    }
}

/// Connect until it works (or the board is dropped), backing off from 100 ms to 5 s.
async fn reconnect(weak: Weak<Shared>) {
    let mut delay = BACKOFF_MIN;
    loop {
        let Some(shared) = weak.upgrade() else { return };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(shared.timeout.max(Duration::from_millis(1))));
        let attempt = async {
            let mut conn = shared.client.get_multiplexed_async_connection_with_config(&config).await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
            Ok::<_, redis::RedisError>(conn)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT * 2, attempt).await {
            Ok(Ok(conn)) => {
                *shared.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
                shared.ok.store(true, Ordering::Relaxed);
                shared.connecting.store(false, Ordering::Release);
                if shared.in_outage.swap(false, Ordering::Relaxed) && shared.log_outages {
                    tracing::info!(store = shared.what, "Redis is back; shared state resumed");
                }
                return;
            }
            Ok(Err(e)) => note_outage(&shared, &e.to_string()),
            Err(_) => note_outage(&shared, "connect timed out"),
        }
        drop(shared);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(BACKOFF_MAX);
    }
}

fn note_outage(shared: &Shared, why: &str) {
    shared.ok.store(false, Ordering::Relaxed);
    if !shared.in_outage.swap(true, Ordering::Relaxed) && shared.log_outages {
        tracing::warn!(
            error = why,
            store = shared.what,
            "cannot reach Redis for shared state; this replica works on its own until it returns"
        );
    }
}
