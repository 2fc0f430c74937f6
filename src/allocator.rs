//! Memory back to the system after load. mimalloc keeps a freed block on its page until the
//! thread that owns the page allocates again, and a block freed by another thread (most of a
//! stream's, with tokio moving tasks between workers) waits on that page's list; a worker that
//! goes idle after a burst would keep all of it. Each worker, when it parks, collects its heap
//! at most once per [`COLLECT_EVERY`], so the cost stays off a busy worker's path.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The least time between two collections on one thread.
pub(crate) const COLLECT_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// For `on_thread_park`: collect this thread's mimalloc heap if it has not been collected for
/// [`COLLECT_EVERY`]. Does nothing in a build without mimalloc.
pub(crate) fn on_park() {
    LAST.with(|last| {
        let now = Instant::now();
        if due(last.get(), now) {
            last.set(Some(now));
            collect();
        }
    });
}

/// Whether a thread last collected at `last` should collect at `now`.
fn due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|t| now.duration_since(t) >= COLLECT_EVERY)
}

#[cfg(feature = "mimalloc")]
fn collect() {
    // SAFETY: mi_collect takes no pointers; it frees what the calling thread's heap holds
    // unused (and, forced, abandoned segments).
    unsafe { libmimalloc_sys::mi_collect(true) };
}

#[cfg(not(feature = "mimalloc"))]
fn collect() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_collects_at_most_once_a_second() {
        let t0 = Instant::now();
        assert!(due(None, t0), "the first park collects");
        assert!(!due(Some(t0), t0 + Duration::from_millis(999)));
        assert!(due(Some(t0), t0 + COLLECT_EVERY));
        on_park();
        on_park(); // a second park at once does nothing (and nothing breaks)
        assert!(LAST.with(|l| l.get()).is_some());
    }
}
