//! Headroom: may this node take this request now, and how soon would its first token come?
//!
//! Pure arithmetic over what the node last reported (queue, running, KV use, recent TTFT and
//! prefill rate), the router's own requests on it (`fleet::load` joins the two), and the pool's
//! capacity and reserve. The predictor is simple on purpose: a request waits for a free
//! sequence slot (slots turn over every mean service time), then as long as the node's recent
//! requests took from leaving the queue to their first token (TTFT minus queue time: prefill of
//! an average prompt plus engine steps), corrected for how much longer or shorter this
//! request's uncached prompt is than the average, at the node's prefill rate. Before the node
//! has measured anything: prefill at the prefill rate (or a default) plus one step. A missing
//! signal is unknown, and a node with no fresh scrape is not admitted (planning may still serve
//! a pool none of whose nodes is fresh, by in-flight count alone, when nothing else can take
//! the request: `route::blind`).
//!
//! A node takes the request only if the prediction stays under `slo.ttft_ms × (1 − slo.margin)`,
//! it keeps the pool's reserve free, it would not queue, and the prompt fits the free KV cache;
//! otherwise the request spills with the reason that failed (`stale`, `reserve`, `queue`, `kv`,
//! `ttft`). Among nodes that qualify, planning puts the node holding the affinity key's prefix
//! cache first (rendezvous hash of key and node over the nodes no operator holds, so a drained
//! node's projects move to their next node by the same hash on every replica), then the soonest
//! first token. The reserve is a share of each node's `max_running` or reported slots (default
//! 20 %, in whole slots: a 2-slot llama.cpp node keeps none); the snapshot releases it while a
//! hosted backend that shares a task with the pool is down (every breaker open, its quota used
//! up, or its availability below 0.1) and holds it again when the provider recovers.
//!
//! Without a signal: no TTFT histogram (llama.cpp, TGI, Triton), the prediction prefills the
//! uncached prompt at the measured prefill rate (llama.cpp: prompt tokens ÷ prompt seconds
//! between scrapes, else its throughput gauge) plus one step, instead of correcting the node's
//! recent TTFT; no service time (llama.cpp has no request latencies), slots are taken to turn
//! over every 2 s; no KV figure or capacity, no KV check (the slot count and queue decide); no
//! prefix-cache figures, every prompt token counts as uncached; no slot count on the node
//! (vLLM, SGLang), the pool's `max_running`.

use std::time::Duration;

use tokio::time::Instant;

use super::load::LoadView;

/// What planning knows about one node from its telemetry (copied into each snapshot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSignals {
    /// When the last good scrape landed; `None`: never.
    pub scraped_at: Option<Instant>,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// The node's own limit on requests at once (llama.cpp's slots, TensorRT-LLM's active
    /// requests, TGI's concurrent requests), where it reports one; below the pool's
    /// `max_running`, it is the node's capacity.
    pub max_running: Option<f64>,
    /// KV-cache use, 0–1.
    pub kv_usage: Option<f64>,
    pub kv_blocks: Option<u64>,
    pub block_size: Option<u64>,
    /// KV-cache capacity in tokens, where the engine reports it as one number (SGLang, TGI).
    pub kv_capacity_tokens: Option<f64>,
    /// Recent mean time to first token, seconds.
    pub ttft_s: Option<f64>,
    /// Recent mean time spent queued, seconds.
    pub queue_s: Option<f64>,
    /// Recent prefill rate, prompt tokens per second.
    pub prefill_tps: Option<f64>,
    /// Recent mean inter-token latency (one engine step), seconds.
    pub itl_s: Option<f64>,
    /// Recent mean time a request holds a slot (end to end minus queue), seconds.
    pub service_s: Option<f64>,
    /// Recent share of prompt tokens served from the prefix cache.
    pub prefix_hit_rate: Option<f64>,
    /// Recent mean prompt size, tokens.
    pub prompt_tokens_mean: Option<f64>,
    /// Times its engine was seen to restart or be replaced: a new count means a cold cache.
    pub restarts: u32,
}

/// The pool-wide numbers a node is judged against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolLimits {
    /// Sequences one node runs at once.
    pub max_running: u32,
    /// Share of capacity kept free now (0 when the reserve is released).
    pub reserve: f64,
    /// A scrape older than this makes the node count as full.
    pub stale_after: Duration,
}

