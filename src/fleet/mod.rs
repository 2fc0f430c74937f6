//! The self-hosted fleet as the router sees it: what each vLLM node reports, what the router
//! itself has sent it, and (pure) whether it has headroom for a request.

pub mod headroom;
pub mod load;
pub mod metrics;
mod parse_error;
pub mod telemetry;
