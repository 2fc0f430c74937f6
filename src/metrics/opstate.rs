//! The shared operator state's families: the version applied on this replica (equal on every
//! replica once a change has reached them all), seconds since the store was last read, and
//! whether the Redis announcement channel is up. Set from the board's status when `/metrics`
//! is scraped; this module must not read the store.

use std::time::Duration;

use super::family::Registry;
use prometheus::{GaugeVec, IntGauge, IntGaugeVec, Opts};

/// What the families show (the board's status, in this layer's terms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperatorStateView {
    pub version: i64,
    /// Since the store was last read; `None` without a store.
    pub sync_age: Option<Duration>,
    /// Whether the Redis subscription is up; `None` without Redis.
    pub notify_up: Option<bool>,
}

pub(crate) struct OperatorStateFamilies {
    version: IntGauge,
    sync_age: GaugeVec,
    notify_up: IntGaugeVec,
}

impl OperatorStateFamilies {
    pub(crate) fn register(r: &Registry) -> OperatorStateFamilies {
        let f = OperatorStateFamilies {
            version: IntGauge::new(
                "spillway_operator_state_version",
                "Version of the operator state (holds, forced breakers, canary results, gate verdicts, accepted pins) applied on this replica.",
            )
            .expect("static metric definition"),
            sync_age: GaugeVec::new(
                Opts::new(
                    "spillway_operator_state_sync_age_seconds",
                    "Seconds since this replica last read the operator state from its store (absent without one); past state.operator_poll_ms, changes made elsewhere may not hold here.",
                ),
                &["store"],
            )
            .expect("static metric definition"),
            notify_up: IntGaugeVec::new(
                Opts::new(
                    "spillway_operator_state_notify_up",
                    "1 while this replica is subscribed to operator state announcements in Redis, 0 while it polls only (absent without Redis or a store).",
                ),
                &["store"],
            )
            .expect("static metric definition"),
        };
        r.register(Box::new(f.version.clone())).expect("each family is registered once");
        r.register(Box::new(f.sync_age.clone())).expect("each family is registered once");
        r.register(Box::new(f.notify_up.clone())).expect("each family is registered once");
        f
    }

    pub fn set(&self, s: &OperatorStateView) {
        self.version.set(s.version);
        self.sync_age.reset();
        if let Some(age) = s.sync_age {
            self.sync_age.with_label_values(&["ledger"]).set(age.as_secs_f64());
        }
        self.notify_up.reset();
        if let Some(up) = s.notify_up {
            self.notify_up.with_label_values(&["redis"]).set(i64::from(up));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_follow_the_status_and_vanish_with_what_they_describe() {
        let r = Registry::new();
        let f = OperatorStateFamilies::register(&r);
        let shared = OperatorStateView {
            version: 7,
            sync_age: Some(Duration::from_millis(250)),
            notify_up: Some(false),
        };
        f.set(&shared);
        assert_eq!(f.version.get(), 7);
        assert_eq!(f.sync_age.with_label_values(&["ledger"]).get(), 0.25);
        assert_eq!(f.notify_up.with_label_values(&["redis"]).get(), 0);
        f.set(&OperatorStateView { version: 2, sync_age: None, notify_up: None });
        let families = r.gather();
        let present: Vec<&str> =
            families.iter().filter(|m| !m.get_metric().is_empty()).map(|m| m.name()).collect();
        assert_eq!(present, ["spillway_operator_state_version"]);
    }
}
