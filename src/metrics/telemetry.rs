//! The scrape loop's own families: scrapes this replica made, readings it took from other
//! replicas, how many nodes it scrapes itself, and whether readings are shared through Redis
//! now. The loop holds the handles and moves them as it goes (it runs on its own thread).

use super::family::Registry;
use prometheus::{IntCounter, IntGauge};

#[derive(Clone)]
pub struct TelemetryFamilies {
    /// Node scrapes (metrics pages asked for) made by this replica.
    pub scrapes: IntCounter,
    /// Node readings taken from other replicas through Redis.
    pub peer_readings: IntCounter,
    /// Nodes this replica scrapes itself.
    pub assigned: IntGauge,
    /// 1 while readings are shared through Redis; 0 while this replica scrapes every node.
    pub sharing: IntGauge,
}

impl TelemetryFamilies {
    pub(crate) fn register(r: &Registry) -> TelemetryFamilies {
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("static metric definition");
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("static metric definition");
        let f = TelemetryFamilies {
            scrapes: counter("spillway_telemetry_scrapes_total", "Node metrics scrapes this replica made."),
            peer_readings: counter(
                "spillway_telemetry_peer_readings_total",
                "Node readings this replica took from other replicas through Redis.",
            ),
            assigned: gauge("spillway_telemetry_assigned_nodes", "Nodes this replica scrapes itself."),
            sharing: gauge(
                "spillway_telemetry_sharing",
                "1 while node readings are shared through Redis, 0 while this replica scrapes every node.",
            ),
        };
        r.register(Box::new(f.scrapes.clone())).expect("each family is registered once");
        r.register(Box::new(f.peer_readings.clone())).expect("each family is registered once");
        r.register(Box::new(f.assigned.clone())).expect("each family is registered once");
        r.register(Box::new(f.sharing.clone())).expect("each family is registered once");
        f
    }
}

impl Default for TelemetryFamilies {
    /// Handles registered nowhere (a loop run without a router's registry: benches, tests).
    fn default() -> Self {
        TelemetryFamilies::register(&Registry::new())
    }
}
