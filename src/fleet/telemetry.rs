//! Each self-hosted node's telemetry as planning uses it: the engine that reads its pages, the
//! latest scrape, how old it is, how often scraping has failed, what the engine's side page and
//! the NVML agent say, and *recent* latency and throughput figures derived from the change
//! between consecutive scrapes.
//!
//! Pure: time comes in as an argument, nothing here does I/O. The scrape loop
//! (`control::scrape`) is the only writer of the [`TelemetryBoard`]; the snapshot loop copies
//! it into each snapshot. Recent figures are EWMA-smoothed over a few scrapes so one quiet
//! interval does not erase them; a counter that went backwards (the node restarted) resets the
//! baseline instead of producing negative rates. What is not known stays `None`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::engines::info::EngineInfo;
use super::headroom::NodeSignals;
use super::metrics::{AgentSample, HistogramSample, NodeSample};
use crate::canonical::{Engine, NodeKey};

/// Weight of the newest interval in the recent figures: a figure is mostly forgotten after
/// about three intervals that have something to say about it.
pub(crate) const EWMA_ALPHA: f64 = 0.5;

/// Recent figures, each smoothed over the last few scrape intervals that observed it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RecentStats {
    /// Mean time to first token, seconds.
    pub ttft_s: Option<f64>,
    /// Mean time waiting in the queue, seconds.
    pub queue_s: Option<f64>,
    /// Mean prefill time, seconds: the prefill histogram if the node has it, else TTFT − queue.
    pub prefill_s: Option<f64>,
    /// Prompt tokens per request over mean prefill time: one request's prefill speed, tokens/s;
    /// where the engine has no latency histograms, [`RecentStats::counted_prefill_tps`].
    pub prefill_tokens_per_s: Option<f64>,
    /// Prompt tokens over seconds spent in prefill, from the engine's cumulative counters
    /// (llama.cpp `prompt_tokens_total` / `prompt_seconds_total`), tokens/s.
    pub counted_prefill_tps: Option<f64>,
    /// Mean inter-token latency, seconds.
    pub itl_s: Option<f64>,
    /// Mean end-to-end latency, seconds.
    pub e2e_s: Option<f64>,
    /// Requests completed per second.
    pub completions_per_s: Option<f64>,
    /// Prompt tokens per completed request.
    pub prompt_tokens_per_request: Option<f64>,
    /// Share of queried prompt tokens served from the prefix cache (0–1).
    pub prefix_cache_hit_rate: Option<f64>,
}

/// What one interval between two good scrapes showed; `None` where it showed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Interval {
    ttft_s: Option<f64>,
    queue_s: Option<f64>,
    prefill_s: Option<f64>,
    itl_s: Option<f64>,
    e2e_s: Option<f64>,
    completions_per_s: Option<f64>,
    prompt_tokens_per_request: Option<f64>,
    prefix_cache_hit_rate: Option<f64>,
    counted_prefill_tps: Option<f64>,
    /// Seconds generating per generated token, from cumulative counters (llama.cpp).
    counted_itl_s: Option<f64>,
}

fn delta(prev: Option<f64>, cur: Option<f64>) -> Option<f64> {
    Some(cur? - prev?)
}

/// Mean of the observations made between two histogram readings.
fn interval_mean(prev: &Option<HistogramSample>, cur: &Option<HistogramSample>) -> Option<f64> {
    let (p, c) = (prev.as_ref()?, cur.as_ref()?);
    let n = delta(p.count, c.count)?;
    (n > 0.0).then_some(delta(p.sum, c.sum)? / n)
}

fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    let den = den?;
    (den > 0.0).then_some(num? / den)
}

