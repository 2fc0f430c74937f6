//! One SSE body for every dialect. Each door writes its answer's events in its own words (a
//! [`FrameWriter`]); this loop feeds it and decides when bytes go out: the events the upstream
//! has already delivered are written together in one body frame (up to [`BATCH_BYTES`]), so a
//! burst of tokens costs one socket write, while an event that arrives on its own is sent at
//! once. A writer that keeps a quiet stream alive says how often.

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Bytes;
use futures::{FutureExt, Stream, StreamExt};

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
pub(crate) fn sse_frames<W: FrameWriter, H: Send + 'static>(
    events: EventStream,
    writer: W,
    hold: H,
) -> Frames {
    struct State<W, H> {
        events: EventStream,
        writer: W,
        started: bool,
        ended: bool,
        _hold: H,
    }
    let state = State { events, writer, started: false, ended: false, _hold: hold };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        if s.ended {
            return None;
        }
        // Before the body opens nothing may be written (dispatch has the first event ready).
        let mut next = match s.writer.quiet_limit().filter(|_| s.started) {
            None => s.events.next().await,
            Some(limit) => match tokio::time::timeout(limit, s.events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    s.writer.keep_alive();
                    return Some((Ok(Bytes::from(s.writer.take())), s));
                }
            },
        };
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
            match s.events.next().now_or_never() {
                Some(ready) => next = ready,
                None => break,
            }
        }
        Some((Ok(Bytes::from(s.writer.take())), s))
    }))
}
