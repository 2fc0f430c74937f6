//! Sticky spill: when a local pool cannot take every project, *which* projects it takes first
//! stays the same from one request to the next, so a project is not bounced between its
//! fleet node and a hosted provider (both prompt caches go cold, and hosted rate limits count
//! the uncached tokens).
//!
//! Each pool has a **share** in [0, 1]: the share of affinity keys it takes first. A key is
//! in the share when its uniform `u(key, pool)` (a hash of the two, the same on every
//! replica, independent of time) is below the share, so keys join and leave in one fixed
//! order as the share moves, and a share that holds still moves nobody.
//!
//! - A key **in** the share is planned on the fleet first and stays on its node while the
//!   node is within its SLO: the failover reserve is not held against it (the reserve absorbs
//!   the fluctuations of the fleet's own projects; the share keeps it free on average).
//! - A key **outside** the share keeps its hosted chain (the sticky chain of
//!   `strategy: adaptive`) even while a node has room; the pool stays in its plan as a
//!   fallback after the hosted backends.
//!
//! The share is held by a small controller stepped about once a second from the pool's
//! **occupancy** (what its fresh nodes hold over what they may hold outside the reserve, so 1
//! is the reserve line): while the share is 1 the reserve holds per request and the pool is
//! full at 1; below 1 its own projects may use the reserve and it is full at `1 + margin`.
//! A pool most of whose nodes would refuse a request of their usual size even without the
//! reserve (queue, KV cache, predicted TTFT past the SLO) is full too, whatever its count;
//! so is one near the line (above `1 − margin`) that refused more than `refused_max` of its
//! own projects' requests since the last step (each would bounce out and back: the plans
//! report it through [`ShareFeedback`], at a share of 1 too, where every project is its own).
//!
//! - **Full:** the share shrinks, multiplicatively (`down_per_sec`). A pool at 1 that refused
//!   a fair sample of its projects (`cut_min_requests`), more than it can take (its slots
//!   outside the reserve over the time a request holds one, against the rate they were
//!   planned), goes at once to the fraction it can take: a crowd's onset moves the projects
//!   that must leave in one step, not over a minute of refusals that each bounce a project out
//!   and back. At 1 its refusals count for nothing else.
//! - **Clear headroom** (at or below `margin` under the line where it is full, none of its
//!   projects refused): no sooner than `hold_secs` after it last shrank, it grows back
//!   (`up_per_sec`), so a project that spilled keeps its hosted chain for the hold window.
//! - **Far under that line** (`return_below` of it): the crowd has gone, and the share
//!   returns toward the one that would fill the pool to the line (what the pool holds scales
//!   with its share), with time constant `return_secs` and no hold, so the fleet does not sit
//!   idle while the projects it sent away pay hosted prices; if every project would fit
//!   under that threshold (occupancy over share), they all come home at once.
//! - In between it holds, so the fleet runs near its reserve line on average, as without
//!   stickiness, and the reserve absorbs the fluctuations.
//!
//! Below full load the share sits at 1 and planning is exactly what it was without
//! stickiness. With the wait queue on (`queue.enabled`), a pool full to its line whose
//! requests all found a slot in time (none refused in the step) counts as busy, not full: only
//! its refusals, requests with no slot in time, shrink its share.
//!
//! Pure: the controller takes `dt`, the occupancy and the refusals; planning reads the share
//! from the snapshot. Replicas compute the share from the same nodes' telemetry and their own
//! refusals, so they agree up to what each has sent and refused since the last scrape.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::canonical::BackendName;
use crate::config::{StickySpillConfig, Strategy};
use crate::fleet::headroom::{self, PoolLimits};
use crate::fleet::load::LoadView;
use crate::snapshot::{BackendView, BreakerView, NodeView, Snapshot};

pub use super::share_feedback::{Kept, ShareFeedback};

/// Fixed seed of the membership hash ("STICKY" in ASCII); part of the format, like
/// `chain`'s.
const SEED: u64 = 0x5354_4943_4b59;

