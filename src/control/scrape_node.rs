//! One node's scrape schedule, and what one scrape reads: the node's metrics page by its
//! engine's adapter (telling the engine first under `engine: auto`), the agent's page beside it,
//! and now and then the engine's side page. [`super::scrape`] starts one per node.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::scrape_error::ScrapeError;
use super::scrape_http::{Answer, KeepAlive};
use super::scrape_share::ScrapeShare;
use crate::canonical::{Engine, NodeKey};
use crate::config::{EngineSetting, TelemetryConfig};
use crate::fleet::engines::info::{info_path, metrics_path, read_info, EngineInfo, OTHER_METRICS_PATH};
use crate::fleet::engines::{detect, read_means};
use crate::fleet::load::NodeLoad;
use crate::fleet::metrics::{parse_agent, NodeSample};
use crate::fleet::reading::Reading;
use crate::fleet::telemetry::TelemetryBoard;
use crate::guard::breaker::NodeBreaker;

/// Largest metrics page accepted (a vLLM page is tens of KiB).
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Where one node is scraped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The node's address, without a trailing `/`; the engine's pages are under it.
    pub origin: String,
    /// The pool's `engine`.
    pub engine: EngineSetting,
    /// `http://<node host>:<agent_port>/metrics`, when the backend has an agent.
    pub agent_url: Option<String>,
}

impl Target {
    /// The metrics page of the node as `engine`'s (`None`: not yet known).
    pub fn metrics_url(&self, engine: Option<Engine>) -> String {
        format!("{}{}", self.origin, metrics_path(engine))
    }
}

/// Wait before a node's next scrape: `interval` while it answers; after `failures`
/// consecutive failures, `interval × 2^(failures−1)` up to `backoff_max`. Either is scaled by
/// `1 + jitter × (2r − 1)`, with `r` uniform in [0, 1), and never exceeds `backoff_max` when
/// backing off.
pub fn next_delay(interval: Duration, jitter: f64, backoff_max: Duration, failures: u32, r: f64) -> Duration {
    let base = if failures == 0 {
        interval
    } else {
        let factor = 1u32 << (failures - 1).min(20);
        interval.saturating_mul(factor).min(backoff_max.max(interval))
    };
    let scale = 1.0 + jitter.clamp(0.0, 1.0) * (2.0 * r.clamp(0.0, 1.0) - 1.0);
    let d = base.mul_f64(scale);
    if failures > 0 {
        d.min(backoff_max.max(interval))
    } else {
        d
    }
}

/// The engine's side page (version, limits) is asked for on the first good scrape and then
/// every this many.
const INFO_EVERY: u32 = 60;

/// One node's scrape schedule.
pub(super) struct NodeScraper {
    pub(super) key: NodeKey,
    pub(super) target: Target,
    pub(super) board: Arc<TelemetryBoard>,
    pub(super) load: Arc<NodeLoad>,
    pub(super) client: reqwest::Client,
    pub(super) permits: Arc<Semaphore>,
    pub(super) cfg: TelemetryConfig,
    /// The engine whose adapter reads this node's pages: the pool's, or the one detected
    /// (`None` until a page tells, with `engine: auto`).
    pub(super) engine: Option<Engine>,
    /// The last page's hash and what it parsed to: an idle node's page does not change
    /// between scrapes, and parsing is most of a scrape's cost.
    pub(super) last_page: Option<(u64, NodeSample)>,
    /// Where the node's pages are read (its kept-alive connection).
    pub(super) page: Getter,
    /// Where the agent's page is read.
    pub(super) agent: Getter,
    /// Good scrapes until the engine's side page is asked for again (0: at the next one).
    pub(super) info_in: u32,
    /// What the side page said last (kept to travel with shared readings).
    pub(super) info: EngineInfo,
    /// Where this replica's readings are published for the others (sharing only).
    pub(super) share: Option<Arc<ScrapeShare>>,
    /// Scrapes this replica made.
    pub(super) scrapes: prometheus::IntCounter,
    /// The node's breaker, told when the node reads again after failed scrapes.
    pub(super) breaker: Option<Arc<NodeBreaker>>,
}