/// Did any cumulative series go backwards between `prev` and `cur`?
fn went_backwards(prev: &NodeSample, cur: &NodeSample) -> bool {
    let counters = |s: &NodeSample| {
        let mut v = vec![
            s.prompt_tokens,
            s.generation_tokens,
            s.prefix_cache_queries,
            s.prefix_cache_hits,
            s.request_success,
            s.preemptions,
            s.prompt_seconds,
            s.generation_seconds,
            s.decode_calls,
        ];
        for h in [&s.ttft, &s.itl, &s.e2e, &s.queue_time, &s.prefill_time] {
            v.push(h.as_ref().and_then(|h| h.count));
            v.push(h.as_ref().and_then(|h| h.sum));
        }
        v
    };
    counters(prev).into_iter().zip(counters(cur)).any(|(p, c)| matches!((p, c), (Some(p), Some(c)) if c < p))
}

fn interval(prev: &NodeSample, cur: &NodeSample, dt: f64) -> Interval {
    let ttft_s = interval_mean(&prev.ttft, &cur.ttft);
    let queue_s = interval_mean(&prev.queue_time, &cur.queue_time);
    let prefill_s = if cur.prefill_time.is_some() {
        interval_mean(&prev.prefill_time, &cur.prefill_time)
    } else {
        ttft_s.zip(queue_s).map(|(t, q)| (t - q).max(0.0))
    };
    let completions = delta(prev.request_success, cur.request_success)
        .or_else(|| delta(prev.e2e.as_ref()?.count, cur.e2e.as_ref()?.count));
    Interval {
        ttft_s,
        queue_s,
        prefill_s,
        itl_s: interval_mean(&prev.itl, &cur.itl),
        e2e_s: interval_mean(&prev.e2e, &cur.e2e),
        completions_per_s: completions.filter(|_| dt > 0.0).map(|n| n / dt),
        prompt_tokens_per_request: ratio(delta(prev.prompt_tokens, cur.prompt_tokens), completions),
        prefix_cache_hit_rate: ratio(
            delta(prev.prefix_cache_hits, cur.prefix_cache_hits),
            delta(prev.prefix_cache_queries, cur.prefix_cache_queries),
        ),
        counted_prefill_tps: ratio(
            delta(prev.prompt_tokens, cur.prompt_tokens),
            delta(prev.prompt_seconds, cur.prompt_seconds),
        ),
        counted_itl_s: ratio(
            delta(prev.generation_seconds, cur.generation_seconds),
            delta(prev.generation_tokens, cur.generation_tokens),
        ),
    }
}

fn ewma(old: Option<f64>, new: Option<f64>) -> Option<f64> {
    match (old, new) {
        (old, None) => old,
        (None, Some(x)) => Some(x),
        (Some(o), Some(x)) => Some(o + EWMA_ALPHA * (x - o)),
    }
}

impl RecentStats {
    fn absorb(&mut self, i: Interval) {
        self.ttft_s = ewma(self.ttft_s, i.ttft_s);
        self.queue_s = ewma(self.queue_s, i.queue_s);
        self.prefill_s = ewma(self.prefill_s, i.prefill_s);
        self.itl_s = ewma(self.itl_s, i.itl_s.or(i.counted_itl_s));
        self.e2e_s = ewma(self.e2e_s, i.e2e_s);
        self.completions_per_s = ewma(self.completions_per_s, i.completions_per_s);
        self.prompt_tokens_per_request = ewma(self.prompt_tokens_per_request, i.prompt_tokens_per_request);
        self.prefix_cache_hit_rate = ewma(self.prefix_cache_hit_rate, i.prefix_cache_hit_rate);
        self.counted_prefill_tps = ewma(self.counted_prefill_tps, i.counted_prefill_tps);
        self.prefill_tokens_per_s =
            ratio(self.prompt_tokens_per_request, self.prefill_s).or(self.counted_prefill_tps);
    }
}