/// The least time between two steps of the shares. The refusals a step weighs (against
/// `refused_max` and `cut_min_requests`) are those of at least this long, however often the
/// snapshot is rebuilt: every 100 ms live, every scrape in the simulator, which then agree.
pub(crate) const STEP: std::time::Duration = std::time::Duration::from_secs(1);

/// The usual prompt, in tokens, of a pool whose engines report none before the router has
/// planned any request on it.
const USUAL_PROMPT_TOKENS: f64 = 1000.0;

/// The least occupancy the return divides by, so an empty pool's target is finite.
const MIN_OCCUPANCY: f64 = 0.05;

/// The uniform in (0, 1) that `key` draws for `pool`.
pub(crate) fn uniform(key: u64, pool: &str) -> f64 {
    let h = xxhash_rust::xxh3::xxh3_64_with_seed(pool.as_bytes(), key ^ SEED);
    ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// Does `pool` take `key` first at this share? Always at a share of 1.
pub(crate) fn takes_first(key: u64, pool: &str, share: f64) -> bool {
    share >= 1.0 || uniform(key, pool) < share
}

/// Whether stickiness applies to a request: on, `strategy: adaptive`, and a hosted backend
/// of the request is up to keep its project (else everyone comes home). Its pools count
/// whether they could take it ([`ShareFeedback`]), at a share of 1 too.
pub(crate) fn applies(cfg: &StickySpillConfig, strategy: Strategy, hosted_up: bool) -> bool {
    cfg.enabled && strategy == Strategy::Adaptive && hosted_up
}

/// Whether stickiness decides for this pool and key: `Some(true)` the pool takes the key
/// first (and stays its node past the reserve), `Some(false)` the key keeps its hosted chain,
/// `None` it does not ([`applies`] is false, or the share is 1: planned as without it).
pub(crate) fn membership(view: &BackendView, applies: bool, key: u64) -> Option<bool> {
    (applies && view.share < 1.0).then(|| takes_first(key, &view.name, view.share))
}

/// How full a pool is, for its share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolLoad {
    /// What its fresh, usable nodes hold over what they may hold outside the reserve
    /// (`slots − reserved` each), counting what the router sent since each scrape.
    pub occupancy: f64,
    /// Most of those nodes would refuse a request of their usual size even without the
    /// reserve (queue, KV cache or predicted TTFT past `slo_s`): full, whatever the count.
    pub refusing: bool,
    /// Requests a second those nodes finish when full to the reserve line: each slot outside
    /// the reserve over the time a request holds it.
    pub takes_per_sec: f64,
}

/// The pool's load now; `None` when no node is fresh and usable (nothing to steer by).
/// `slo_s`: the tightest first-token target (with its margin) of the tasks it serves;
/// `own_prompt`: the mean prompt of the requests the router planned on it lately, the usual
/// size on a node whose engine reports none (llama.cpp's metrics have no request count).
pub(crate) fn pool_load(
    view: &BackendView,
    load: &dyn Fn(&NodeView) -> LoadView,
    slo_s: f64,
    own_prompt: Option<f64>,
    now: Instant,
) -> Option<PoolLoad> {
    let (mut held, mut room, mut fresh, mut refusing, mut rate) = (0.0, 0.0, 0u32, 0u32, 0.0);
    let no_reserve = PoolLimits { reserve: 0.0, ..view.limits };
    for node in &view.nodes {
        let usable = node.held.is_none() && node.quarantine.is_none() && node.breaker != BreakerView::Open;
        if !usable || !headroom::fresh(&node.signals, &view.limits, now) {
            continue;
        }
        let slots = headroom::slots(&node.signals, &view.limits);
        let reserved = (slots * view.limits.reserve.max(0.0) + 1e-9).floor();
        let sig = &node.signals;
        let l = load(node);
        held += l.at_node(sig.running, sig.waiting);
        room += (slots - reserved).max(1.0);
        rate += (slots - reserved).max(1.0) / headroom::service_s(sig);
        fresh += 1;
        let usual = sig.prompt_tokens_mean.or(own_prompt).unwrap_or(USUAL_PROMPT_TOKENS);
        let usual = usual.clamp(1.0, f64::from(u32::MAX)) as u32;
        refusing += u32::from(headroom::admit(sig, l, &no_reserve, usual, None, slo_s, now).is_err());
    }
    (fresh > 0).then(|| PoolLoad {
        occupancy: held / room,
        refusing: refusing * 2 > fresh,
        takes_per_sec: rate,
    })
}

