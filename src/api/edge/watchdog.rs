//! What one client connection is doing, and the watchdog that closes it when a client dawdles.
//!
//! The socket is wrapped so that its reads are seen: the first byte that arrives while no
//! request is in flight starts the header clock, and the request's arrival at the service (its
//! head parsed) stops it. A connection whose head does not arrive within the header timeout,
//! or that sits idle between requests for longer than the idle timeout, is closed. While a
//! request is in flight the watchdog stays out of the way: the body timeout and the upstream's
//! own deadlines bound that part. HTTP/2 connections (prior knowledge) carry their own framing
//! and pings, so for them only the idle rule applies.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Why the watchdog closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dawdled {
    /// The request head did not arrive in time.
    HeaderTimeout,
    /// No request for the idle timeout.
    Idle,
}

/// Shared between the socket wrapper, the service and the watchdog of one connection.
pub(crate) struct Activity {
    epoch: Instant,
    in_flight: AtomicU32,
    /// Milliseconds since `epoch` (+1) when the next request's first byte came; 0: none yet.
    head_since: AtomicU64,
    /// Milliseconds since `epoch` when the connection last became idle.
    idle_since: AtomicU64,
    /// The first read was seen (and `http2` decided).
    first_read_seen: AtomicBool,
    http2: AtomicBool,
    head_started: Notify,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            epoch: Instant::now(),
            in_flight: AtomicU32::new(0),
            head_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            first_read_seen: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            head_started: Notify::new(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn on_read(&self, bytes: &[u8]) {
        if !self.first_read_seen.swap(true, Ordering::Relaxed) {
            // The HTTP/2 connection preface starts `PRI * HTTP/2.0`; no HTTP/1 method is `PRI`.
            self.http2.store(bytes.starts_with(b"PRI"), Ordering::Relaxed);
        }
        if self.in_flight.load(Ordering::Acquire) == 0 && self.head_since.load(Ordering::Acquire) == 0 {
            self.head_since.store(self.now_ms() + 1, Ordering::Release);
            self.head_started.notify_one();
        }
    }

    /// A request's head reached the service; the guard ends it when its response is done.
    pub(crate) fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(0, Ordering::Release);
        InFlight(Arc::clone(self))
    }

    /// Wait until the connection dawdles past a limit (never, while it behaves).
    pub(crate) async fn dawdled(&self, header_timeout: Duration, idle_timeout: Duration) -> Dawdled {
        let header_ms = header_timeout.as_millis() as u64;
        let idle_ms = idle_timeout.as_millis() as u64;
        loop {
            let now = self.now_ms();
            let head_since = self.head_since.load(Ordering::Acquire);
            let next = if self.in_flight.load(Ordering::Acquire) > 0 {
                now + idle_ms
            } else if head_since > 0 && !self.http2.load(Ordering::Relaxed) {
                let due = head_since - 1 + header_ms;
                if now >= due {
                    return Dawdled::HeaderTimeout;
                }
                due
            } else {
                let due = self.idle_since.load(Ordering::Acquire) + idle_ms;
                if now >= due {
                    return Dawdled::Idle;
                }
                due
            };
            let wake = self.epoch + Duration::from_millis(next);
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = self.head_started.notified() => {}
            }
        }
    }
}

/// One request in flight on a connection; dropped with its response body.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now_ms(), Ordering::Release);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A socket whose reads are reported to its connection's [`Activity`].
pub(crate) struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Watched { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read(&buf.filled()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(5);
    const IDLE: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn a_head_that_starts_and_stalls_is_closed_after_the_header_timeout() {
        let activity = Activity::new();
        tokio::time::advance(Duration::from_secs(30)).await;
        activity.on_read(b"POST /v1/chat");
        let started = Instant::now();
        assert_eq!(activity.dawdled(HEADER, IDLE).await, Dawdled::HeaderTimeout);
        assert_eq!(started.elapsed(), HEADER);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_after_the_idle_timeout_and_a_request_holds_it_open() {
        let activity = Activity::new();
        let request = activity.request_started();
        let watchdog = activity.dawdled(HEADER, IDLE);
        tokio::pin!(watchdog);
        // In flight for two idle timeouts: the watchdog leaves it alone.
        assert!(tokio::time::timeout(IDLE * 2, &mut watchdog).await.is_err());
        let finished = Instant::now();
        drop(request);
        assert_eq!(watchdog.await, Dawdled::Idle);
        assert!(finished.elapsed() >= IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn http2_connections_only_get_the_idle_rule() {
        let activity = Activity::new();
        activity.on_read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert_eq!(activity.dawdled(HEADER, IDLE).await, Dawdled::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_read_while_a_request_is_in_flight_do_not_start_the_header_clock() {
        let activity = Activity::new();
        let request = activity.request_started();
        activity.on_read(b"{\"model\":");
        drop(request);
        let started = Instant::now();
        assert_eq!(activity.dawdled(HEADER, IDLE).await, Dawdled::Idle);
        assert_eq!(started.elapsed(), IDLE);
    }
}
