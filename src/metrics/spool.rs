//! The ledger spool's families: its size, the age of its oldest uncommitted row, rows replayed
//! at start, full-spool episodes and rows that found it full. Set from the spool's own counts
//! when `/metrics` is scraped; this module must not read the disk.

use super::family::Registry;
use prometheus::{Gauge, IntCounter, IntGauge};

use crate::ledger::SpoolStats;

pub(crate) struct SpoolFamilies {
    bytes: IntGauge,
    oldest: Gauge,
    replayed: IntCounter,
    full: IntCounter,
    at_risk: IntCounter,
}

impl SpoolFamilies {
    pub(crate) fn register(r: &Registry) -> SpoolFamilies {
        let f = SpoolFamilies {
            bytes: IntGauge::new("spillway_ledger_spool_bytes", "Bytes in the ledger's local crash spool.")
                .expect("static metric definition"),
            oldest: Gauge::new(
                "spillway_ledger_spool_oldest_seconds",
                "Age of the oldest spooled ledger row the store has not committed (0: none).",
            )
            .expect("static metric definition"),
            replayed: IntCounter::new(
                "spillway_ledger_spool_replayed_rows_total",
                "Ledger rows found in the spool at start and written again.",
            )
            .expect("static metric definition"),
            full: IntCounter::new(
                "spillway_ledger_spool_full_total",
                "Times the ledger spool filled up (rows then wait in memory only).",
            )
            .expect("static metric definition"),
            at_risk: IntCounter::new(
                "spillway_ledger_spool_unspooled_rows_total",
                "Ledger rows that found the spool full and wait in memory only (lost on a crash).",
            )
            .expect("static metric definition"),
        };
        r.register(Box::new(f.bytes.clone())).expect("each family is registered once");
        r.register(Box::new(f.oldest.clone())).expect("each family is registered once");
        r.register(Box::new(f.replayed.clone())).expect("each family is registered once");
        r.register(Box::new(f.full.clone())).expect("each family is registered once");
        r.register(Box::new(f.at_risk.clone())).expect("each family is registered once");
        f
    }

    /// Set from the spool's counts (the counters move up to them).
    pub fn set(&self, s: &SpoolStats) {
        self.bytes.set(i64::try_from(s.bytes).unwrap_or(i64::MAX));
        self.oldest.set(s.oldest_secs);
        for (counter, total) in
            [(&self.replayed, s.replayed), (&self.full, s.full_events), (&self.at_risk, s.at_risk)]
        {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_the_spools_totals() {
        let r = Registry::new();
        let f = SpoolFamilies::register(&r);
        let stats = SpoolStats { bytes: 4096, oldest_secs: 0.25, replayed: 7, full_events: 1, at_risk: 3 };
        f.set(&stats);
        f.set(&SpoolStats { at_risk: 5, ..stats });
        assert_eq!((f.bytes.get(), f.oldest.get()), (4096, 0.25));
        assert_eq!((f.replayed.get(), f.full.get(), f.at_risk.get()), (7, 1, 5));
    }
}