/// Why a node did not take a request (the spill reasons SREs see).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpillReason {
    /// Breaker open, quarantined, or not ready.
    Down,
    /// An operator drained or disabled it.
    Drained,
    /// No good scrape within the staleness bound.
    Stale,
    /// Taking it would eat into the failover reserve.
    Reserve,
    /// It would wait in the node's queue.
    Queue,
    /// Its prompt would not fit the free KV cache.
    Kv,
    /// Its predicted time to first token breaks the task's SLO.
    Ttft,
    /// The pool had room, but it takes this request's project second while it cannot take
    /// them all (`route::sticky`): the project keeps its hosted chain.
    Sticky,
}

impl SpillReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SpillReason::Down => "down",
            SpillReason::Drained => "drained",
            SpillReason::Stale => "stale",
            SpillReason::Reserve => "reserve",
            SpillReason::Queue => "queue",
            SpillReason::Kv => "kv",
            SpillReason::Ttft => "ttft",
            SpillReason::Sticky => "sticky",
        }
    }
}

/// Fallbacks when a signal has not been seen yet.
const DEFAULT_STEP_S: f64 = 0.02;
const DEFAULT_PREFILL_TPS: f64 = 10_000.0;
const DEFAULT_SERVICE_S: f64 = 2.0;

/// The node's prefill speed, tokens per second: as measured, or the default, but no faster than
/// a late request of the router's showed it can be (`LoadView::prefill_ceiling_tps`).
pub fn prefill_tps(sig: &NodeSignals, load: LoadView) -> f64 {
    let tps = sig.prefill_tps.filter(|t| *t > 0.0).unwrap_or(DEFAULT_PREFILL_TPS);
    load.prefill_ceiling_tps.map_or(tps, |ceiling| tps.min(f64::from(ceiling)))
}

/// How long a request holds its slot, once running (the engine's end-to-end time less its
/// queue time), or the fallback.
pub fn service_s(sig: &NodeSignals) -> f64 {
    sig.service_s.filter(|s| *s > 0.0).unwrap_or(DEFAULT_SERVICE_S)
}

/// Sequences the node runs at once: the pool's `max_running`, or the node's own smaller limit.
pub fn slots(sig: &NodeSignals, limits: &PoolLimits) -> f64 {
    let pool = f64::from(limits.max_running.max(1));
    sig.max_running.filter(|n| *n >= 1.0).map_or(pool, |n| n.floor().min(pool))
}

/// Predicted time to first token (seconds) for a request of `prompt_tokens` on this node, of
/// which `cached` are in its prefix cache as the router knows it (`fleet::prefix_cache`; `None`:
/// unknown, the node's recent hit rate stands in).
pub(crate) fn predict_ttft(
    sig: &NodeSignals,
    load: LoadView,
    limits: &PoolLimits,
    prompt_tokens: u32,
    cached: Option<u32>,
) -> f64 {
    let at_node = load.at_node(sig.running, sig.waiting);
    let slots = slots(sig, limits);
    // Requests ahead of this one in the queue once every slot is busy.
    let ahead = (at_node + 1.0 - slots).max(0.0);
    let queue_wait = ahead * service_s(sig) / slots;
    let hit_rate = sig.prefix_hit_rate.unwrap_or(0.0).clamp(0.0, 1.0);
    let uncached = match cached {
        Some(cached) => f64::from(prompt_tokens.saturating_sub(cached)),
        None => f64::from(prompt_tokens) * (1.0 - hit_rate),
    };
    let tps = prefill_tps(sig, load);
    let step = sig.itl_s.unwrap_or(DEFAULT_STEP_S);
    let to_first_token = match sig.ttft_s {
        Some(ttft) => {
            let measured = (ttft - sig.queue_s.unwrap_or(0.0)).max(0.0);
            let usual = sig.prompt_tokens_mean.unwrap_or(f64::from(prompt_tokens)) * (1.0 - hit_rate);
            (measured + (uncached - usual) / tps).max(step)
        }
        None => uncached / tps + step,
    };
    queue_wait + to_first_token
}

