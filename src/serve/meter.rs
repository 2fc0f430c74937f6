//! The committed answer's meter: it watches the event stream a front door encodes, prices the
//! answer when its usage arrives (the figure of `x-spillway-cost-usd` and of the usage
//! extension, read from a [`CostCell`]), and settles the request's budget reservation when
//! the stream ends, breaks or is dropped. Every dialect's answer passes through it, so every
//! answer is priced and settled the same way. It changes no event; it only moves a relayed
//! usage chunk's canonical usage ahead, so the chunk can carry the cost.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use rust_decimal::Decimal;
use tokio::time::Instant;

use crate::adapter::EventStream;
use crate::canonical::{Event, UpstreamError, Usage};
use crate::config::{BackendConfig, BudgetsConfig};
use crate::guard::budget::cost::{answer_cost, counted};
use crate::guard::budget::Reservation;

/// The answer's cost once its usage is known (`None` before, or when its backend is unpriced).
#[derive(Debug, Default)]
pub struct CostCell(Mutex<Option<Decimal>>);

impl CostCell {
    pub fn get(&self) -> Option<Decimal> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, cost: Option<Decimal>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = cost;
    }
}

/// What the meter needs of the request.
pub struct Metering {
    /// The serving backend (its prices, or its pool's GPU price).
    pub backend: BackendConfig,
    pub budgets: Arc<BudgetsConfig>,
    /// The request's hold on its budgets, if any limits it.
    pub reservation: Option<Reservation>,
    pub cost: Arc<CostCell>,
    /// When dispatch started: a pool's answer costs its slot from then.
    pub started: Instant,
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
            self.m.cost.set(answer_cost(&self.m.backend, u, self.m.started.elapsed()));
        }
    }

    /// The settlement: the counted cost and tokens with a usage, the reservation without one.
    fn settlement(&mut self) -> Option<(Reservation, Decimal, Option<u64>)> {
        let r = self.m.reservation.take()?;
        Some(match self.usage {
            Some(u) => {
                let cost = counted(&self.m.backend, self.m.cost.get(), &self.m.budgets);
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
