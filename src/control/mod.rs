//! Background state owners. Each owns one kind of state, takes time as an argument (or runs
//! under tokio's clock, which tests pause), and publishes what planning needs into the next
//! snapshot. Nothing here sits on the request path except the breaker permits and the retry
//! budget that dispatch consults.

pub mod balancing;
pub mod books;
pub mod canary;
pub mod discovery;
pub mod gpu_time;
pub mod pins;
pub mod reload;
pub mod scrape;
mod scrape_error;
pub mod snapshot_loop;
