//! One SSE body for every dialect. Each door writes its answer's events in its own words (a
//! [`FrameWriter`]); this loop feeds it and decides when bytes go out: the events the upstream
//! has already delivered are written together in one body frame (up to [`BATCH_BYTES`]), so a
//! burst of tokens costs one socket write, while an event that arrives on its own is sent at
//! once. A writer that keeps a quiet stream alive says how often.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use futures::{Stream, StreamExt};

use crate::canonical::{Event, EventStream, UpstreamError};

/// Most bytes written in one frame when several events are ready at once.
pub(crate) const BATCH_BYTES: usize = 16 * 1024;

pub(crate) type Frames = Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

/// One event of the answer as the stream yields it: an event, the error that ended the
/// answer, or its end (`None`).
pub(crate) type Next = Option<Result<Event, UpstreamError>>;

/// What a dialect writes of its answer.
pub(crate) trait FrameWriter: Send + 'static {
    /// Write what opens the body, before its first event (`first`).
    fn open(&mut self, first: &Next);

    /// Write `next`; true when the body is over.
    fn write(&mut self, next: Next) -> bool;

    /// Bytes written and not yet sent.
    fn pending(&self) -> usize;

    /// The bytes written since the last frame.
    fn take(&mut self) -> Vec<u8>;

    /// How long the stream may be quiet before [`FrameWriter::keep_alive`] writes.
    fn quiet_limit(&self) -> Option<Duration> {
        None
    }

    /// Write what keeps a quiet stream open.
    fn keep_alive(&mut self) {}
}

/// The SSE body of `events` as `writer` words it; `hold` lives as long as the body.
pub(crate) fn sse_frames<W: FrameWriter + Unpin, H: Send + Unpin + 'static>(
    events: EventStream,
    writer: W,
    hold: H,
) -> Frames {
    Box::pin(Framed { events, writer, started: false, ended: false, quiet: None, _hold: hold })
}

/// [`sse_frames`]' stream, polled in place: its state stays where it is between frames.
struct Framed<W, H> {
    events: EventStream,
    writer: W,
    started: bool,
    ended: bool,
    /// While the stream is quiet: when the writer keeps it alive.
    quiet: Option<Pin<Box<tokio::time::Sleep>>>,
    _hold: H,
}

impl<W: FrameWriter + Unpin, H: Unpin> Stream for Framed<W, H> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let s = self.get_mut();
        if s.ended {
            return Poll::Ready(None);
        }
        let mut next = match s.events.poll_next_unpin(cx) {
            Poll::Ready(next) => next,
            // Before the body opens nothing may be written (dispatch has the first event ready).
            Poll::Pending => match s.writer.quiet_limit().filter(|_| s.started) {
                None => return Poll::Pending,
                Some(limit) => {
                    let quiet = s.quiet.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                    std::task::ready!(quiet.as_mut().poll(cx));
                    s.quiet = None;
                    s.writer.keep_alive();
                    return Poll::Ready(Some(Ok(Bytes::from(s.writer.take()))));
                }
            },
        };
        s.quiet = None;
        if !s.started {
            s.started = true;
            s.writer.open(&next);
        }
        loop {
            s.ended = s.writer.write(next);
            if s.ended || s.writer.pending() >= BATCH_BYTES {
                break;
            }
            // Take what the upstream has already delivered; never wait for more here.
            match s.events.poll_next_unpin(cx) {
                Poll::Ready(ready) => next = ready,
                Poll::Pending => break,
            }
        }
        Poll::Ready(Some(Ok(Bytes::from(s.writer.take()))))
    }
}
