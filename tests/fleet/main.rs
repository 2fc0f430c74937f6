//! The fleet side: engine telemetry, discovery, the GPU agent, capacity, quotas and routing scenarios against simulated fleets, and the guards' timing under a paused clock.
//!
//! One test binary per area (each links the whole crate); each module is one file beside this.

#[path = "../common/mod.rs"]
mod common;

mod agent;
mod agent_sessions;
mod canary;
mod capacity;
mod discovery;
mod engines;
mod paused_clock;
mod pins;
mod queue_edges;
mod quota;
mod quota_routing;
mod real_engine;
mod real_fleet;
mod scenarios;
mod shared_scrape;
mod telemetry;