/// One pool's share and how long since it last shrank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    pub share: f64,
    /// Seconds since the share last shrank (infinite before it ever did).
    pub since_shrink: f64,
}

impl Default for Share {
    fn default() -> Self {
        Share { share: 1.0, since_shrink: f64::INFINITY }
    }
}

impl Share {
    /// Advance by `dt` seconds at this load; returns the new share. Unknown load leaves it
    /// as it is; stickiness off puts it at 1.
    pub fn step(&mut self, load: Option<PoolLoad>, kept: Kept, dt: f64, cfg: &StickySpillConfig) -> f64 {
        if !cfg.enabled {
            *self = Share::default();
            return 1.0;
        }
        if dt.is_nan() || dt <= 0.0 {
            return self.share;
        }
        self.since_shrink += dt;
        // At a share of 1 the pool holds its reserve per request, so it is full at the line;
        // below 1 the projects it keeps may use the reserve, and it is full `margin` above it.
        let full = if self.share < 1.0 { 1.0 + cfg.margin } else { 1.0 };
        // Refusing its own projects is a pool full for them, once it is near the line (below
        // it, a refusal is one node's burst, and shrinking would only idle the others).
        let planned = (kept.taken + kept.refused) as f64;
        // At a share of 1 every project is its own, and its refusals count only on a fair
        // sample (`cut_min_requests`) of more than it can take in the step (its slots outside
        // the reserve over the time a request holds one): then it cuts to that at once.
        let can_take = load.map_or(f64::INFINITY, |l| l.takes_per_sec * dt / planned.max(1.0));
        let sampled = cfg.cut_min_requests > 0 && planned >= cfg.cut_min_requests as f64;
        let cut = self.share >= 1.0 && sampled && can_take < 1.0;
        let refuses_own = kept.refused as f64 > cfg.refused_max * planned && (self.share < 1.0 || cut);
        // Where it grows back: `margin` under where it is full.
        let line = full - cfg.margin;
        match load {
            Some(l)
                if l.refusing || l.occupancy >= full || (refuses_own && l.occupancy >= 1.0 - cfg.margin) =>
            {
                self.share *= (1.0 - cfg.down_per_sec * dt).max(0.0);
                if cut && refuses_own {
                    // Rather than refuse the rest while the share shrinks.
                    self.share = self.share.min(can_take);
                }
                self.since_shrink = 0.0;
            }
            // Far under the line the crowd has gone: return toward the share that would fill
            // the pool to the line (what it holds scales with the share), without the hold.
            Some(l) if kept.refused == 0 && l.occupancy <= cfg.return_below * line => {
                let target = (self.share * line / l.occupancy.max(MIN_OCCUPANCY)).min(1.0);
                let rate = (dt / cfg.return_secs as f64).min(1.0);
                // Every project would fit under that threshold: all come home at once.
                let all_fit = l.occupancy <= cfg.return_below * line * self.share;
                self.share = if all_fit { 1.0 } else { self.share + (target - self.share).max(0.0) * rate };
            }
            Some(l)
                if kept.refused == 0 && l.occupancy <= line && self.since_shrink >= cfg.hold_secs as f64 =>
            {
                self.share = (self.share + cfg.up_per_sec * dt).min(1.0);
            }
            _ => {}
        }
        self.share
    }
}

/// Every local pool's share, stepped (at most once a [`STEP`]) after a snapshot from that
/// snapshot's occupancy.
#[derive(Debug, Default)]
pub struct PoolShares {
    shares: BTreeMap<BackendName, Share>,
    /// Each pool's mean prompt over the last step that planned requests on it.
    own_prompt: BTreeMap<BackendName, f64>,
    last: Option<Instant>,
}

