//! Background state owners. Each owns one kind of state, takes time as an argument (or runs
//! under tokio's clock, which tests pause), and publishes what planning needs into the next
//! snapshot. Nothing here sits on the request path except the breaker permits and the retry
//! budget that dispatch consults. Control sits above dispatch and metrics and below the gate,
//! the pipeline and the doors: what a higher layer knows that a snapshot needs (the gate's
//! verdicts) comes in through `snapshot_loop`'s sources as a trait it implements.

pub mod access;
pub mod balancing;
pub mod books;
pub mod canary;
pub mod discovery;
pub mod gpu_time;
pub mod keys;
pub mod opstate;
pub mod pins;
pub mod reload;
pub mod scrape;
mod scrape_error;
mod scrape_http;
mod scrape_node;
mod scrape_peers;
mod scrape_share;
pub mod sessions;
pub mod snapshot_loop;

/// The router's background loops, stopped together by one cancellation token: each ends at
/// its next await once the token is cancelled. (The loops that hold state to hand over at a
/// stop, GPU minutes and queued outcomes, take the token themselves and are awaited apart.)
pub struct Loops {
    set: tokio::task::JoinSet<()>,
    stop: tokio_util::sync::CancellationToken,
}

impl Loops {
    pub fn new(stop: tokio_util::sync::CancellationToken) -> Loops {
        Loops { set: tokio::task::JoinSet::new(), stop }
    }

    /// Run `work` until the token is cancelled.
    pub fn spawn(&mut self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        self.set.spawn(async move {
            stop.run_until_cancelled_owned(work).await;
        });
    }

    /// The token that stops the loops, for a task awaited apart (one that hands over what it
    /// holds at a stop).
    pub fn token(&self) -> tokio_util::sync::CancellationToken {
        self.stop.clone()
    }

    /// Cancel the token and wait for every loop to end.
    pub async fn stop(mut self) {
        self.stop.cancel();
        while self.set.join_next().await.is_some() {}
    }
}
