//! Announcing operator state changes through Redis, so that every replica reads the store at
//! once instead of at its next poll: a change is PUBLISHed (its version) on one channel, and
//! each replica keeps a SUBSCRIBE connection that wakes its sync loop on every message and
//! on every (re)connect (a message may have been missed while it was away).
//!
//! Redis is a shortcut, never the truth: the store is. Publishing goes through the shared
//! Redis path (`guard::quota::shared`: one timeout, reconnect with backoff) and never fails
//! an admin action; while the subscription is down the replica polls, with one warning
//! line when it goes and one when it comes back, and `spillway_operator_state_notify_up` 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::Script;
use tokio::sync::Notify;

use crate::guard::quota::shared::Shared;

/// The channel every replica listens on.
pub(crate) const CHANNEL: &str = "spillway:operator_state";
const TIMEOUT: Duration = Duration::from_millis(250);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

const PUBLISH: &str = "return redis.call('PUBLISH', KEYS[1], ARGV[1])";

pub(crate) struct Notifier {
    client: redis::Client,
    shared: Arc<Shared>,
    publish: Script,
    /// Subscribed now.
    up: AtomicBool,
}

impl Notifier {
    pub fn new(url: &str) -> Result<Arc<Notifier>, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let shared = Shared::silent("operator state", url, CHANNEL.to_string(), TIMEOUT)?;
        shared.ensure_connecting();
        Ok(Arc::new(Notifier { client, shared, publish: Script::new(PUBLISH), up: AtomicBool::new(false) }))
    }

    /// Whether the subscription is up.
    pub fn up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Announce `version`; a failure only means the others wait for their next poll.
    pub async fn publish(&self, version: i64) {
        let keys = [self.shared.prefix().to_string()];
        let sent: Option<i64> = self.shared.invoke(&self.publish, &keys, &[version.to_string()]).await;
        if sent.is_none() {
            tracing::debug!(version, "operator state: change not announced (Redis away); replicas poll");
        }
    }

    /// Keep a subscription until the task is dropped, waking `wake` on every message and on
    /// every (re)connect.
    pub async fn listen(self: Arc<Self>, wake: Arc<Notify>) {
        let mut delay = BACKOFF_MIN;
        let mut away_logged = false;
        loop {
            let connected = tokio::time::timeout(CONNECT_TIMEOUT * 2, async {
                let mut pubsub = self.client.get_async_pubsub().await?;
                pubsub.subscribe(CHANNEL).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await;
            let why = match connected {
                Ok(Ok(pubsub)) => {
                    self.up.store(true, Ordering::Relaxed);
                    if std::mem::take(&mut away_logged) {
                        tracing::info!("operator state: Redis is back; changes are announced again");
                    }
                    delay = BACKOFF_MIN;
                    wake.notify_one();
                    let mut messages = pubsub.into_on_message();
                    while messages.next().await.is_some() {
                        wake.notify_one();
                    }
                    "the subscription ended".to_string()
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "connect timed out".to_string(),
            };
            self.up.store(false, Ordering::Relaxed);
            if !std::mem::replace(&mut away_logged, true) {
                tracing::warn!(
                    error = %why,
                    "operator state: Redis unavailable; replicas see changes at their next poll until it returns"
                );
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(BACKOFF_MAX);
        }
    }
}
