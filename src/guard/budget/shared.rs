//! The Redis side of key limits and budgets: the same decision as `local`, made by one atomic
//! Lua script over every scope of a request, through the quota board's connection handling
//! (`guard::quota::shared::Shared`: bounded calls, outage signal, reconnect).
//!
//! Per scope five keys: the minute hash (`r` requests, `t` tokens), the settled spend of the
//! UTC day and of the UTC month (nano-dollars), the in-flight set (reservation id scored by
//! its expiry, so a crashed replica's reservations lapse) and the reservation hash (`r:<id>`
//! → reserved nano-dollars, `total`). Every key has a TTL.

use std::sync::Arc;

use redis::Script;

use super::limits::{Caps, Demand, Limit, Scope};
use super::window::Windows;
use crate::guard::quota::shared::Shared;

/// KEYS: 5 per scope (minute, day, month, in-flight, reservations). ARGV: now_ms, expiry_ms,
/// id, scopes, key ttl (s), then 7 per scope: rpm, tpm, concurrent, day cap, month cap
/// (-1: none), tokens, reserve. Returns {1}, or {0, scope index, limit code}.
const ADMIT: &str = r#"
local now, exp, id, n, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local function arg(i, j) return tonumber(ARGV[5 + i * 7 + j]) end
for i = 0, n - 1 do
  local m, d, mo, f, h = KEYS[i*5+1], KEYS[i*5+2], KEYS[i*5+3], KEYS[i*5+4], KEYS[i*5+5]
  local old = redis.call('ZRANGEBYSCORE', f, '-inf', now)
  for _, rid in ipairs(old) do
    local amt = redis.call('HGET', h, 'r:' .. rid)
    if amt then
      redis.call('HINCRBY', h, 'total', '-' .. amt)
      redis.call('HDEL', h, 'r:' .. rid)
    end
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', f, '-inf', now) end
  local reserved = tonumber(redis.call('HGET', h, 'total') or '0')
  local res, tok = arg(i, 7), arg(i, 6)
  if arg(i, 4) >= 0 and tonumber(redis.call('GET', d) or '0') + reserved + res > arg(i, 4) then return {0, i, 4} end
  if arg(i, 5) >= 0 and tonumber(redis.call('GET', mo) or '0') + reserved + res > arg(i, 5) then return {0, i, 5} end
  if arg(i, 3) >= 0 and redis.call('ZCARD', f) + 1 > arg(i, 3) then return {0, i, 3} end
  local v = redis.call('HMGET', m, 'r', 't')
  if arg(i, 1) >= 0 and tonumber(v[1] or '0') + 1 > arg(i, 1) then return {0, i, 1} end
  if arg(i, 2) >= 0 and tonumber(v[2] or '0') + tok > arg(i, 2) then return {0, i, 2} end
end
for i = 0, n - 1 do
  local m, f, h = KEYS[i*5+1], KEYS[i*5+4], KEYS[i*5+5]
  redis.call('HINCRBY', m, 'r', 1)
  redis.call('HINCRBY', m, 't', ARGV[5 + i * 7 + 6])
  redis.call('EXPIRE', m, 120)
  redis.call('ZADD', f, exp, id)
  redis.call('EXPIRE', f, ttl)
  redis.call('HSET', h, 'r:' .. id, ARGV[5 + i * 7 + 7])
  redis.call('HINCRBY', h, 'total', ARGV[5 + i * 7 + 7])
  redis.call('EXPIRE', h, ttl)
end
return {1}
"#;

/// KEYS: as ADMIT. ARGV: id, scopes, day ttl, month ttl, then per scope: actual nano-dollars,
/// token correction. Releases the reservation (if it has not lapsed), adds the spend to the
/// day and month it ends in, corrects this minute's tokens (never below zero).
const SETTLE: &str = r#"
local id, n = ARGV[1], tonumber(ARGV[2])
for i = 0, n - 1 do
  local m, d, mo, f, h = KEYS[i*5+1], KEYS[i*5+2], KEYS[i*5+3], KEYS[i*5+4], KEYS[i*5+5]
  local actual, delta = ARGV[5 + i * 2], tonumber(ARGV[6 + i * 2])
  redis.call('ZREM', f, id)
  local amt = redis.call('HGET', h, 'r:' .. id)
  if amt then
    redis.call('HINCRBY', h, 'total', '-' .. amt)
    redis.call('HDEL', h, 'r:' .. id)
  end
  if tonumber(actual) > 0 then
    redis.call('INCRBY', d, actual)
    redis.call('EXPIRE', d, tonumber(ARGV[3]))
    redis.call('INCRBY', mo, actual)
    redis.call('EXPIRE', mo, tonumber(ARGV[4]))
  end
  if delta ~= 0 and redis.call('EXISTS', m) == 1 then
    if redis.call('HINCRBY', m, 't', delta) < 0 then redis.call('HSET', m, 't', 0) end
  end