/// Each input of [`predict_ttft`] and [`admit`], and whether the node's telemetry gave it
/// (`false`: planning uses the pool's setting or a default). What `/admin/backends` shows per
/// node, since engines report different things.
pub fn predictor_inputs(sig: &NodeSignals) -> [(&'static str, bool); 11] {
    let kv_capacity = sig.kv_blocks.zip(sig.block_size).is_some() || sig.kv_capacity_tokens.is_some();
    [
        ("running", sig.running.is_some()),
        ("waiting", sig.waiting.is_some()),
        ("slots", sig.max_running.is_some()),
        ("kv_cache", sig.kv_usage.is_some() && kv_capacity),
        ("ttft", sig.ttft_s.is_some()),
        ("queue_time", sig.queue_s.is_some()),
        ("prefill_rate", sig.prefill_tps.is_some()),
        ("step_time", sig.itl_s.is_some()),
        ("service_time", sig.service_s.is_some()),
        ("prefix_hit_rate", sig.prefix_hit_rate.is_some()),
        ("prompt_mean", sig.prompt_tokens_mean.is_some()),
    ]
}

/// Whether the node's last good scrape is within the staleness bound.
pub fn fresh(sig: &NodeSignals, limits: &PoolLimits, now: Instant) -> bool {
    sig.scraped_at.is_some_and(|at| now.saturating_duration_since(at) <= limits.stale_after)
}

/// Why the node may not take the request, or `None` with the predicted TTFT if it may.
/// `slo_s` already includes the safety margin.
pub fn admit(
    sig: &NodeSignals,
    load: LoadView,
    limits: &PoolLimits,
    prompt_tokens: u32,
    cached: Option<u32>,
    slo_s: f64,
    now: Instant,
) -> Result<f64, SpillReason> {
    if !fresh(sig, limits, now) {
        return Err(SpillReason::Stale);
    }
    let slots = slots(sig, limits);
    // The router's own requests exactly, and what the reading shows beyond them (`fleet::load`).
    let at_node = load.at_node(sig.running, sig.waiting);
    // The reserve keeps whole slots free: a 2-slot node has none to keep at 20 %.
    let reserved = (slots * limits.reserve.max(0.0) + 1e-9).floor();
    if reserved >= 1.0 && at_node + 1.0 > (slots - reserved).max(1.0) {
        return Err(SpillReason::Reserve);
    }
    if load.queued(sig.waiting) > 0.0 || at_node + 1.0 > slots {
        return Err(SpillReason::Queue);
    }
    if let Some(kv) = sig.kv_usage {
        // The share of the cache this request would take: whole blocks where the engine has
        // them, else tokens of the capacity it reports; unknown capacity, no check.
        let share = match (sig.kv_blocks, sig.block_size, sig.kv_capacity_tokens) {
            (Some(blocks), Some(size), _) if blocks > 0 && size > 0 => {
                Some((f64::from(prompt_tokens).div_euclid(size as f64) + 1.0) / blocks as f64)
            }
            (_, _, Some(capacity)) if capacity >= 1.0 => Some(f64::from(prompt_tokens) / capacity),
            _ => None,
        };
        // Requests sent since the reading hold cache too: count each like this one.
        if let Some(share) = share {
            if kv + share * (1.0 + load.unseen as f64) > (1.0 - limits.reserve).min(0.95) {
                return Err(SpillReason::Kv);
            }
        }
    }
    let predicted = predict_ttft(sig, load, limits, prompt_tokens, cached);
    if predicted > slo_s {
        return Err(SpillReason::Ttft);
    }
    Ok(predicted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> PoolLimits {
        PoolLimits { max_running: 10, reserve: 0.2, stale_after: Duration::from_secs(5) }
    }

    fn sig(now: Instant) -> NodeSignals {
        NodeSignals {
            scraped_at: Some(now),
            running: Some(2.0),
            waiting: Some(0.0),
            max_running: None,
            kv_usage: Some(0.1),
            kv_blocks: Some(1000),
            block_size: Some(16),
            kv_capacity_tokens: None,
            ttft_s: Some(0.05),
            queue_s: Some(0.0),
            prefill_tps: Some(5000.0),
            itl_s: Some(0.02),
            service_s: Some(1.0),
            prefix_hit_rate: Some(0.0),
            prompt_tokens_mean: Some(500.0),
            restarts: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_node_predicts_its_recent_ttft_corrected_for_prompt_size() {
        let now = Instant::now();
        // Recent TTFT 0.05 s for 500-token prompts; 1000 tokens is 500 more at 5000 tok/s.
        let t = admit(&sig(now), LoadView::default(), &limits(), 1000, None, 1.0, now).unwrap();
        assert!((t - 0.15).abs() < 1e-9, "{t}");
        // An average prompt: exactly the recent TTFT. A tiny one: never less than one step.
        assert!((predict_ttft(&sig(now), LoadView::default(), &limits(), 500, None) - 0.05).abs() < 1e-9);
        assert!((predict_ttft(&sig(now), LoadView::default(), &limits(), 1, None) - 0.02).abs() < 1e-9);
        // Half of every prompt cached: the 500 extra tokens cost half as much.
        let cached = NodeSignals { prefix_hit_rate: Some(0.5), ..sig(now) };
        assert!((predict_ttft(&cached, LoadView::default(), &limits(), 1000, None) - 0.10).abs() < 1e-9);
        // What the router knows this request finds cached overrides the node's rate: the whole
        // prompt on a node that never saw its session, 100 tokens on the one that served it.
        assert!((predict_ttft(&cached, LoadView::default(), &limits(), 1000, Some(0)) - 0.20).abs() < 1e-9);
        assert!((predict_ttft(&cached, LoadView::default(), &limits(), 1000, Some(800)) - 0.04).abs() < 1e-9);
        // Before anything is measured: prefill at the rate plus one step.
        let fresh = NodeSignals { ttft_s: None, ..sig(now) };
        assert!((predict_ttft(&fresh, LoadView::default(), &limits(), 1000, None) - 0.22).abs() < 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn queueing_adds_slot_turnover() {
        let now = Instant::now();
        let busy = NodeSignals { running: Some(10.0), waiting: Some(4.0), ..sig(now) };
        // 14 at the node, 10 slots: 5 ahead (this one included) × 1 s / 10 slots = 0.5 s.
        let t = predict_ttft(&busy, LoadView::default(), &limits(), 1000, None);
        assert!((t - 0.65).abs() < 1e-9, "{t}");
    }

    #[tokio::test(start_paused = true)]
    async fn each_spill_reason_in_turn() {
        let now = Instant::now();
        let l = limits();
        let old = NodeSignals { scraped_at: Some(now), ..sig(now) };
        let later = now + Duration::from_secs(6);
        assert_eq!(admit(&old, LoadView::default(), &l, 10, None, 1.0, later), Err(SpillReason::Stale));
        let never = NodeSignals { scraped_at: None, ..sig(now) };
        assert_eq!(admit(&never, LoadView::default(), &l, 10, None, 1.0, now), Err(SpillReason::Stale));
        // 8 slots usable of 10 with a 0.2 reserve: 7 at the node + this one fits, 8 does not.
        let seven = NodeSignals { running: Some(7.0), ..sig(now) };
        assert!(admit(&seven, LoadView::default(), &l, 10, None, 1.0, now).is_ok());
        let eight = NodeSignals { running: Some(8.0), ..sig(now) };
        assert_eq!(admit(&eight, LoadView::default(), &l, 10, None, 1.0, now), Err(SpillReason::Reserve));
        // The router's unseen sends count before the node reports them.
        let credit = LoadView { in_flight: 6, unseen: 6, sent: 6, ..LoadView::default() };
        assert_eq!(admit(&sig(now), credit, &l, 10, None, 1.0, now), Err(SpillReason::Reserve));
        // Reserve released: fills to capacity, then queue.
        let open = PoolLimits { reserve: 0.0, ..l };
        let nine = NodeSignals { running: Some(9.0), ..sig(now) };
        assert!(admit(&nine, LoadView::default(), &open, 10, None, 1.0, now).is_ok());
        let ten = NodeSignals { running: Some(10.0), ..sig(now) };
        assert_eq!(admit(&ten, LoadView::default(), &open, 10, None, 1.0, now), Err(SpillReason::Queue));
        let waiting = NodeSignals { waiting: Some(1.0), ..sig(now) };
        assert_eq!(admit(&waiting, LoadView::default(), &open, 10, None, 1.0, now), Err(SpillReason::Queue));
        // KV: 0.75 used + a 2000-token prompt (126 blocks of 1000) > 0.8.
        let full_kv = NodeSignals { kv_usage: Some(0.75), ..sig(now) };
        assert_eq!(admit(&full_kv, LoadView::default(), &l, 2000, None, 9.0, now), Err(SpillReason::Kv));
        assert!(admit(&full_kv, LoadView::default(), &l, 100, None, 9.0, now).is_ok());
        // TTFT: 3500 tokens more than usual at 5000 tok/s = 0.7 s more > a 0.5 s target.
        assert_eq!(admit(&sig(now), LoadView::default(), &l, 4000, None, 0.5, now), Err(SpillReason::Ttft));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_reports_fewer_slots_is_held_to_them() {
        let now = Instant::now();
        let open = PoolLimits { reserve: 0.0, ..limits() };
        // llama.cpp with 2 slots in a pool configured for 10: the third request would queue.
        let two = NodeSignals { max_running: Some(2.0), running: Some(1.0), ..sig(now) };
        assert!(admit(&two, LoadView::default(), &open, 10, None, 1.0, now).is_ok());
        let full = NodeSignals { running: Some(2.0), ..two.clone() };
        assert_eq!(admit(&full, LoadView::default(), &open, 10, None, 1.0, now), Err(SpillReason::Queue));
        // The reserve keeps whole slots: 20 % of 2 slots is none, so both serve.
        let reserved = PoolLimits { reserve: 0.2, ..open };
        assert!(admit(&two, LoadView::default(), &reserved, 10, None, 1.0, now).is_ok());
        // Queue turnover is over the node's 2 slots: 3 ahead × 1 s / 2 slots = 1.5 s, + 0.05 s.
        let four = NodeSignals { running: Some(4.0), ..two.clone() };
        let t = predict_ttft(&four, LoadView::default(), &open, 500, None);
        assert!((t - 1.55).abs() < 1e-9, "{t}");
        // A limit above the pool's does not raise it; a nonsense one is ignored.
        assert_eq!(slots(&NodeSignals { max_running: Some(64.0), ..sig(now) }, &open), 10.0);
        assert_eq!(slots(&NodeSignals { max_running: Some(0.0), ..sig(now) }, &open), 10.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_reported_in_tokens_is_checked_in_tokens() {
        let now = Instant::now();
        let l = limits();
        // 0.7 of 10 000 tokens used, no block geometry: a 1500-token prompt would make 0.85 > 0.8.
        let tokens = NodeSignals {
            kv_usage: Some(0.7),
            kv_blocks: None,
            block_size: None,
            kv_capacity_tokens: Some(10_000.0),
            ..sig(now)
        };
        assert_eq!(admit(&tokens, LoadView::default(), &l, 1500, None, 9.0, now), Err(SpillReason::Kv));
        assert!(admit(&tokens, LoadView::default(), &l, 500, None, 9.0, now).is_ok());
        // Unknown capacity: no KV check at all.
        let unknown = NodeSignals { kv_capacity_tokens: None, ..tokens };
        assert!(admit(&unknown, LoadView::default(), &l, 1500, None, 9.0, now).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_inputs_say_what_the_telemetry_gave() {
        let now = Instant::now();
        let given = |s: &NodeSignals| -> Vec<&str> {
            predictor_inputs(s).into_iter().filter(|(_, had)| *had).map(|(n, _)| n).collect()
        };
        assert_eq!(given(&NodeSignals::default()), Vec::<&str>::new());
        // What llama.cpp gives: counts, slots, counter rates; no latency histograms, no KV.
        let llamacpp = NodeSignals {
            running: Some(0.0),
            waiting: Some(0.0),
            max_running: Some(2.0),
            prefill_tps: Some(900.0),
            itl_s: Some(0.01),
            ..NodeSignals::default()
        };
        assert_eq!(given(&llamacpp), ["running", "waiting", "slots", "prefill_rate", "step_time"]);
        assert_eq!(predictor_inputs(&sig(now)).iter().filter(|(_, had)| *had).count(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_signals_fall_back_without_panicking() {
        let now = Instant::now();
        let bare = NodeSignals { scraped_at: Some(now), ..NodeSignals::default() };
        let t = admit(&bare, LoadView::default(), &limits(), 1000, None, 5.0, now).unwrap();
        // 1000 tokens at the default 10k tok/s + the default step.
        assert!((t - 0.12).abs() < 1e-9, "{t}");
        // Measured 0.3 s TTFT of which 0.1 s queued; no prompt mean: this prompt counts as usual.
        let measured = NodeSignals { ttft_s: Some(0.3), queue_s: Some(0.1), ..bare };
        assert!((predict_ttft(&measured, LoadView::default(), &limits(), 1000, None) - 0.2).abs() < 1e-9);
    }

    #[test]
    fn a_late_request_slows_the_predicted_prefill_below_the_measured_or_default_speed() {
        let limits = limits();
        let unmeasured = NodeSignals::default();
        let bounded = LoadView { prefill_ceiling_tps: Some(400), ..LoadView::default() };
        assert_eq!(prefill_tps(&unmeasured, LoadView::default()), DEFAULT_PREFILL_TPS);
        assert_eq!(prefill_tps(&unmeasured, bounded), 400.0);
        let measured = NodeSignals { prefill_tps: Some(300.0), ..NodeSignals::default() };
        assert_eq!(prefill_tps(&measured, bounded), 300.0, "the slower of the two");
        // 400 cold tokens: a second at the bound, where the default would say 40 ms.
        let ttft = predict_ttft(&unmeasured, bounded, &limits, 400, Some(0));
        assert!((1.0..1.1).contains(&ttft), "{ttft}");
    }
}
