//! The committed answer's meter: it watches the event stream a front door encodes and settles
//! the request's budget reservation when the stream ends, breaks or is dropped, at the cost
//! dispatch's lease put on the answer (the [`CostCell`] that `x-spillway-cost-usd` and the usage
//! extension read too). Every dialect's answer passes through it, so every answer is settled
//! the same way. It changes no event; it only moves a relayed usage chunk's canonical usage
//! ahead, so the chunk can carry the cost.

use std::sync::Arc;

use futures::StreamExt;
use rust_decimal::Decimal;

use crate::canonical::EventStream;
use crate::canonical::{Event, UpstreamError, Usage};
use crate::config::BudgetsConfig;
use crate::dispatch::CostCell;
use crate::guard::budget::cost::counted;
use crate::guard::budget::Reservation;

/// What the meter needs of the request.
pub struct Metering {
    pub budgets: Arc<BudgetsConfig>,
    /// The request's hold on its budgets, if any limits it.
    pub reservation: Option<Reservation>,
    /// The answer's cost, priced by the lease inside this meter.
    pub cost: Arc<CostCell>,
}

type Item = Result<Event, UpstreamError>;

struct State {
    events: EventStream,
    m: Metering,
    usage: Option<Usage>,
    /// An item read ahead (`Some(None)`: the end).
    ahead: Option<Option<Item>>,
    done: bool,
}

impl State {
    fn observe(&mut self, event: &Event) {
        if let Event::Usage(u) = event {
            self.usage = Some(*u);
        }
    }

    /// The settlement: the counted cost and tokens with a usage, the reservation without one.
    fn settlement(&mut self) -> Option<(Reservation, Decimal, Option<u64>)> {
        let r = self.m.reservation.take()?;
        Some(match self.usage {
            Some(u) => {
                let cost = counted(self.m.cost.answer(), &self.m.budgets);
                (r, cost, Some(u64::from(u.input_tokens) + u64::from(u.output_tokens)))
            }
            None => {
                let reserved = r.reserved();
                (r, reserved, None)
            }
        })
    }

    async fn finish(&mut self) {
        self.done = true;
        if let Some((r, cost, tokens)) = self.settlement() {
            r.settle(cost, tokens).await;
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // Dropped before the end (the client went away): settle what is known, in the background.
        if let (Some((r, cost, tokens)), Ok(runtime)) =
            (self.settlement(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(r.settle(cost, tokens));
        }
    }
}

/// `events`, metered.
pub fn meter(events: EventStream, m: Metering) -> EventStream {
    let state = State { events, m, usage: None, ahead: None, done: false };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let item = match s.ahead.take() {
            Some(item) => item,
            None => s.events.next().await,
        };
        match item {
            None => {
                s.finish().await;
                None
            }
            Some(Err(e)) => {
                s.finish().await;
                Some((Err(e), s))
            }
            Some(Ok(event)) => {
                s.observe(&event);
                // A relayed chunk with usage is followed by its canonical usage: read it now,
                // so the chunk is written with the cost.
                let carries_usage =
                    matches!(&event, Event::Relay(c) if c.usage.as_deref().is_some_and(|u| u != b"null"));
                if carries_usage {
                    let next = s.events.next().await;
                    if let Some(Ok(e)) = &next {
                        s.observe(e);
                    }
                    s.ahead = Some(next);
                }
                Some((Ok(event), s))
            }
        }
    }))
}