/// One node's telemetry.
#[derive(Debug, Clone, Default)]
pub struct NodeTelemetry {
    /// The engine whose adapter read the latest good scrape (configured, or detected).
    pub engine: Option<Engine>,
    /// The latest good scrape (shared: copying telemetry into a snapshot is cheap).
    pub sample: Option<Arc<NodeSample>>,
    /// When the latest good scrape landed.
    pub last_ok: Option<Instant>,
    /// When the latest scrape, good or bad, ended.
    pub last_attempt: Option<Instant>,
    /// Failed scrapes since the last good one.
    pub consecutive_failures: u32,
    /// Why the latest failed scrape failed (kept after a success, for diagnosis).
    pub last_error: Option<String>,
    /// Good scrapes in all.
    pub scrapes: u64,
    /// Times a counter went backwards (the node restarted) and the baseline was reset.
    pub restarts: u32,
    /// Figures from the change between consecutive good scrapes.
    pub recent: RecentStats,
    /// The NVML agent's latest answer; `None` when there is no agent or it did not answer.
    pub agent: Option<AgentSample>,
    /// Why the agent did not answer, if it did not.
    pub agent_error: Option<String>,
    /// What the engine's side page said (vLLM `/version`, llama.cpp `/props`, TGI `/info`).
    pub info: EngineInfo,
}

impl NodeTelemetry {
    pub fn new() -> NodeTelemetry {
        NodeTelemetry::default()
    }

    /// A good scrape, read as `engine`'s page, landed at `now`. A page of another engine than
    /// the last (the node was replaced) starts the recent figures afresh.
    pub(crate) fn on_scrape(&mut self, engine: Engine, sample: NodeSample, now: Instant) {
        if self.engine != Some(engine) {
            // Another engine answers: the node was replaced, its cache is cold.
            self.restarts += u32::from(self.engine.is_some());
            self.recent = RecentStats::default();
            self.info = EngineInfo::default();
            self.sample = None;
            self.engine = Some(engine);
        }
        if let (Some(prev), Some(at)) = (&self.sample, self.last_ok) {
            if went_backwards(prev, &sample) {
                self.restarts += 1;
            } else {
                let dt = now.saturating_duration_since(at).as_secs_f64();
                self.recent.absorb(interval(prev, &sample, dt));
            }
        }
        self.sample = Some(Arc::new(sample));
        self.last_ok = Some(now);
        self.last_attempt = Some(now);
        self.consecutive_failures = 0;
        self.scrapes += 1;
    }

    /// A scrape failed at `now`. The latest good sample stays, ageing.
    pub(crate) fn on_failure(&mut self, error: String, now: Instant) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.last_error = Some(error);
        self.last_attempt = Some(now);
    }

    /// The NVML agent answered (possibly with `up == false`); vLLM telemetry is untouched.
    pub(crate) fn on_agent(&mut self, agent: AgentSample) {
        self.agent = Some(agent);
        self.agent_error = None;
    }

    /// The NVML agent did not answer; its GPU figures are no longer known.
    pub(crate) fn on_agent_failure(&mut self, error: String) {
        self.agent = None;
        self.agent_error = Some(error);
    }

    /// Time since the latest good scrape; `None` if there never was one.
    pub fn age(&self, now: Instant) -> Option<Duration> {
        self.last_ok.map(|t| now.saturating_duration_since(t))
    }

    /// Older than `stale_after`, or never scraped: planning treats the node as full.
    pub fn is_stale(&self, now: Instant, stale_after: Duration) -> bool {
        self.age(now).is_none_or(|a| a > stale_after)
    }

    /// What planning reads of this node (see [`NodeSignals`]). Where the engine reports a
    /// figure itself (a throughput or hit-rate gauge, a limit on its side page) it stands in for
    /// the one the router would derive, and only then.
    pub(crate) fn signals(&self) -> NodeSignals {
        let s = self.sample.as_deref();
        let cache = s.and_then(|s| s.cache.as_ref());
        let r = &self.recent;
        let kv_capacity_tokens = s.and_then(|s| s.kv_capacity_tokens).or(self.info.kv_capacity_tokens);
        let kv_used_share = s.and_then(|s| ratio(s.kv_used_tokens, kv_capacity_tokens));
        NodeSignals {
            scraped_at: self.last_ok,
            running: s.and_then(|s| s.running),
            waiting: s.and_then(|s| s.waiting),
            max_running: s.and_then(|s| s.max_running).or(self.info.max_running),
            kv_usage: s.and_then(|s| s.kv_cache_usage).or(kv_used_share),
            kv_blocks: cache.and_then(|c| c.num_gpu_blocks),
            block_size: cache.and_then(|c| c.block_size),
            kv_capacity_tokens,
            ttft_s: r.ttft_s,
            queue_s: r.queue_s,
            prefill_tps: r.prefill_tokens_per_s.or(s.and_then(|s| s.reported_prefill_tps)),
            itl_s: r.itl_s,
            // A request holds a slot from leaving the queue to its end.
            service_s: r.e2e_s.map(|e| r.queue_s.map_or(e, |q| (e - q).max(0.0))),
            prefix_hit_rate: r.prefix_cache_hit_rate.or(s.and_then(|s| s.reported_prefix_hit_rate)),
            prompt_tokens_mean: r.prompt_tokens_per_request,
            restarts: self.restarts,
        }
    }
}