impl NodeScraper {
    pub(super) async fn run(mut self) {
        let interval = Duration::from_millis(self.cfg.interval_ms.max(1));
        let backoff_max = Duration::from_millis(self.cfg.backoff_max_ms);
        // The first scrape lands anywhere in the first interval, so nodes spread out.
        let mut due = Instant::now() + interval.mul_f64(rand::random::<f64>());
        let mut failures = 0u32;
        loop {
            tokio::time::sleep_until(due).await;
            let started = Instant::now();
            let ok = {
                let permits = Arc::clone(&self.permits);
                let Ok(_permit) = permits.acquire().await else { return };
                self.scrape_once().await
            };
            if ok && failures > 0 {
                // It could not be reached and now can: its breaker need not wait out its time.
                if let Some(breaker) = &self.breaker {
                    breaker.node_back(Instant::now());
                }
            }
            failures = if ok { 0 } else { failures.saturating_add(1) };
            let wait = next_delay(interval, self.cfg.jitter, backoff_max, failures, rand::random::<f64>());
            due = (started + wait).max(Instant::now());
        }
    }

    /// Scrape the node's metrics (and the agent's, at the same time); record the outcome.
    /// Returns whether the node's own scrape succeeded (the agent does not count).
    async fn scrape_once(&mut self) -> bool {
        let timeout = Duration::from_millis(self.cfg.timeout_ms.max(1));
        self.scrapes.inc();
        let (getter, client, target) = (&mut self.agent, &self.client, &self.target);
        let agent = async move {
            match &target.agent_url {
                Some(url) => Some(getter.get_url(client, url, timeout).await.map(<[u8]>::to_vec)),
                None => None,
            }
        };
        let page = fetch_page(&mut self.page, client, target, self.engine, timeout);
        let (page, agent) = tokio::join!(page, agent);
        let (now, now_ms) = (Instant::now(), super::scrape_share::unix_ms());
        let last_page = &mut self.last_page;
        let parsed = page.and_then(|(engine, body)| {
            let hash = xxhash_rust::xxh3::xxh3_64(body);
            match last_page {
                Some((last, sample)) if *last == hash => Ok((engine, sample.clone())),
                _ => {
                    let text = std::str::from_utf8(body).map_err(|source| ScrapeError::NotUtf8 {
                        url: self.target.metrics_url(Some(engine)),
                        source,
                    })?;
                    let sample = read_means(engine, text)?;
                    *last_page = Some((hash, sample.clone()));
                    Ok((engine, sample))
                }
            }
        });
        // The agent's reading lands first, so whoever sees this scrape sees both.
        let agent = agent.map(|r| {
            r.and_then(|body| {
                let url = || self.target.agent_url.clone().unwrap_or_default();
                let text = std::str::from_utf8(&body)
                    .map_err(|source| ScrapeError::NotUtf8 { url: url(), source })?;
                parse_agent(text).map_err(ScrapeError::from)
            })
        });
        match agent {
            None => {}
            Some(Ok(a)) => self.board.on_agent(&self.key, a),
            Some(Err(e)) => self.board.on_agent_failure(&self.key, e.to_string()),
        }
        match parsed {
            Ok((engine, sample)) => {
                self.engine = Some(engine);
                if self.info_in == 0 {
                    self.info = self.read_info(engine, timeout).await;
                }
                if let Some(share) = &self.share {
                    // The side page's limits travel with every reading: a replica that never
                    // scrapes this node knows them too.
                    let (info, by, at) = (self.info.clone(), share.me().clone(), now_ms);
                    share.queue(
                        &self.key,
                        Reading { engine, sample: sample.clone(), info, scraped_at_ms: at, by },
                    );
                }
                if self.info_in == 0 {
                    self.board.on_scrape_with_info(&self.key, engine, sample, self.info.clone(), now);
                    self.info_in = INFO_EVERY;
                } else {
                    self.board.on_scrape(&self.key, engine, sample, now);
                }
                self.load.mark_scraped(&self.key, now, now, Duration::from_millis(self.cfg.gauge_lag_ms));
                self.info_in -= 1;
                true
            }
            Err(e) => {
                // Under `auto`, a page that no longer reads as the engine told before is
                // told again at the next scrape (the node may have been replaced).
                if self.target.engine == EngineSetting::Auto {
                    self.engine = None;
                    self.info_in = 0;
                }
                let n = self.board.on_failure(&self.key, e.to_string(), now);
                tracing::debug!(node = %self.key, failures = n, error = %e, "node scrape failed");
                false
            }
        }
    }

    /// Ask the engine's side page for its version and limits (an engine without one, or a
    /// page that does not answer: nothing known).
    async fn read_info(&mut self, engine: Engine, timeout: Duration) -> EngineInfo {
        let Some(path) = info_path(engine) else { return EngineInfo::default() };
        let body = self.page.get(&self.client, &self.target.origin, path, timeout).await;
        read_info(engine, body.ok().and_then(|b| std::str::from_utf8(b).ok()).unwrap_or_default())
    }
}