end
return 1
"#;

const DAY_TTL_SECS: u64 = 2 * 86_400;
const MONTH_TTL_SECS: u64 = 32 * 86_400;

/// The budget scripts over one [`Shared`] connection.
pub(crate) struct Scripts {
    pub shared: Arc<Shared>,
    admit: Script,
    settle: Script,
}

/// What Redis decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decided {
    Admitted,
    Refused { scope: usize, limit: Limit },
}

impl Scripts {
    pub fn new(shared: Arc<Shared>) -> Scripts {
        Scripts { shared, admit: Script::new(ADMIT), settle: Script::new(SETTLE) }
    }

    /// `{prefix}:{k|t}{len}:{name}`: the length keeps names with `:` apart.
    fn base(&self, scope: &Scope) -> String {
        let kind = &scope.kind.as_str()[..1];
        format!("{}:{kind}{}:{}", self.shared.prefix(), scope.name.len(), scope.name)
    }

    fn keys(&self, scope: &Scope, w: Windows) -> [String; 5] {
        let b = self.base(scope);
        [
            format!("{b}:m:{}", w.minute),
            format!("{b}:d:{}", w.day),
            format!("{b}:mo:{}", w.month),
            format!("{b}:f"),
            format!("{b}:h"),
        ]
    }

    /// The key holding a scope's settled spend of the UTC day `w` falls in.
    pub(crate) fn day_key(&self, scope: &Scope, w: Windows) -> String {
        self.keys(scope, w)[1].clone()
    }

    /// The key holding a scope's settled spend of the UTC month `w` falls in.
    pub(crate) fn month_key(&self, scope: &Scope, w: Windows) -> String {
        self.keys(scope, w)[2].clone()
    }

    /// `None`: Redis is not available now.
    pub async fn admit(
        &self,
        now_ms: u64,
        scopes: &[(Scope, Caps)],
        demand: &Demand,
        id: &str,
        ttl_ms: u64,
    ) -> Option<Decided> {
        let w = Windows::at(now_ms);
        let keys: Vec<String> = scopes.iter().flat_map(|(s, _)| self.keys(s, w)).collect();
        let mut args = vec![
            now_ms.to_string(),
            (now_ms + ttl_ms).to_string(),
            id.to_string(),
            scopes.len().to_string(),
            (ttl_ms / 1_000 + 60).to_string(),
        ];
        for (_, caps) in scopes {
            args.extend(caps.args().iter().map(i64::to_string));
            args.push(demand.tokens.to_string());
            args.push(demand.reserve_nanos.to_string());
        }
        let reply: Vec<i64> = self.shared.invoke(&self.admit, &keys, &args).await?;
        match reply.as_slice() {
            [1] => Some(Decided::Admitted),
            [0, scope, code] => {
                Some(Decided::Refused { scope: *scope as usize, limit: Limit::from_code(*code)? })
            }
            _ => None,
        }
    }

    /// Settle reservation `id` in every scope. False: Redis did not take it (the reservation
    /// then lapses at its TTL).
    pub async fn settle(
        &self,
        now_ms: u64,
        scopes: &[Scope],
        id: &str,
        actual_nanos: i64,
        token_delta: i64,
    ) -> bool {
        let w = Windows::at(now_ms);
        let keys: Vec<String> = scopes.iter().flat_map(|s| self.keys(s, w)).collect();
        let mut args = vec![
            id.to_string(),
            scopes.len().to_string(),
            DAY_TTL_SECS.to_string(),
            MONTH_TTL_SECS.to_string(),
        ];
        for _ in scopes {
            args.push(actual_nanos.to_string());
            args.push(token_delta.to_string());
        }
        self.shared.invoke::<i64>(&self.settle, &keys, &args).await.is_some()
    }

    /// Settled spend this day and month, in nano-dollars; `None`: Redis is not available.
    pub async fn spent(&self, now_ms: u64, scope: &Scope) -> Option<(i64, i64)> {
        const READ: &str = "return {tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(redis.call('GET', KEYS[2]) or '0')}";
        let w = Windows::at(now_ms);
        let keys = [self.day_key(scope, w), self.month_key(scope, w)];
        let v: Vec<i64> = self.shared.invoke(&Script::new(READ), &keys, &[]).await?;
        Some((*v.first()?, *v.get(1)?))
    }
}
