//! The committed answer's meter: it watches the event stream a front door encodes and settles
//! the request's budget reservation when the stream ends, breaks or is dropped, at the cost
//! dispatch's lease put on the answer (the [`CostCell`] that `x-spillway-cost-usd` and the usage
//! extension read too). Every dialect's answer passes through it, so every answer is settled
//! the same way. It changes no event; it only moves a relayed usage chunk's canonical usage
//! ahead, so the chunk can carry the cost.

use std::sync::Arc;

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::{Stream, StreamExt};
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
type Settling = Pin<Box<dyn Future<Output = ()> + Send>>;

/// `events`, metered. Polled in place: an event passes with no copy of the meter's state.
pub fn meter(events: EventStream, m: Metering) -> EventStream {
    Box::pin(Metered { events, m, usage: None, held: None, ahead: None, settling: None, done: false })
}

struct Metered {
    events: EventStream,
    m: Metering,
    usage: Option<Usage>,
    /// A relayed chunk with usage, held until the item behind it (its canonical usage) is read,
    /// so the chunk is written with the cost.
    held: Option<Event>,
    /// The item read behind a held chunk, passed on next (`Some(None)`: the end).
    ahead: Option<Option<Item>>,
    /// The settlement under way at the end, and what to pass on once it is done.
    settling: Option<(Settling, Option<Item>)>,
    done: bool,
}

impl Metered {
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
}

impl Drop for Metered {
    fn drop(&mut self) {
        // Dropped before the end (the client went away): settle what is known, in the background.
        if let (Some((r, cost, tokens)), Ok(runtime)) =
            (self.settlement(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(r.settle(cost, tokens));
        }
    }
}

impl Stream for Metered {
    type Item = Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let s = self.get_mut();
        loop {
            if let Some((settle, _)) = &mut s.settling {
                ready!(settle.as_mut().poll(cx));
                let (_, last) = s.settling.take().expect("a settlement under way");
                s.done = true;
                return Poll::Ready(last);
            }
            if s.done {
                return Poll::Ready(None);
            }
            let item = match s.ahead.take() {
                Some(item) => item,
                None => ready!(s.events.poll_next_unpin(cx)),
            };
            if let Some(held) = s.held.take() {
                if let Some(Ok(event)) = &item {
                    s.observe(event);
                }
                s.ahead = Some(item);
                return Poll::Ready(Some(Ok(held)));
            }
            match item {
                Some(Ok(event)) => {
                    s.observe(&event);
                    let carries_usage =
                        matches!(&event, Event::Relay(c) if c.usage.as_deref().is_some_and(|u| u != b"null"));
                    if !carries_usage {
                        return Poll::Ready(Some(Ok(event)));
                    }
                    s.held = Some(event);
                }
                // The end, or the error that ended it: settled first.
                last => match s.settlement() {
                    None => {
                        s.done = true;
                        return Poll::Ready(last);
                    }
                    Some((r, cost, tokens)) => s.settling = Some((Box::pin(r.settle(cost, tokens)), last)),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{ErrorClass, FinishReason, RelayChunk};

    fn relay(usage: Option<&'static [u8]>) -> Event {
        let usage = usage.map(bytes::Bytes::from_static);
        Event::Relay(RelayChunk { fields: bytes::Bytes::new(), usage, no_choices: false, output: false })
    }

    fn metered(events: Vec<Item>) -> EventStream {
        let budgets = Arc::new(crate::config::BudgetsConfig::default());
        meter(
            Box::pin(futures::stream::iter(events)),
            Metering { budgets, reservation: None, cost: Arc::default() },
        )
    }

    #[tokio::test]
    async fn every_event_passes_in_order_and_the_stream_ends_once() {
        let usage = Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() };
        let events = vec![
            relay(None),
            Event::TextDelta("hi".into()),
            relay(Some(b"{\"prompt_tokens\":3}")),
            Event::Usage(usage),
            Event::Finish(FinishReason::Stop),
        ];
        let out: Vec<Item> = metered(events.iter().cloned().map(Ok).collect()).collect().await;
        assert_eq!(out, events.into_iter().map(Ok).collect::<Vec<_>>());
        // An error ends it, after the chunk held for it.
        let broke = UpstreamError::new(ErrorClass::StreamBroken, None, "cut");
        let out: Vec<Item> =
            metered(vec![Ok(relay(Some(b"{}"))), Err(broke.clone()), Ok(relay(None))]).collect().await;
        assert_eq!(out, vec![Ok(relay(Some(b"{}"))), Err(broke)]);
    }

    #[tokio::test]
    async fn a_chunk_with_usage_waits_for_the_item_behind_it() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Item>();
        let budgets = Arc::new(crate::config::BudgetsConfig::default());
        let mut stream = meter(Box::pin(rx), Metering { budgets, reservation: None, cost: Arc::default() });
        tx.unbounded_send(Ok(relay(Some(b"{\"prompt_tokens\":1}")))).unwrap();
        assert!(futures::poll!(stream.next()).is_pending(), "held until its usage is read");
        tx.unbounded_send(Ok(Event::Usage(Usage::default()))).unwrap();
        assert_eq!(stream.next().await, Some(Ok(relay(Some(b"{\"prompt_tokens\":1}")))));
        assert_eq!(stream.next().await, Some(Ok(Event::Usage(Usage::default()))));
        drop(tx);
        assert_eq!(stream.next().await, None);
        assert_eq!(stream.next().await, None);
    }
}
