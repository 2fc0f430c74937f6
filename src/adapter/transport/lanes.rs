//! Hosted traffic with no hidden queue. One HTTP client keeps one HTTP/2 connection per origin,
//! and a provider advertises about 100 concurrent streams on it (OpenAI, Anthropic and Google
//! do): the 101st request would wait inside the client, unseen by deadlines, breakers and
//! metrics. Here each origin gets lanes, each its own client and so its own connection, with at
//! most `streams_per_connection` requests on one; a new lane opens when every open one is full,
//! up to `max_connections`. Past that a request waits for a slot in the open, counted in
//! `waiting` (the metric `spillway_upstream_waiting`), and dispatch's deadline around the call
//! makes a wait that lasts too long the attempt's outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// How many requests share one connection, and how many connections one origin may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneLimits {
    pub streams_per_connection: usize,
    pub max_connections: usize,
}

/// Every origin's lanes; cloning shares them.
#[derive(Clone)]
pub struct Lanes {
    limits: LaneLimits,
    /// Makes the client of a new lane (the hosted client's settings and roots).
    make: Arc<dyn Fn() -> reqwest::Client + Send + Sync>,
    origins: Arc<Mutex<HashMap<String, Arc<Origin>>>>,
}

#[derive(Default)]
struct Origin {
    lanes: Mutex<Vec<Arc<Lane>>>,
    /// Requests waiting for a slot now.
    waiting: AtomicUsize,
    freed: Notify,
}

struct Lane {
    client: reqwest::Client,
    in_flight: AtomicUsize,
    /// Its connection is up (its first request has its answer's head, or failed): until then
    /// the others on it wait, or each would open a connection of its own before ALPN says the
    /// one connection can carry them all.
    open: std::sync::atomic::AtomicBool,
    opened: Notify,
}

/// A request's place on a lane, held until its answer has been read (or dropped).
pub struct Slot {
    lane: Arc<Lane>,
    origin: Arc<Origin>,
    /// It opens its lane's connection.
    opener: bool,
}

impl Slot {
    pub fn client(&self) -> &reqwest::Client {
        &self.lane.client
    }

    /// Wait until the lane's connection is up (at once for the request that opens it).
    pub async fn wait_open(&self) {
        let lane = &self.lane;
        while !self.opener && !lane.open.load(Ordering::Acquire) {
            let opened = lane.opened.notified();
            if lane.open.load(Ordering::Acquire) {
                break;
            }
            opened.await;
        }
    }

    /// The request's answer head came (or it failed): the lane's connection is settled.
    pub fn settled(&self) {
        if self.opener && !self.lane.open.swap(true, Ordering::AcqRel) {
            self.lane.opened.notify_waiters();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.settled();
        self.lane.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.origin.freed.notify_one();
    }
}

/// The origin of `url`: scheme, host and port.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..].find('/').map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

impl Lanes {
    pub fn new(limits: LaneLimits, make: impl Fn() -> reqwest::Client + Send + Sync + 'static) -> Lanes {
        let limits = LaneLimits {
            streams_per_connection: limits.streams_per_connection.max(1),
            max_connections: limits.max_connections.max(1),
        };
        Lanes { limits, make: Arc::new(make), origins: Arc::default() }
    }

    fn origin(&self, url: &str) -> Arc<Origin> {
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(origins.entry(origin_of(url).to_string()).or_default())
    }

    /// A slot for a request to `url`: on an open lane with room, a new lane, or (every lane
    /// full and as many as allowed) the first one freed. The caller's deadline bounds the wait.
    pub async fn take(&self, url: &str) -> Slot {
        let origin = self.origin(url);
        if let Some(slot) = self.try_take(&origin) {
            return slot;
        }
        origin.waiting.fetch_add(1, Ordering::AcqRel);
        let waited = Waiting(&origin);
        let slot = loop {
            let freed = origin.freed.notified();
            if let Some(slot) = self.try_take(&origin) {
                break slot;
            }
            freed.await;
        };
        drop(waited);
        slot
    }

    fn try_take(&self, origin: &Arc<Origin>) -> Option<Slot> {
        let mut lanes = origin.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let per = self.limits.streams_per_connection;
        let (lane, opener) = match lanes.iter().min_by_key(|l| l.in_flight.load(Ordering::Acquire)) {
            Some(l) if l.in_flight.load(Ordering::Acquire) < per => (Arc::clone(l), false),
            _ if lanes.len() < self.limits.max_connections => {
                let lane = Arc::new(Lane {
                    client: (self.make)(),
                    in_flight: AtomicUsize::new(0),
                    open: Default::default(),
                    opened: Notify::new(),
                });
                lanes.push(Arc::clone(&lane));
                (lane, true)
            }
            _ => return None,
        };
        lane.in_flight.fetch_add(1, Ordering::AcqRel);
        Some(Slot { lane, origin: Arc::clone(origin), opener })
    }

    /// Requests waiting for a slot to the origin of `url` now.
    pub fn waiting(&self, url: &str) -> usize {
        let origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        origins.get(origin_of(url)).map_or(0, |o| o.waiting.load(Ordering::Acquire))
    }

    /// Lanes (connections' clients) open to the origin of `url`.
    pub fn lanes(&self, url: &str) -> usize {
        let origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        origins.get(origin_of(url)).map_or(0, |o| o.lanes.lock().unwrap_or_else(|e| e.into_inner()).len())
    }
}

/// Counted as waiting until dropped (also when the caller's deadline drops the wait).
struct Waiting<'a>(&'a Origin);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lanes(per: usize, max: usize) -> Lanes {
        Lanes::new(LaneLimits { streams_per_connection: per, max_connections: max }, reqwest::Client::new)
    }

    #[test]
    fn origins_are_scheme_host_and_port() {
        assert_eq!(origin_of("https://api.openai.com/v1/chat/completions"), "https://api.openai.com");
        assert_eq!(origin_of("https://127.0.0.1:8443/v1"), "https://127.0.0.1:8443");
        assert_eq!(origin_of("https://h"), "https://h");
    }

    #[tokio::test]
    async fn a_full_lane_opens_another_and_past_the_last_a_request_waits_in_the_open() {
        let l = lanes(2, 2);
        let url = "https://p.example/v1/x";
        let held: Vec<Slot> = futures::future::join_all((0..4).map(|_| l.take(url))).await;
        assert_eq!(l.lanes(url), 2, "two requests per connection: a second connection");
        assert_eq!(l.waiting(url), 0);
        let l2 = l.clone();
        let fifth = tokio::spawn(async move { l2.take("https://p.example/v1/y").await });
        tokio::time::timeout(Duration::from_secs(5), async {
            while l.waiting(url) != 1 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the fifth waits, counted");
        drop(held);
        let slot = tokio::time::timeout(Duration::from_secs(5), fifth)
            .await
            .expect("a freed slot wakes it")
            .unwrap();
        assert_eq!(l.waiting(url), 0);
        assert_eq!(l.lanes(url), 2, "no third connection");
        drop(slot);
    }

    #[tokio::test]
    async fn a_wait_dropped_by_its_deadline_is_no_longer_counted() {
        let l = lanes(1, 1);
        let url = "https://p.example/v1";
        let _held = l.take(url).await;
        let waited = tokio::time::timeout(Duration::from_millis(20), l.take(url)).await;
        assert!(waited.is_err(), "no slot within the deadline");
        assert_eq!(l.waiting(url), 0);
    }
}
