//! Scraping shared between router replicas through Redis: each replica heartbeats its id into
//! a sorted set (scored by Redis' own clock, so replicas' clocks need not agree on who is
//! live), reads the live set back, scrapes only the nodes rendezvous hashing gives it
//! (`fleet::rendezvous`), publishes each reading it takes, and reads the others' readings for
//! the nodes it does not scrape.
//!
//! Every call goes through the quota board's Redis path (`guard::quota::shared`: one timeout,
//! one failure and reconnect path for every script). This module holds the scripts and the key
//! layout only; when to call them is `control::scrape`'s. A failed call answers `None`, and the
//! loop then scrapes every node itself until Redis answers again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Script;

use crate::canonical::NodeKey;
use crate::fleet::reading::Reading;
use crate::fleet::rendezvous::ReplicaId;
use crate::guard::quota::shared::Shared;

/// Adds ARGV[1] to the live set KEYS[1] at Redis' time, drops members not seen for ARGV[2] ms,
/// returns the members left.
const HEARTBEAT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 4)
return redis.call('ZRANGE', KEYS[1], 0, -1)
"#;

/// Stores each reading (KEYS[i]: the node's hash; ARGV[2i]: its scrape time, ARGV[2i+1]: the
/// encoded reading) unless the hash holds a newer one; ARGV[1]: time to live, ms.
const PUBLISH: &str = r#"
local ttl = tonumber(ARGV[1])
local n = 0
for i, k in ipairs(KEYS) do
  local t = tonumber(ARGV[2 * i])
  local old = redis.call('HGET', k, 't')
  if not old or tonumber(old) < t then
    redis.call('HSET', k, 't', ARGV[2 * i], 'v', ARGV[2 * i + 1])
    redis.call('PEXPIRE', k, ttl)
    n = n + 1
  end
end
return n
"#;

/// The encoded reading of each node hash in KEYS ('' where there is none).
const READ: &str = r#"
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = redis.call('HGET', k, 'v') or ''
end
return out
"#;

/// Now, as Unix milliseconds (the clock shared readings are stamped with).
pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// One replica's side of shared scraping.
pub struct ScrapeShare {
    redis: Arc<Shared>,
    me: ReplicaId,
    /// Replicas that scrape each node.
    pub k: usize,
    /// A replica not heard from for this long has left.
    member_ttl: Duration,
    /// A published reading lives this long.
    reading_ttl: Duration,
    heartbeat: Script,
    publish: Script,
    read: Script,
    /// Readings taken since the last flush, by node.
    outbox: Mutex<HashMap<NodeKey, Reading>>,
}

impl ScrapeShare {
    /// Share through the Redis at `url`, keys under `prefix`, as `me`. Members live three
    /// scrape intervals past their last heartbeat; readings as long as they can be fresh.
    pub fn new(
        url: &str,
        prefix: &str,
        me: ReplicaId,
        k: usize,
        interval: Duration,
        stale_after: Duration,
    ) -> Result<Arc<ScrapeShare>, String> {
        let timeout = (interval / 4).clamp(Duration::from_millis(100), Duration::from_millis(500));
        let redis = Shared::named("telemetry", url, prefix.to_string(), timeout)?;
        Ok(Arc::new(ScrapeShare {
            redis,
            me,
            k: k.max(1),
            member_ttl: (interval * 3).max(Duration::from_millis(300)),
            reading_ttl: stale_after.max(interval * 3),
            heartbeat: Script::new(HEARTBEAT),
            publish: Script::new(PUBLISH),
            read: Script::new(READ),
            outbox: Mutex::new(HashMap::new()),
        }))
    }

    pub fn me(&self) -> &ReplicaId {
        &self.me
    }

    /// Start connecting (from inside a tokio runtime) and wait up to `within` for Redis.
    pub async fn connect(&self, within: Duration) -> bool {
        self.redis.ensure_connecting();
        let deadline = tokio::time::Instant::now() + within;
        while !self.redis.ok() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.redis.ok()
    }

    fn members_key(&self) -> String {
        format!("{}:replicas", self.redis.prefix())
    }

    fn reading_key(&self, node: &NodeKey) -> String {
        format!("{}:reading:{node}", self.redis.prefix())
    }

    /// Say this replica is live; the live replicas (this one included), or `None` when Redis
    /// does not answer.
    pub(crate) async fn beat(self: &Arc<Self>) -> Option<Vec<ReplicaId>> {
        let args = [self.me.to_string(), self.member_ttl.as_millis().to_string()];
        let redis = Arc::clone(&self.redis);
        let members: Vec<String> = redis.invoke(&self.heartbeat, &[self.members_key()], &args).await?;
        Some(members.into_iter().map(ReplicaId::new).collect())
    }

    /// Queue a reading this replica took, for the next [`ScrapeShare::flush`].
    pub fn queue(&self, node: &NodeKey, reading: Reading) {
        let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        match outbox.get_mut(node) {
            Some(r) => *r = reading,
            None => {
                outbox.insert(node.clone(), reading);
            }
        }
    }

    /// Publish the queued readings; `false` when Redis did not take them (they are dropped:
    /// the next scrape brings newer ones).
    pub async fn flush(self: &Arc<Self>) -> bool {
        let batch: Vec<(NodeKey, Reading)> =
            std::mem::take(&mut *self.outbox.lock().unwrap_or_else(|e| e.into_inner())).into_iter().collect();
        if batch.is_empty() {
            return true;
        }
        let keys: Vec<String> = batch.iter().map(|(k, _)| self.reading_key(k)).collect();
        let mut args = Vec::with_capacity(1 + 2 * batch.len());
        args.push(self.reading_ttl.as_millis().to_string());
        for (_, r) in &batch {
            args.push(r.scraped_at_ms.to_string());
            args.push(r.encode());
        }
        let redis = Arc::clone(&self.redis);
        redis.invoke::<i64>(&self.publish, &keys, &args).await.is_some()
    }

    /// The latest published reading of each of `nodes` (encoded; `None` where there is none),
    /// or `None` when Redis does not answer.
    pub async fn read(self: &Arc<Self>, nodes: &[NodeKey]) -> Option<Vec<Option<String>>> {
        if nodes.is_empty() {
            return Some(Vec::new());
        }
        let keys: Vec<String> = nodes.iter().map(|k| self.reading_key(k)).collect();
        let redis = Arc::clone(&self.redis);
        let values: Vec<String> = redis.invoke(&self.read, &keys, &[]).await?;
        Some(values.into_iter().map(|v| (!v.is_empty()).then_some(v)).collect())
    }
}
