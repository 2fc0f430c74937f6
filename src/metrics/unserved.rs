//! `spillway_pool_spilled_tokens_per_second`: per local pool, the prompt tokens per second of
//! the client requests it did not serve although they were in its plan (spilled past it, or a
//! node of it skipped or failed, and then served by another backend or refused), over the last
//! minute. Beside `spillway_queue_tokens` (the
//! tokens waiting for it now), the demand the fleet did not serve: what an autoscaler grows the
//! pool's engines by (the chart's optional KEDA ScaledObject reads both).
//!
//! Fed from the bookkeeping loop (`Record::Spilled`), never from the request path; read when
//! `/metrics` is scraped, when every configured pool gets a series (0 while nothing spills) and
//! the windows of pools no longer configured are dropped. Prompt tokens only, as planning
//! estimated them: the unit of `spillway_queue_tokens`; an output cap is a bound, not demand.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus::GaugeVec;
use tokio::time::Instant;

use super::families::Backend;
use super::family::{gauge, Family, Registry};
use super::rate_window::RateWindow;
use crate::canonical::BackendName;
use crate::outcome::SpillRecord;

pub(crate) struct UnservedFamilies {
    spilled: Family<GaugeVec, Backend<'static>>,
    windows: Mutex<Windows>,
}

/// Each pool's window, from its first spill; all count their buckets from one origin (the
/// first scrape or spill), so that their buckets turn together.
#[derive(Default)]
struct Windows {
    origin: Option<Instant>,
    pools: BTreeMap<BackendName, RateWindow>,
}

impl UnservedFamilies {
    pub(crate) fn register(r: &Registry) -> UnservedFamilies {
        UnservedFamilies {
            spilled: gauge(
                r,
                "spillway_pool_spilled_tokens_per_second",
                "Prompt tokens per second, over the last minute, of the requests a local pool did not serve although they were in its plan (spilled past it to another backend, or refused).",
            ),
            windows: Mutex::new(Windows::default()),
        }
    }

    /// A request the pools in `r` did not serve.
    pub(crate) fn observe(&self, r: &SpillRecord) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let origin = *windows.origin.get_or_insert(r.at);
        for pool in &r.pools {
            let window = windows.pools.entry(pool.clone()).or_insert_with(|| RateWindow::new(origin));
            window.record(r.at, u64::from(r.prompt_tokens));
        }
    }

    /// Every configured pool's rate at `now`.
    pub(crate) fn set(&self, pools: &[String], now: Instant) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.origin.get_or_insert(now);
        windows.pools.retain(|pool, _| pools.iter().any(|p| p == pool.as_str()));
        self.spilled.reset();
        for pool in pools {
            let rate = windows.pools.get(pool.as_str()).map_or(0.0, |w| w.rate(now));
            self.spilled.get(Backend { backend: pool }).set(rate);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn value(f: &UnservedFamilies, pool: &str) -> f64 {
        f.spilled.get(Backend { backend: pool }).get()
    }

    fn record(pools: &[&str], prompt_tokens: u32, at: Instant) -> SpillRecord {
        SpillRecord { pools: pools.iter().map(|&p| BackendName::from(p)).collect(), prompt_tokens, at }
    }

    #[test]
    fn every_pool_reads_its_spills_over_the_last_minute_and_zero_without() {
        let f = UnservedFamilies::register(&Registry::new());
        let pools = ["east".to_string(), "west".to_string()];
        let t0 = Instant::now();
        f.set(&pools, t0);
        assert_eq!((value(&f, "east"), value(&f, "west")), (0.0, 0.0), "present at 0 before any spill");

        f.observe(&record(&["east"], 600, t0));
        f.observe(&record(&["east", "west"], 500, t0 + Duration::from_secs(2)));
        // 5 s in: one bucket filling, over 55 s.
        f.set(&pools, t0 + Duration::from_secs(5));
        assert_eq!((value(&f, "east"), value(&f, "west")), (20.0, 500.0 / 55.0));

        // A minute after the last spill, both are back to 0.
        f.set(&pools, t0 + Duration::from_secs(60));
        assert_eq!((value(&f, "east"), value(&f, "west")), (0.0, 0.0));
    }

    #[test]
    fn a_pool_no_longer_configured_loses_its_series_and_its_window() {
        let f = UnservedFamilies::register(&Registry::new());
        let t0 = Instant::now();
        f.observe(&record(&["east", "gone"], 1100, t0));
        f.set(&["east".to_string(), "gone".to_string()], t0 + Duration::from_secs(5));
        f.set(&["east".to_string()], t0 + Duration::from_secs(5));
        let series: Vec<(String, f64)> = prometheus::core::Collector::collect(&f.spilled.vec)
            .iter()
            .flat_map(|family| family.get_metric().iter())
            .map(|m| (m.get_label()[0].value().to_string(), m.get_gauge().get_value()))
            .collect();
        assert_eq!(series, [("east".to_string(), 20.0)]);
        assert!(!f.windows.lock().unwrap().pools.contains_key("gone"));
    }
}
