//! Background state owners. Each owns one kind of state, takes time as an argument (or runs
//! under tokio's clock, which tests pause), and publishes what planning needs into the next
//! snapshot. Nothing here sits on the request path except the breaker permits and the retry
//! budget that dispatch consults.

pub mod availability;
pub mod balancing;
pub mod breaker;
pub mod canary;
pub mod discovery;
pub mod gpu_time;
pub mod operator;
pub mod pins;
pub mod quota;
pub mod reload;
pub mod retry_budget;
pub mod scrape;
pub mod snapshot_loop;