/// The node's metrics page, and the engine that reads it: the pool's or the one told before,
/// else the engine whose names the page (at `/metrics`, or at TensorRT-LLM's
/// `/prometheus/metrics` when `/metrics` has no engine's) carries.
async fn fetch_page<'a>(
    page: &'a mut Getter,
    client: &reqwest::Client,
    target: &Target,
    engine: Option<Engine>,
    timeout: Duration,
) -> Result<(Engine, &'a [u8]), ScrapeError> {
    if let Some(engine) = engine {
        let body = page.get(client, &target.origin, metrics_path(Some(engine)), timeout).await?;
        return Ok((engine, body));
    }
    let url = target.metrics_url(None);
    let told = |body: &[u8]| std::str::from_utf8(body).ok().and_then(detect);
    let first = match page.get(client, &target.origin, metrics_path(None), timeout).await {
        Ok(body) => told(body).map(Ok),
        Err(e) => Some(Err(e)),
    };
    if let Some(Ok(engine)) = first {
        return Ok((engine, page.body()));
    }
    let first_failed = first.and_then(Result::err);
    match page.get(client, &target.origin, OTHER_METRICS_PATH, timeout).await.map(told) {
        Ok(Some(engine)) => Ok((engine, page.body())),
        // Report what `/metrics` said: the likelier page by far.
        _ => Err(first_failed.unwrap_or(ScrapeError::NoEngine { url })),
    }
}

/// Where one node's (or agent's) pages are read: its kept-alive connection for `http://`, the
/// general client for `https://` and redirects; the last body stays here until the next GET.
#[derive(Default)]
pub(super) struct Getter {
    conn: Option<KeepAlive>,
    /// Whose origin `conn` is for (`None`: not yet made).
    origin: Option<String>,
    /// The last body, when the general client brought it.
    fallback: Vec<u8>,
    from_conn: bool,
}

impl Getter {
    /// The last body got.
    pub(super) fn body(&self) -> &[u8] {
        match (&self.conn, self.from_conn) {
            (Some(c), true) => c.body(),
            _ => &self.fallback,
        }
    }

    /// GET `origin` + `path` within `timeout`.
    pub(super) async fn get(
        &mut self,
        client: &reqwest::Client,
        origin: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<&[u8], ScrapeError> {
        if self.origin.as_deref() != Some(origin) {
            self.origin = Some(origin.to_string());
            self.conn = KeepAlive::for_origin(origin);
        }
        self.from_conn = false;
        if let Some(conn) = self.conn.as_mut() {
            match conn.get(origin, path, timeout, MAX_BODY_BYTES).await? {
                Answer::Ok => self.from_conn = true,
                // Redirects: the general client follows them.
                Answer::Status(s) if (300..400).contains(&s) => {}
                Answer::Status(s) => {
                    let status = reqwest::StatusCode::from_u16(s).unwrap_or(reqwest::StatusCode::BAD_GATEWAY);
                    return Err(ScrapeError::Status { url: format!("{origin}{path}"), status });
                }
            }
        }
        if !self.from_conn {
            self.fallback = fetch(client, &format!("{origin}{path}"), timeout).await?;
        }
        Ok(self.body())
    }

    /// [`Getter::get`] of a whole URL (the agent's).
    pub(super) async fn get_url(
        &mut self,
        client: &reqwest::Client,
        url: &str,
        timeout: Duration,
    ) -> Result<&[u8], ScrapeError> {
        let cut = url.find("://").map_or(0, |i| i + 3);
        let path_at = url[cut..].find('/').map_or(url.len(), |i| cut + i);
        let (origin, path) = url.split_at(path_at);
        self.get(client, origin, if path.is_empty() { "/" } else { path }, timeout).await
    }
}

/// GET `url` within `timeout` through the general client; the body, or why not.
async fn fetch(client: &reqwest::Client, url: &str, timeout: Duration) -> Result<Vec<u8>, ScrapeError> {
    let request = |source| ScrapeError::Request { source };
    let mut resp = client.get(url).timeout(timeout).send().await.map_err(request)?;
    if !resp.status().is_success() {
        return Err(ScrapeError::Status { url: url.to_string(), status: resp.status() });
    }
    let mut body =
        Vec::with_capacity(resp.content_length().unwrap_or(16 << 10).min(MAX_BODY_BYTES as u64) as usize);
    while let Some(chunk) = resp.chunk().await.map_err(request)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ScrapeError::TooLarge { url: url.to_string(), limit: MAX_BODY_BYTES });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
