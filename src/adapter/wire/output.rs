//! Where the output read from one upstream chunk goes: into canonical events, or, when the
//! chunk is relayed alone ([`Relaying::Alone`]), only into whether there was any, so no text
//! is copied out of a chunk that the client's writer passes on as it came.

use crate::canonical::{Event, Relaying};

/// The events read from one chunk: its output's, unless only whether it held any is asked.
pub(crate) struct Output {
    events: Vec<Event>,
    /// Only whether there was output is asked ([`Relaying::Alone`]).
    alone: bool,
    seen: bool,
}

impl Output {
    /// For a chunk read under `relaying`.
    pub fn new(relaying: Relaying) -> Output {
        Output { events: Vec::new(), alone: relaying == Relaying::Alone, seen: false }
    }

    /// The events of a whole answer, already read, as a chunk's would be kept.
    pub fn of(relaying: Relaying, events: Vec<Event>) -> Output {
        let mut output = Output::new(relaying);
        for event in events {
            if event.is_output() {
                output.push(|| event);
            } else {
                output.keep(event);
            }
        }
        output
    }

    /// A piece of output; `event` is made only when events are kept.
    pub fn push(&mut self, event: impl FnOnce() -> Event) {
        if self.alone {
            self.seen = true;
        } else {
            self.events.push(event());
        }
    }

    /// An event that is not output (usage, the finish): kept however the chunk is relayed.
    pub fn keep(&mut self, event: Event) {
        self.events.push(event);
    }

    /// The events read.
    pub fn events(self) -> Vec<Event> {
        self.events
    }

    /// The relayed chunk, then the events. `relayed` makes the chunk, told whether it stands
    /// for output: alone, when output was seen; otherwise never, as the events carry it.
    pub fn behind(mut self, relayed: impl FnOnce(bool) -> Event) -> Vec<Event> {
        self.events.insert(0, relayed(self.seen));
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{NativeEvent, RelayChunk};

    fn native(output: bool) -> Event {
        Event::Native(NativeEvent { name: "e".into(), data: bytes::Bytes::new(), output })
    }

    #[test]
    fn alone_a_chunk_stands_for_its_output_and_nothing_is_made() {
        let mut alone = Output::new(Relaying::Alone);
        alone.push(|| unreachable!("no event is made for a chunk relayed alone"));
        let events = alone.behind(native);
        assert_eq!(events, [native(true)]);
        assert!(events[0].is_output());
        assert_eq!(Output::new(Relaying::Alone).behind(native), [native(false)]);
        assert!(!native(false).is_output());
    }

    #[test]
    fn with_events_the_chunk_goes_first_and_the_events_carry_the_output() {
        let mut with = Output::new(Relaying::WithEvents);
        with.push(|| Event::TextDelta("hi".into()));
        let relayed = |output| {
            Event::Relay(RelayChunk { fields: bytes::Bytes::new(), usage: None, no_choices: false, output })
        };
        let events = with.behind(relayed);
        assert_eq!(events, [relayed(false), Event::TextDelta("hi".into())]);
        assert_eq!(events.iter().filter(|e| e.is_output()).count(), 1, "one piece of output counts once");
        let mut ending = Output::new(Relaying::Alone);
        ending.keep(Event::Finish(crate::canonical::FinishReason::Stop));
        assert_eq!(
            ending.behind(native),
            [native(false), Event::Finish(crate::canonical::FinishReason::Stop)]
        );
        let mut off = Output::new(Relaying::Off);
        off.push(|| Event::TextDelta("hi".into()));
        assert_eq!(off.events(), [Event::TextDelta("hi".into())]);
    }
}
