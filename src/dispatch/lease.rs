//! A committed request's hold on its backend, and the client-facing stream that settles it:
//! the answer priced once when its usage arrives, breaker verdict, node slot and in-flight
//! count released, quota corrected to real usage, one outcome record emitted, whether the
//! stream ends, breaks, stalls or is dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use rust_decimal::Decimal;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::time::{Instant, Sleep};

use crate::canonical::EventStream;
use crate::canonical::{ErrorClass, Event, UpstreamError};
use crate::config::{BackendId, Config};
use crate::fleet::load::InFlight;
use crate::guard::breaker::BreakerPermit;
use crate::guard::quota::QuotaBoard;
use crate::ledger::call_cost;
use crate::outcome::{AnswerCost, Record, RequestOutcome};
use crate::trace::Answer;

/// The answer's cost once its usage has arrived (`None` before, or when its backend is
/// unpriced): set by the lease, read by whoever settles or reports the answer (the budget
/// meter, the `x-spillway-cost-usd` header, the usage extension, a synthetic call's grader).
#[derive(Debug, Default)]
pub struct CostCell(Mutex<Option<AnswerCost>>);

impl CostCell {
    pub fn answer(&self) -> Option<AnswerCost> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Dollars, as clients are told them (no trailing zeros).
    pub fn get(&self) -> Option<Decimal> {
        self.answer().map(|c| c.usd().normalize())
    }

    fn set(&self, cost: Option<AnswerCost>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = cost;
    }
}

/// How the lease prices the answer: the serving backend's prices in the config it was
/// dispatched under, and where it puts the figure.
pub(super) struct Pricing {
    pub config: Arc<Config>,
    pub backend: BackendId,
    pub cell: Arc<CostCell>,
}

/// What a call holds on its node until it ends.
pub(super) struct NodeHold {
    pub slot: Option<OwnedSemaphorePermit>,
    pub permit: BreakerPermit,
}

/// What a request was charged against a hosted quota; corrected to the real usage at the end.
pub(super) struct Charge {
    pub board: Arc<QuotaBoard>,
    pub backend: String,
    pub estimate: u64,
    /// How the backend's limits count the request's tokens.
    pub counting: crate::canonical::QuotaCounting,
}

/// What a committed request holds until its stream ends: the breaker permit, the node slot,
/// the in-flight count and the quota charge. Dropping it early (the client went away) frees
/// them and records a cancellation.
pub(super) struct Lease {
    permit: Option<BreakerPermit>,
    _slot: Option<OwnedSemaphorePermit>,
    in_flight: InFlight,
    charge: Option<Charge>,
    pricing: Pricing,
    /// Taken when it is recorded, once: at the stream's end, or when the lease is dropped.
    outcome: Option<RequestOutcome>,
    /// The request's and the serving call's spans, when tracing is on.
    trace: Option<Answer>,
    records: mpsc::UnboundedSender<Record>,
}

impl Lease {
    pub fn new(
        hold: NodeHold,
        in_flight: InFlight,
        charge: Option<Charge>,
        pricing: Pricing,
        outcome: RequestOutcome,
        trace: Option<Answer>,
        records: mpsc::UnboundedSender<Record>,
    ) -> Lease {
        Lease {
            permit: Some(hold.permit),
            _slot: hold.slot,
            in_flight,
            charge,
            pricing,
            outcome: Some(outcome),
            trace,
            records,
        }
    }

    fn observe(&mut self, event: &Event) {
        let Some(outcome) = self.outcome.as_mut() else { return };
        outcome.observe(event);
        self.in_flight.progress().observe(event);
        if let Event::Usage(usage) = event {
            let backend = &self.pricing.config.backends[self.pricing.backend];
            let cost = call_cost(backend, usage, outcome.running_for(Instant::now()));
            outcome.cost = cost;
            self.pricing.cell.set(cost);
        }
        if let Some(answer) = &mut self.trace {
            answer.observe(event);
        }
    }

    fn finish(&mut self, error: Option<&UpstreamError>) {
        let Some(mut outcome) = self.outcome.take() else { return };
        let now = Instant::now();
        if let Some(permit) = self.permit.take() {
            match error {
                Some(e) if e.class.counts_against_backend() => permit.failure(now),
                _ => permit.success(now),
            }
        }
        outcome.finish(error.map(|e| e.class), now);
        if let Some(answer) = self.trace.take() {
            answer.end(&outcome.usage, error.map(|e| e.class));
        }
        if let Some(c) = self.charge.take() {
            let used = outcome.usage.quota_tokens(c.counting);
            if used > 0 {
                c.board.refund(&c.backend, c.estimate, used);
            }
        }
        let _ = self.records.send(Record::Request(outcome));
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(mut outcome) = self.outcome.take() {
            outcome.cancel(Instant::now());
            if let Some(answer) = self.trace.take() {
                answer.cancel(&outcome.usage);
            }
            let _ = self.records.send(Record::Request(outcome));
        }
    }
}

/// The client-facing stream: the buffered first events, then the rest under an idle timeout,
/// settling the lease when the upstream ends or breaks. Polled in place: an event passes with
/// no copy of the lease and no timer armed per event (the idle timer is moved on only when it
/// fires before the stream has been quiet for `idle`).
pub(super) fn track(buffered: Vec<Event>, rest: EventStream, lease: Lease, idle: Duration) -> EventStream {
    Box::pin(Tracked {
        buffered: buffered.into_iter(),
        rest,
        lease,
        idle,
        quiet_since: None,
        timer: None,
        done: false,
    })
}

struct Tracked {
    buffered: std::vec::IntoIter<Event>,
    rest: EventStream,
    lease: Lease,
    idle: Duration,
    /// When the upstream last had nothing ready (`None`: it has delivered since).
    quiet_since: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
    done: bool,
}

impl Tracked {
    fn end(&mut self, error: Option<UpstreamError>) -> Poll<Option<Result<Event, UpstreamError>>> {
        self.lease.finish(error.as_ref());
        self.done = true;
        Poll::Ready(error.map(Err))
    }

    /// Whether the upstream has now been quiet for `idle`; if not, the timer wakes the task
    /// when it will have been.
    fn quiet_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = *self.quiet_since.get_or_insert_with(Instant::now) + self.idle;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if timer.deadline() >= deadline {
                return true;
            }
            // It fired for an earlier quiet spell: move it to this one's end.
            timer.as_mut().reset(deadline);
        }
    }
}

impl Stream for Tracked {
    type Item = Result<Event, UpstreamError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let s = self.get_mut();
        if s.done {
            return Poll::Ready(None);
        }
        if let Some(event) = s.buffered.next() {
            s.lease.observe(&event);
            return Poll::Ready(Some(Ok(event)));
        }
        match s.rest.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(event))) => {
                s.quiet_since = None;
                s.lease.observe(&event);
                Poll::Ready(Some(Ok(event)))
            }
            Poll::Ready(None) => s.end(None),
            Poll::Ready(Some(Err(error))) => s.end(Some(error)),
            Poll::Pending if s.quiet_too_long(cx) => {
                let why = format!("upstream sent nothing for {} ms", s.idle.as_millis());
                s.end(Some(UpstreamError::new(ErrorClass::Timeout, None, why)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
