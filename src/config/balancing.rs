//! The `balancing:` section: the PID availability of each hosted backend, affinity windows,
//! the fast slowness signal and sticky spill. Only what the operator writes, its defaults and
//! its ranges; `control` and `route` act on it.

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Bound, Range};
use super::Problem;

/// Adaptive balancing: PID availability per hosted backend, and affinity windows.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BalancingConfig {
    /// How often availability is recomputed from the interval's outcomes.
    pub interval_secs: u64,
    /// `E` in `score = successes − E × errors + 1`: 200 targets about 0.5 % errors.
    pub error_weight: f64,
    /// Proportional gain of the PID (on the traffic-normalised score).
    pub kp: f64,
    /// Integral gain.
    pub ki: f64,
    /// Derivative gain.
    pub kd: f64,
    /// A project keeps its fallback chain for this long (prompt caches stay warm).
    pub affinity_window_secs: u64,
    /// How many successes one slow answer (first token later than the task's TTFT SLO)
    /// cancels in the availability score, as `error_weight` does for an error.
    pub slow_weight: f64,
    /// The per-snapshot slowness signal and where a provider written off for slowness goes
    /// (`route::slowness`).
    pub slow_signal: SlowSignalConfig,
    /// Which projects a full pool keeps, and for how long a spilled one stays spilled.
    pub sticky_spill: StickySpillConfig,
}

/// The fast slowness signal (`route::slowness`).
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SlowSignalConfig {
    /// Slow answers (first token after the task's SLO) the open interval needs before the
    /// snapshot shows the provider at availability 0; 0 turns the signal and the mark off.
    pub min_slow: u64,
    /// The share of the open interval's answers (errors included) that must be slow.
    pub share: f64,
    /// A hosted backend that is down and written off for slowness goes after the local pool
    /// in the chains of the projects outside that pool's share.
    pub after_fleet: bool,
}

impl Default for SlowSignalConfig {
    fn default() -> Self {
        SlowSignalConfig { min_slow: 2, share: 0.5, after_fleet: true }
    }
}

/// Sticky spill (`route::sticky`): a pool that cannot take every project takes a fixed share
/// of them first.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StickySpillConfig {
    /// Off: every request is admitted or spilled on its own, as before.
    pub enabled: bool,
    /// Half the width of the band around the reserve line where the share holds: it grows
    /// back below `1 − margin` (clear headroom) and shrinks above `1 + margin`.
    pub margin: f64,
    /// A spilled project comes back no sooner than this after the pool was last full.
    pub hold_secs: u64,
    /// How fast the share shrinks while the pool is full (fraction per second).
    pub down_per_sec: f64,
    /// How fast it grows back with clear headroom (share per second).
    pub up_per_sec: f64,
    /// The share of its own projects' requests (those it takes first) a pool may refuse
    /// between two steps before it counts as full for them.
    pub refused_max: f64,
    /// When a pool at a share of 1 turns full by refusing its projects, and at least this
    /// many of their requests were planned since the last step, the share drops at once to
    /// what the pool can take of them (its slots outside the reserve over the time a request
    /// holds one, against the rate they arrived at) rather than by `down_per_sec`; 0: never.
    pub cut_min_requests: u64,
    /// With none of its projects refused and the pool at or below this fraction of the line
    /// where it grows back, the share returns toward the one that would fill the pool to
    /// that line without waiting out `hold_secs`; 0: never.
    pub return_below: f64,
    /// The time constant of that return, in seconds (0: at once).
    pub return_secs: u64,
}

impl Default for StickySpillConfig {
    fn default() -> Self {
        StickySpillConfig {
            enabled: true,
            margin: 0.15,
            hold_secs: 60,
            down_per_sec: 0.02,
            up_per_sec: 0.005,
            refused_max: 0.3,
            cut_min_requests: 30,
            return_below: 0.6,
            return_secs: 30,
        }
    }
}

impl Default for BalancingConfig {
    fn default() -> Self {
        BalancingConfig {
            interval_secs: 30,
            error_weight: 200.0,
            kp: 0.02,
            ki: 0.05,
            kd: 0.0,
            affinity_window_secs: 300,
            slow_weight: 20.0,
            slow_signal: SlowSignalConfig::default(),
            sticky_spill: StickySpillConfig::default(),
        }
    }
}

/// Above 0, at most 1: a share or rate that must move.
const fn share(key: &'static str) -> Range {
    Range::new(key, Bound::Excl(0.0), Bound::Incl(1.0))
}

impl BalancingConfig {
    /// The ranges of the section's numbers (keys below `balancing`).
    pub const RANGES: &'static [Range] = &[
        Range::at_least("interval_secs", 1.0),
        Range::at_least("affinity_window_secs", 1.0),
        Range::new("error_weight", Bound::Excl(0.0), Bound::Open),
        Range::at_least("kp", 0.0),
        Range::at_least("ki", 0.0),
        Range::at_least("kd", 0.0),
        Range::at_least("slow_weight", 0.0),
        share("slow_signal.share"),
        Range::new("slow_signal.min_slow", Bound::Open, Bound::Incl(1_000_000.0)),
        Range::new("sticky_spill.margin", Bound::Excl(0.0), Bound::Excl(1.0)),
        share("sticky_spill.down_per_sec"),
        share("sticky_spill.up_per_sec"),
        share("sticky_spill.refused_max"),
        Range::between("sticky_spill.return_below", 0.0, 1.0),
    ];

    pub fn check(&self) -> Vec<Problem> {
        let (slow, sticky) = (&self.slow_signal, &self.sticky_spill);
        let values = [
            ("interval_secs", self.interval_secs as f64),
            ("affinity_window_secs", self.affinity_window_secs as f64),
            ("error_weight", self.error_weight),
            ("kp", self.kp),
            ("ki", self.ki),
            ("kd", self.kd),
            ("slow_weight", self.slow_weight),
            ("slow_signal.share", slow.share),
            ("slow_signal.min_slow", slow.min_slow as f64),
            ("sticky_spill.margin", sticky.margin),
            ("sticky_spill.down_per_sec", sticky.down_per_sec),
            ("sticky_spill.up_per_sec", sticky.up_per_sec),
            ("sticky_spill.refused_max", sticky.refused_max),
            ("sticky_spill.return_below", sticky.return_below),
        ];
        range::check("balancing", Self::RANGES, &values)
    }
}
