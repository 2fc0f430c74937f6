//! An answer gathered whole from its events: the text, the reasoning, the tool calls joined by
//! index, the usage and the finish. What a door that answers with one JSON body, a grader and
//! the wire tests read.

use super::{Event, FinishReason, ToolCall, Usage};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct WholeAnswer {
    pub text: String,
    pub reasoning: String,
    /// Each call's pieces joined, in the order of their indexes.
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
}

impl WholeAnswer {
    /// Add one event; those that carry none of these (relayed chunks, embeddings) are skipped.
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
}
