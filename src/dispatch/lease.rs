//! A committed request's hold on its backend, and the client-facing stream that settles it:
//! breaker verdict, node slot and in-flight count released, quota corrected to real usage,
//! one outcome record emitted, whether the stream ends, breaks, stalls or is dropped.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::time::Instant;

use crate::adapter::EventStream;

use crate::canonical::Event;
use crate::canonical::{ErrorClass, UpstreamError};
use crate::fleet::load::InFlight;
use crate::guard::breaker::BreakerPermit;
use crate::guard::quota::QuotaBoard;
use crate::outcome::{Record, RequestOutcome};
use crate::trace::Answer;

/// What a request was charged against a hosted quota; corrected to the real usage at the end.
pub(super) struct Charge {
    pub board: Arc<QuotaBoard>,
    pub backend: String,
    pub estimate: u64,
    /// Whether tokens read from the prompt cache count toward the backend's limits.
    pub counts_cached: bool,
}

/// What a committed request holds until its stream ends: the breaker permit, the node slot,
/// the in-flight count and the quota charge. Dropping it early (the client went away) frees
/// them and records a cancellation.
pub(super) struct Lease {
    permit: Option<BreakerPermit>,
    _slot: Option<OwnedSemaphorePermit>,
    _in_flight: InFlight,
    charge: Option<Charge>,
    outcome: RequestOutcome,
    /// The request's and the serving call's spans, when tracing is on.
    trace: Option<Answer>,
    records: mpsc::UnboundedSender<Record>,
    finished: bool,
}

impl Lease {
    pub fn new(
        permit: BreakerPermit,
        slot: Option<OwnedSemaphorePermit>,
        in_flight: InFlight,
        charge: Option<Charge>,
        outcome: RequestOutcome,
        trace: Option<Answer>,
        records: mpsc::UnboundedSender<Record>,
    ) -> Lease {
        Lease {
            permit: Some(permit),
            _slot: slot,
            _in_flight: in_flight,
            charge,
            outcome,
            trace,
            records,
            finished: false,
        }
    }

    fn observe(&mut self, event: &Event) {
        self.outcome.observe(event);
        if let Some(answer) = &mut self.trace {
            answer.observe(event);
        }
    }

    fn finish(&mut self, error: Option<&UpstreamError>) {
        self.finished = true;
        let now = Instant::now();
        if let Some(permit) = self.permit.take() {
            match error {
                Some(e) if e.class.counts_against_backend() => permit.failure(now),
                _ => permit.success(now),
            }
        }
        self.outcome.finish(error.map(|e| e.class), now);
        if let Some(answer) = self.trace.take() {
            answer.end(&self.outcome.usage, error.map(|e| e.class));
        }
        if let Some(c) = self.charge.take() {
            let used = self.outcome.usage.quota_tokens(c.counts_cached);
            if used > 0 {
                c.board.refund(&c.backend, c.estimate, used);
            }
        }
        let _ = self.records.send(Record::Request(self.outcome.clone()));
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.finished {
            self.outcome.cancel(Instant::now());
            if let Some(answer) = self.trace.take() {
                answer.cancel(&self.outcome.usage);
            }
            let _ = self.records.send(Record::Request(self.outcome.clone()));
        }
    }
}

/// The client-facing stream: the buffered first events, then the rest under an idle timeout,
/// settling the lease when the upstream ends or breaks.
pub(super) fn track(buffered: Vec<Event>, rest: EventStream, lease: Lease, idle: Duration) -> EventStream {
    struct State {
        buffered: std::vec::IntoIter<Event>,
        rest: EventStream,
        lease: Lease,
        done: bool,
    }
    let state = State { buffered: buffered.into_iter(), rest, lease, done: false };
    Box::pin(futures::stream::unfold(state, move |mut s| async move {
        if s.done {
            return None;
        }
        if let Some(event) = s.buffered.next() {
            s.lease.observe(&event);
            return Some((Ok(event), s));
        }
        match tokio::time::timeout(idle, s.rest.next()).await {
            Ok(Some(Ok(event))) => {
                s.lease.observe(&event);
                Some((Ok(event), s))
            }
            Ok(None) => {
                s.lease.finish(None);
                None
            }
            Ok(Some(Err(error))) => {
                s.lease.finish(Some(&error));
                s.done = true;
                Some((Err(error), s))
            }
            Err(_) => {
                let error = UpstreamError::new(
                    ErrorClass::Timeout,
                    None,
                    format!("upstream sent nothing for {} ms", idle.as_millis()),
                );
                s.lease.finish(Some(&error));
                s.done = true;
                Some((Err(error), s))
            }
        }
    }))
}
