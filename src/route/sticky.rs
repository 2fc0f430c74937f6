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
//! The share is held by a small controller stepped after each snapshot from the pool's
//! **occupancy** (what its fresh nodes hold over what they may hold outside the reserve):
//! at or above 1 the share shrinks (multiplicatively, `down_per_sec`); at or below
//! `1 − margin`, and no sooner than `hold_secs` after it last shrank, it grows back
//! (`up_per_sec`); in between it holds. A project that spilled thus keeps its hosted chain
//! until the fleet has had clear headroom for the hold window. Below full load the share sits
//! at 1 and planning is exactly what it was without stickiness.
//!
//! Pure: the controller takes `dt` and the occupancy; planning reads the share from the
//! snapshot. Replicas compute the share from the same nodes' telemetry, so they agree up to
//! what each has sent since the last scrape.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::config::{StickySpillConfig, Strategy};
use crate::fleet::headroom;
use crate::fleet::load::LoadView;
use crate::snapshot::{BackendView, BreakerView, NodeView, Snapshot};

/// Fixed seed of the membership hash ("STICKY" in ASCII); part of the format, like
/// `chain`'s.
const SEED: u64 = 0x5354_4943_4b59;

/// The uniform in (0, 1) that `key` draws for `pool`.
pub fn uniform(key: u64, pool: &str) -> f64 {
    let h = xxhash_rust::xxh3::xxh3_64_with_seed(pool.as_bytes(), key ^ SEED);
    ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// Does `pool` take `key` first at this share? Always at a share of 1.
pub fn takes_first(key: u64, pool: &str, share: f64) -> bool {
    share >= 1.0 || uniform(key, pool) < share
}

/// Whether stickiness decides for this pool and key: `Some(true)` the pool takes the key
/// first (and stays its node past the reserve), `Some(false)` the key keeps its hosted chain,
/// `None` it does not apply (off, a strategy other than adaptive, a share of 1, or the
/// reserve released because a hosted partner is down: then everyone comes home).
pub fn membership(view: &BackendView, cfg: &StickySpillConfig, strategy: Strategy, key: u64) -> Option<bool> {
    let applies = cfg.enabled && strategy == Strategy::Adaptive && view.share < 1.0 && !view.reserve_released;
    applies.then(|| takes_first(key, &view.name, view.share))
}

/// What the pool's fresh, usable nodes hold over what they may hold outside the reserve
/// (`slots − reserved` each), counting what the router sent since each scrape; `None` when no
/// node is fresh and usable (nothing to steer by).
pub fn occupancy(view: &BackendView, load: &dyn Fn(&NodeView) -> LoadView, now: Instant) -> Option<f64> {
    let (mut held, mut room) = (0.0, 0.0);
    for node in &view.nodes {
        let usable = node.held.is_none() && node.quarantine.is_none() && node.breaker != BreakerView::Open;
        if !usable || !headroom::fresh(&node.signals, &view.limits, now) {
            continue;
        }
        let slots = headroom::slots(&node.signals, &view.limits);
        let reserved = (slots * view.limits.reserve.max(0.0) + 1e-9).floor();
        let sig = &node.signals;
        let l = load(node);
        held += (sig.running.unwrap_or(0.0) + sig.waiting.unwrap_or(0.0) + l.unseen as f64)
            .max(l.in_flight as f64);
        room += (slots - reserved).max(1.0);
    }
    (room > 0.0).then(|| held / room)
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
    /// Advance by `dt` seconds at this occupancy; returns the new share. Unknown occupancy,
    /// or stickiness off, leaves (or puts) it at 1.
    pub fn step(&mut self, occupancy: Option<f64>, dt: f64, cfg: &StickySpillConfig) -> f64 {
        if !cfg.enabled {
            *self = Share::default();
            return 1.0;
        }
        if dt.is_nan() || dt <= 0.0 {
            return self.share;
        }
        self.since_shrink += dt;
        match occupancy {
            Some(o) if o >= 1.0 => {
                self.share *= (1.0 - cfg.down_per_sec * dt).max(0.0);
                self.since_shrink = 0.0;
            }
            Some(o) if o <= 1.0 - cfg.margin && self.since_shrink >= cfg.hold_secs as f64 => {
                self.share = (self.share + cfg.up_per_sec * dt).min(1.0);
            }
            _ => {}
        }
        self.share
    }
}

/// Every local pool's share, stepped after each snapshot from that snapshot's occupancy.
#[derive(Debug, Default)]
pub struct PoolShares {
    shares: BTreeMap<String, Share>,
    last: Option<Instant>,
}

impl PoolShares {
    /// A pool's share now (1 for one never stepped).
    pub fn get(&self, pool: &str) -> f64 {
        self.shares.get(pool).map_or(1.0, |s| s.share)
    }

    /// Step every pool of `snap` by the time since the last step, at its occupancy now.
    pub fn step(&mut self, snap: &Snapshot, load: &dyn Fn(&NodeView) -> LoadView, now: Instant) {
        let dt = self.last.map_or(0.0, |last| now.saturating_duration_since(last).as_secs_f64());
        self.last = Some(now);
        let cfg = &snap.config.balancing.sticky_spill;
        for view in snap.backends.iter().filter(|b| b.is_local()) {
            let o = occupancy(view, load, now);
            self.shares.entry(view.name.clone()).or_default().step(o, dt, cfg);
        }
        self.shares.retain(|name, _| snap.backends.iter().any(|b| &b.name == name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> StickySpillConfig {
        StickySpillConfig { enabled: true, margin: 0.2, hold_secs: 10, down_per_sec: 0.1, up_per_sec: 0.01 }
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
        let mut s = Share::default();
        // Within the band: nothing moves.
        assert_eq!(s.step(Some(0.9), 1.0, &cfg), 1.0);
        // At the reserve line: 1 × (1 − 0.1 × 2) = 0.8, then 0.8 × 0.9 = 0.72.
        assert_close(s.step(Some(1.0), 2.0, &cfg), 0.8);
        assert_close(s.step(Some(1.3), 1.0, &cfg), 0.72);
        // Clear headroom, but the hold (10 s since the last shrink) is not over.
        for _ in 0..9 {
            assert_close(s.step(Some(0.5), 1.0, &cfg), 0.72);
        }
        // 10 s: it grows by 0.01 per second.
        assert_close(s.step(Some(0.5), 1.0, &cfg), 0.73);
        assert_close(s.step(Some(0.5), 5.0, &cfg), 0.78);
        // Between 1 − margin and 1 it holds; unknown occupancy holds too.
        assert_close(s.step(Some(0.85), 30.0, &cfg), 0.78);
        assert_close(s.step(None, 30.0, &cfg), 0.78);
        // It never passes 1, and a zero step changes nothing.
        assert_close(s.step(Some(0.0), 100.0, &cfg), 1.0);
        assert_close(s.step(Some(2.0), 0.0, &cfg), 1.0);
        // A long full spell cannot go below 0.
        assert_eq!(s.step(Some(2.0), 100.0, &cfg), 0.0);
        // Off: back to 1 at once.
        let off = StickySpillConfig { enabled: false, ..cfg };
        assert_eq!(s.step(Some(2.0), 1.0, &off), 1.0);
    }
}
