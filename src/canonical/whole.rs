//! An answer gathered whole from its events: the text, the reasoning, the tool calls joined by
//! index, the usage and the finish, and (taken by value) the last relayed chunk and the
//! vectors. The one accumulator behind every answer written as one body from canonical parts
//! (chat, completions, embeddings) and behind what graders read. It keeps no order between
//! kinds of output: the Messages and Responses doors, whose blocks and items keep theirs, read
//! the same events through their own encoders.

use super::{Event, FinishReason, RelayChunk, ToolCall, Usage};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct WholeAnswer {
    pub text: String,
    pub reasoning: String,
    /// Each call's pieces joined, in the order of their indexes.
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
    /// The last chunk relayed as the upstream wrote it (a completion's answer).
    pub relayed: Option<RelayChunk>,
    /// An embeddings answer's vectors.
    pub vectors: Vec<Vec<f32>>,
}

impl WholeAnswer {
    /// Take one event: as [`WholeAnswer::add`], and a relayed chunk or vectors kept without a
    /// copy.
    pub fn take(&mut self, event: Event) {
        match event {
            Event::Relay(chunk) => self.relayed = Some(chunk),
            Event::Embeddings(vectors) => self.vectors = vectors,
            event => self.add(&event),
        }
    }

    /// Add one event read beside its consumer (a tap); relayed chunks and vectors, which only
    /// [`WholeAnswer::take`] keeps, are skipped.
    pub fn add(&mut self, event: &Event) {
        match event {
            Event::TextDelta(t) => self.text.push_str(t),
            Event::ReasoningDelta(t) => self.reasoning.push_str(t),
            Event::ToolCallDelta { index, id, name, arguments } => {
                let i = *index as usize;
                if self.tool_calls.len() <= i {
                    let empty = ToolCall { id: String::new(), name: String::new(), arguments: String::new() };
                    self.tool_calls.resize(i + 1, empty);
                }
                let call = &mut self.tool_calls[i];
                if let Some(id) = id {
                    call.id.clone_from(id);
                }
                if let Some(name) = name {
                    call.name.push_str(name);
                }
                call.arguments.push_str(arguments);
            }
            Event::Usage(u) => self.usage = Some(*u),
            Event::Finish(f) => self.finish = Some(*f),
            Event::Relay(_) | Event::Native(_) | Event::Embeddings(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_by_index_whatever_order_they_come_in() {
        let mut whole = WholeAnswer::default();
        let call = |index, id: Option<&str>, name: Option<&str>, arguments: &str| Event::ToolCallDelta {
            index,
            id: id.map(str::to_string),
            name: name.map(str::to_string),
            arguments: arguments.to_string(),
        };
        for event in [
            Event::ReasoningDelta("think".into()),
            Event::TextDelta("Hel".into()),
            call(1, Some("c2"), Some("b"), "{"),
            call(0, Some("c1"), Some("a"), "{\"x\":"),
            Event::TextDelta("lo".into()),
            call(0, None, None, "1}"),
            call(1, None, None, "}"),
            Event::Usage(Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() }),
            Event::Finish(FinishReason::ToolCalls),
        ] {
            whole.add(&event);
        }
        assert_eq!((whole.text.as_str(), whole.reasoning.as_str()), ("Hello", "think"));
        let calls: Vec<(&str, &str, &str)> =
            whole.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("c1", "a", "{\"x\":1}"), ("c2", "b", "{}")]);
        assert_eq!(
            (whole.usage.map(|u| u.output_tokens), whole.finish),
            (Some(2), Some(FinishReason::ToolCalls))
        );
    }

    #[test]
    fn taken_events_keep_the_relayed_chunk_and_the_vectors() {
        let mut whole = WholeAnswer::default();
        let chunk = |fields: &'static str| RelayChunk {
            fields: bytes::Bytes::from_static(fields.as_bytes()),
            usage: None,
            no_choices: false,
            output: false,
        };
        whole.add(&Event::Embeddings(vec![vec![1.0]]));
        assert!(whole.vectors.is_empty(), "a tap copies no vectors");
        for event in [
            Event::Relay(chunk(",\"a\":1")),
            Event::Relay(chunk(",\"b\":2")),
            Event::Embeddings(vec![vec![0.5, 0.25]]),
            Event::TextDelta("x".into()),
        ] {
            whole.take(event);
        }
        assert_eq!(whole.relayed.map(|c| c.fields), Some(bytes::Bytes::from_static(b",\"b\":2")), "the last");
        assert_eq!((whole.vectors, whole.text.as_str()), (vec![vec![0.5, 0.25]], "x"));
    }
}