/// Every self-hosted node's telemetry, by node key. Written by the scrape loop, read (copied) by
/// the snapshot loop.
#[derive(Debug, Default)]
pub struct TelemetryBoard {
    nodes: Mutex<HashMap<NodeKey, NodeTelemetry>>,
}

impl TelemetryBoard {
    pub fn new() -> Arc<Self> {
        Arc::new(TelemetryBoard::default())
    }

    fn with<R>(&self, key: &NodeKey, f: impl FnOnce(&mut NodeTelemetry) -> R) -> R {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        match nodes.get_mut(key) {
            Some(n) => f(n),
            None => f(nodes.entry(key.clone()).or_default()),
        }
    }

    pub fn get(&self, key: &str) -> Option<NodeTelemetry> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    pub fn all(&self) -> HashMap<NodeKey, NodeTelemetry> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// See [`NodeTelemetry::on_scrape`].
    pub(crate) fn on_scrape(&self, key: &NodeKey, engine: Engine, sample: NodeSample, now: Instant) {
        self.with(key, |n| n.on_scrape(engine, sample, now));
    }

    /// A scrape and what the engine's side page said, recorded together: whoever reads the
    /// board never sees a node's first sample without the limits its side page gave.
    pub(crate) fn on_scrape_with_info(
        &self,
        key: &NodeKey,
        engine: Engine,
        sample: NodeSample,
        info: EngineInfo,
        now: Instant,
    ) {
        self.with(key, |n| {
            n.on_scrape(engine, sample, now);
            n.info = info;
        });
    }

    /// See [`NodeTelemetry::on_failure`]; returns the node's consecutive failures.
    pub(crate) fn on_failure(&self, key: &NodeKey, error: String, now: Instant) -> u32 {
        self.with(key, |n| {
            n.on_failure(error, now);
            n.consecutive_failures
        })
    }

    /// See [`NodeTelemetry::on_agent`].
    pub(crate) fn on_agent(&self, key: &NodeKey, agent: AgentSample) {
        self.with(key, |n| n.on_agent(agent));
    }

    /// See [`NodeTelemetry::on_agent_failure`].
    pub(crate) fn on_agent_failure(&self, key: &NodeKey, error: String) {
        self.with(key, |n| n.on_agent_failure(error));
    }

    /// [`NodeTelemetry::signals`] of one node, without copying the rest.
    pub(crate) fn signals(&self, key: &str) -> Option<NodeSignals> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).get(key).map(NodeTelemetry::signals)
    }

    /// When the node's latest good scrape landed, without copying the rest.
    pub(crate) fn last_ok(&self, key: &str) -> Option<Instant> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).get(key).and_then(|n| n.last_ok)
    }

    /// The engine that reads the node's pages (`None`: not yet told), without copying the rest.
    pub fn engine(&self, key: &str) -> Option<Engine> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).get(key).and_then(|n| n.engine)
    }

    /// Drop a node that left the fleet.
    pub fn forget(&self, key: &str) {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// Keep only the nodes for which `keep(key)` holds.
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| keep(k.as_str()));
    }
}

#[cfg(test)]
#[path = "telemetry_tests.rs"]
mod tests;
