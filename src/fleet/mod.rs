//! The self-hosted fleet as the router sees it: what each node's engine reports, what the router
//! itself has sent it, and (pure) whether it has headroom for a request.

pub mod engines;
pub mod exposition;
pub mod headroom;
pub mod load;
pub mod metrics;
mod parse_error;
pub mod prefix_cache;
pub mod progress;
pub mod reading;
pub mod rendezvous;
mod scan;
pub mod slot_free;
pub mod telemetry;