impl PoolShares {
    /// A pool's share now (1 for one never stepped).
    pub fn get(&self, pool: &str) -> f64 {
        self.shares.get(pool).map_or(1.0, |s| s.share)
    }

    /// Step every pool of `snap` by the time since the last step, at its occupancy now, once
    /// [`STEP`] has passed since that step; sooner, the plans' feedback keeps adding up.
    pub fn step(
        &mut self,
        snap: &Snapshot,
        load: &dyn Fn(&NodeView) -> LoadView,
        feedback: &ShareFeedback,
        now: Instant,
    ) {
        let dt = match self.last {
            Some(last) if now.saturating_duration_since(last) < STEP => return,
            Some(last) => now.saturating_duration_since(last).as_secs_f64(),
            None => 0.0,
        };
        self.last = Some(now);
        let kept = feedback.take();
        let cfg = &snap.config.balancing.sticky_spill;
        for view in snap.backends.iter().filter(|b| b.is_local()) {
            let slo_s = snap
                .config
                .tasks
                .iter()
                .filter(|t| t.backends.contains(&view.name))
                .map(|t| t.slo.ttft_ms as f64 / 1000.0 * (1.0 - t.slo.margin))
                .fold(f64::INFINITY, f64::min);
            let k = kept.get(view.name.as_str()).copied().unwrap_or_default();
            if let Some(mean) = k.prompt_mean() {
                self.own_prompt.insert(view.name.as_str().into(), mean);
            }
            let mut l = pool_load(view, load, slo_s, self.own_prompt.get(view.name.as_str()).copied(), now);
            // With the wait queue on, a full pool whose requests all found a slot in time (none
            // refused) is busy, not over: its own refusals, not its count, say it is full.
            if snap.config.queue.enabled && k.refused == 0 {
                l = l.map(|l| PoolLoad {
                    occupancy: l.occupancy.min(1.0 - cfg.margin),
                    refusing: false,
                    ..l
                });
            }
            self.shares.entry(view.name.as_str().into()).or_default().step(l, k, dt, cfg);
        }
        let known = |name: &BackendName| snap.backends.iter().any(|b| b.name == name.as_str());
        self.shares.retain(|name, _| known(name));
        self.own_prompt.retain(|name, _| known(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> StickySpillConfig {
        StickySpillConfig {
            enabled: true,
            margin: 0.2,
            hold_secs: 10,
            down_per_sec: 0.1,
            up_per_sec: 0.01,
            refused_max: 0.25,
            // Off here; `a_crowd_moves_...` and `the_share_returns_...` turn them on.
            cut_min_requests: 0,
            return_below: 0.0,
            return_secs: 20,
        }
    }

    #[track_caller]
    fn assert_close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-12, "got {got}, want {want}");
    }

    #[test]
    fn membership_is_a_fixed_order_of_keys() {
        // The same key and pool always draw the same uniform; pools draw independently.
        assert_eq!(uniform(7, "local"), uniform(7, "local"));
        assert_ne!(uniform(7, "local"), uniform(7, "other"));
        // A share of 1 takes every key; 0 takes none.
        assert!((0..1000).all(|k| takes_first(k, "local", 1.0)));
        assert!((0..1000).all(|k| !takes_first(k, "local", 0.0)));
        // Keys in the share at 0.4 are still in it at 0.6: shrinking or growing only moves
        // the keys between the two thresholds.
        let at = |s: f64| (0..10_000u64).filter(|&k| takes_first(k, "local", s)).collect::<Vec<_>>();
        let (small, big) = (at(0.4), at(0.6));
        assert!(small.iter().all(|k| big.contains(k)));
        let share = big.len() as f64 / 10_000.0;
        assert!((share - 0.6).abs() < 0.02, "{share}");
    }

    #[test]
    fn full_pools_shrink_at_once_and_grow_back_after_the_hold() {
        let cfg = cfg();
        let at = |occupancy: f64| Some(PoolLoad { occupancy, refusing: false, takes_per_sec: 0.0 });
        let mut s = Share::default();
        // Within the band: nothing moves.
        assert_eq!(s.step(at(0.9), Kept::default(), 1.0, &cfg), 1.0);
        // At the reserve line with a share of 1: 1 × (1 − 0.1 × 2) = 0.8. Below 1 the line is
        // no longer full (the kept projects may use the reserve): 1.2 = 1 + margin is.
        assert_close(s.step(at(1.0), Kept::default(), 2.0, &cfg), 0.8);
        assert_close(s.step(at(1.1), Kept::default(), 1.0, &cfg), 0.8);
        assert_close(s.step(at(1.3), Kept::default(), 1.0, &cfg), 0.72);
        // Clear headroom, but the hold (10 s since the last shrink) is not over.
        for _ in 0..9 {
            assert_close(s.step(at(0.5), Kept::default(), 1.0, &cfg), 0.72);
        }
        // 10 s: it grows by 0.01 per second.
        assert_close(s.step(at(0.5), Kept::default(), 1.0, &cfg), 0.73);
        assert_close(s.step(at(0.5), Kept::default(), 5.0, &cfg), 0.78);
        // Below 1 it is full at 1 + margin, so it grows at or below the line (1.0) and holds
        // between the line and 1 + margin; unknown occupancy holds too.
        assert_close(s.step(at(1.0), Kept::default(), 2.0, &cfg), 0.80);
        assert_close(s.step(at(1.05), Kept::default(), 30.0, &cfg), 0.80);
        assert_close(s.step(at(1.15), Kept::default(), 30.0, &cfg), 0.80);
        assert_close(s.step(None, Kept::default(), 30.0, &cfg), 0.80);
        // It never passes 1, and a zero step changes nothing.
        assert_close(s.step(at(0.85), Kept::default(), 100.0, &cfg), 1.0);
        assert_close(s.step(at(2.0), Kept::default(), 0.0, &cfg), 1.0);
        // Nodes that refuse requests of their usual size make the pool full at any count.
        assert_close(
            s.step(
                Some(PoolLoad { occupancy: 0.5, refusing: true, takes_per_sec: 0.0 }),
                Kept::default(),
                1.0,
                &cfg,
            ),
            0.9,
        );
        assert_close(s.step(at(0.5), Kept::default(), 5.0, &cfg), 0.9);
        // A long full spell cannot go below 0.
        assert_eq!(s.step(at(2.0), Kept::default(), 100.0, &cfg), 0.0);
        // Off: back to 1 at once.
        let off = StickySpillConfig { enabled: false, ..cfg };
        assert_eq!(s.step(at(2.0), Kept::default(), 1.0, &off), 1.0);
    }

    #[test]
    fn a_pool_that_refuses_its_own_projects_near_the_line_is_full() {
        let cfg = cfg();
        let at = |occupancy: f64| Some(PoolLoad { occupancy, refusing: false, takes_per_sec: 0.0 });
        let kept = |taken: u64, refused: u64| Kept { taken, refused, prompt_tokens: 0 };
        let mut s = Share { share: 0.5, since_shrink: f64::INFINITY };
        // 3 refused of 10 is over refused_max (0.25) near the line (0.9 ≥ 1 − 0.2): it
        // shrinks, 0.5 × (1 − 0.1) = 0.45, however much room the count shows.
        assert_close(s.step(at(0.9), kept(7, 3), 1.0, &cfg), 0.45);
        // 2 of 10 is within it: it holds (in the band) and, with a refusal, does not grow.
        s.since_shrink = f64::INFINITY;
        assert_close(s.step(at(0.9), kept(8, 2), 1.0, &cfg), 0.45);
        // Far below the line a refusal is one node's burst: no shrink, no growth either.
        assert_close(s.step(at(0.5), kept(1, 9), 1.0, &cfg), 0.45);
        // No refusal and clear headroom: it grows, 0.45 + 0.01 × 2.
        assert_close(s.step(at(0.9), kept(10, 0), 2.0, &cfg), 0.47);
        // Nothing planned: no refusal.
        assert_close(s.step(at(0.9), Kept::default(), 1.0, &cfg), 0.48);
    }

    #[test]
    fn a_crowd_moves_its_projects_in_one_step() {
        let cfg = StickySpillConfig { cut_min_requests: 30, ..cfg() };
        let at =
            |occupancy: f64, takes_per_sec: f64| Some(PoolLoad { occupancy, refusing: false, takes_per_sec });
        let kept = |taken: u64, refused: u64| Kept { taken, refused, prompt_tokens: 0 };
        // At 1, 12 of 40 refused (over refused_max, 0.25) near the line, where the pool takes
        // 12 a second: at once to 12 / 40, below the multiplicative 1 × (1 − 0.1) = 0.9.
        let mut s = Share::default();
        assert_close(s.step(at(0.95, 12.0), kept(28, 12), 1.0, &cfg), 0.3);
        // Below 1 the cut is over: 0.3 × 0.9.
        assert_close(s.step(at(1.25, 12.0), kept(28, 12), 1.0, &cfg), 0.27);
        // At 1 its refusals count only for the cut: fewer than cut_min_requests planned, the
        // cut off, or a pool that could take them all (50 a second: refusals of a burst)
        // hold it at 1 below the line.
        assert_close(Share::default().step(at(0.95, 12.0), kept(10, 10), 1.0, &cfg), 1.0);
        let no_cut = StickySpillConfig { cut_min_requests: 0, ..cfg };
        assert_close(Share::default().step(at(0.95, 12.0), kept(28, 12), 1.0, &no_cut), 1.0);
        assert_close(Share::default().step(at(0.95, 50.0), kept(28, 12), 1.0, &cfg), 1.0);
        // At the line it is full at 1 whatever it refused: multiplicative, 2 s at 0.1.
        assert_close(Share::default().step(at(1.0, 50.0), kept(28, 12), 2.0, &cfg), 0.8);
    }

    #[test]
    fn the_share_returns_toward_filling_the_pool_when_the_crowd_has_gone() {
        let off = StickySpillConfig { hold_secs: 60, ..cfg() };
        let cfg = StickySpillConfig { return_below: 0.5, ..off };
        let at = |occupancy: f64| Some(PoolLoad { occupancy, refusing: false, takes_per_sec: 0.0 });
        let kept = |taken: u64, refused: u64| Kept { taken, refused, prompt_tokens: 0 };
        // At 0.4 of the line (1.0 below a share of 1; return_below 0.5), within the hold, the
        // share returns toward 0.3 × 1.0 / 0.4 = 0.75, half way in 10 s of return_secs 20:
        // 0.3 + 0.45 × 0.5.
        let mut s = Share { share: 0.3, since_shrink: 0.0 };
        assert_close(s.step(at(0.4), kept(50, 0), 10.0, &cfg), 0.525);
        // A refusal, or a pool above return_below within the hold (60 s): it holds.
        assert_close(s.step(at(0.4), kept(9, 1), 10.0, &cfg), 0.525);
        assert_close(s.step(at(0.6), kept(50, 0), 10.0, &cfg), 0.525);
        // A step of return_secs or more lands on the target, which is never past 1
        // (0.525 / 0.35 = 1.5): the fleet comes home.
        assert_close(s.step(at(0.35), kept(50, 0), 30.0, &cfg), 1.0);
        // Every project would fit under return_below (0.1 ≤ 0.5 × 1.0 × 0.3): all at once.
        let mut s = Share { share: 0.3, since_shrink: 0.0 };
        assert_close(s.step(at(0.1), kept(50, 0), 1.0, &cfg), 1.0);
        // A nearly empty pool (0.02 > 0.5 × 0.02): the division floors at MIN_OCCUPANCY.
        let mut s = Share { share: 0.02, since_shrink: 0.0 };
        assert_close(s.step(at(0.02), Kept::default(), 20.0, &cfg), 0.02 * 1.0 / 0.05);
        // Off (return_below 0): within the hold it holds.
        let mut s = Share { share: 0.3, since_shrink: 0.0 };
        assert_close(s.step(at(0.1), kept(50, 0), 10.0, &off), 0.3);
    }
}
