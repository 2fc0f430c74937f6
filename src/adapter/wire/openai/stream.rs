//! OpenAI's answers, read into typed structs: a streamed chat completion's chunks (strings
//! borrowed from the event's text unless they hold escapes, fields Spillway does not use
//! skipped) and a whole `chat.completion` body. Usage and finish are held for `data: [DONE]`,
//! which a stream must end with.

use std::borrow::Cow;

use serde::Deserialize;

use super::error::{finish_reason, ErrorMember};
use super::relay::SplitChunk;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::wire::output::Output;
use crate::adapter::wire::{count, ObjectOr};
use crate::canonical::{ErrorClass, Event, FinishReason, Relaying, UpstreamError, Usage};

/// The events read from a streamed answer's bytes, relayed as `relaying` says, scrubbed as
/// [`crate::adapter::send`]'s are (the relay bench's reading, with no socket).
#[doc(hidden)]
pub fn events_of(sse: bytes::Bytes, relaying: Relaying) -> crate::canonical::EventStream {
    use crate::adapter::{redact::CallRedactor, Upstream};
    let events =
        http::drive(futures::stream::iter([Ok::<_, UpstreamError>(sse)]), OpenAiStream::new(relaying), |e| e);
    CallRedactor::new(std::sync::Arc::default(), &Upstream::default()).stream(events)
}

/// Every event of a non-streamed `chat.completion` body.
pub(in crate::adapter) fn parse_response(body: &[u8]) -> Result<Vec<Event>, UpstreamError> {
    let whole: CompletionIn = http::whole(body)?;
    if let Some(error) = whole.error.as_ref().and_then(ObjectOr::object) {
        return Err(error.in_band());
    }
    let choice = whole
        .choices
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| UpstreamError::new(ErrorClass::StreamBroken, None, "response has no choices"))?;
    let mut events = Vec::new();
    let message = choice.message.unwrap_or_default();
    if let Some(text) = message.content.filter(|t| !t.is_empty()) {
        events.push(Event::TextDelta(text.into_owned()));
    }
    for (index, call) in message.tool_calls.into_iter().flatten().enumerate() {
        let (name, arguments) = match call.function {
            Some(f) => (f.name, f.arguments.unwrap_or_default()),
            None => (None, Cow::Borrowed("")),
        };
        events.push(Event::ToolCallDelta {
            index: index as u32,
            id: call.id.map(Cow::into_owned),
            name: name.map(Cow::into_owned),
            arguments: arguments.into_owned(),
        });
    }
    if let Some(usage) = whole.usage {
        events.push(Event::Usage(usage.to_usage()));
    }
    events.push(Event::Finish(finish_reason(choice.finish_reason.as_deref().unwrap_or("stop"))?));
    Ok(events)
}

/// A whole `chat.completion` body.
#[derive(Deserialize)]
struct CompletionIn<'a> {
    #[serde(default)]
    error: Option<ErrorMember>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default, borrow)]
    choices: Option<Vec<WholeChoiceIn<'a>>>,
}

#[derive(Deserialize)]
struct WholeChoiceIn<'a> {
    #[serde(default, borrow)]
    message: Option<WholeMessageIn<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Default, Deserialize)]
struct WholeMessageIn<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

/// Parser state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    relaying: Relaying,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    done: bool,
}

/// One streamed chunk, read without building a JSON tree: strings borrow from the event's
/// text unless they hold escapes, and fields Spillway does not use are skipped.
#[derive(Deserialize)]
struct ChunkIn<'a> {
    #[serde(default)]
    error: Option<ErrorMember>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default, borrow)]
    choices: Option<Vec<ChoiceIn<'a>>>,
}

#[derive(Deserialize)]
struct ChoiceIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<DeltaIn<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaIn<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    /// vLLM's reasoning parsers write `reasoning_content`; newer releases `reasoning` (some
    /// both, with the same text).
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize)]
struct FunctionIn<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct UsageIn {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<CachedIn>,
}

#[derive(Deserialize)]
struct CachedIn {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl UsageIn {
    pub(super) fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: count(self.prompt_tokens),
            cached_input_tokens: count(self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens)),
            output_tokens: count(self.completion_tokens),
            cache_write_tokens: 0,
        }
    }
}

impl OpenAiStream {
    /// A parser for one answer, each chunk also handed on as [`Event::Relay`] as `relaying` says.
    pub(crate) fn new(relaying: Relaying) -> OpenAiStream {
        OpenAiStream { relaying, ..OpenAiStream::default() }
    }

    /// The output of one chunk into `output` (usage and finish are held for `[DONE]`).
    fn read(&mut self, chunk: ChunkIn<'_>, output: &mut Output) -> Result<(), UpstreamError> {
        if let Some(error) = chunk.error.as_ref().and_then(ObjectOr::object) {
            return Err(error.in_band());
        }
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.to_usage());
        }
        // One answer per request (n = 1): only choice 0 is read.
        let Some(choice) = chunk.choices.into_iter().flatten().find(|c| c.index.unwrap_or(0) == 0) else {
            return Ok(());
        };
        if let Some(delta) = choice.delta {
            if let Some(text) = delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty()) {
                output.push(|| Event::ReasoningDelta(text.into_owned()));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                output.push(|| Event::TextDelta(text.into_owned()));
            }
            for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                let index = call.index.unwrap_or(position as u64);
                let (name, arguments) = match call.function {
                    Some(f) => (f.name, f.arguments.unwrap_or_default()),
                    None => (None, Cow::Borrowed("")),
                };
                if call.id.is_none() && name.is_none() && arguments.is_empty() {
                    continue;
                }
                output.push(|| Event::ToolCallDelta {
                    index: index as u32,
                    id: call.id.map(Cow::into_owned),
                    name: name.map(Cow::into_owned),
                    arguments: arguments.into_owned(),
                });
            }
        }
        if let Some(reason) = choice.finish_reason {
            self.finish = Some(finish_reason(&reason)?);
        }
        Ok(())
    }
}

impl StreamParser for OpenAiStream {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            let mut events = Vec::new();
            if let Some(usage) = self.usage.take() {
                events.push(Event::Usage(usage));
            }
            events.push(Event::Finish(self.finish.take().unwrap_or(FinishReason::Stop)));
            return Ok(events);
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let mut output = Output::new(self.relaying);
        if !self.relaying.is_on() {
            let chunk: ChunkIn<'_> = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
            self.read(chunk, &mut output)?;
            return Ok(output.events());
        }
        let malformed = |e: serde_json::Error| http::malformed(data, &e);
        let (split, choices) = match SplitChunk::read::<Option<Vec<ChoiceIn<'_>>>>(data) {
            Some((split, choices)) => (split, choices.flatten()),
            // The careful reading, which names what is wrong.
            None => {
                let split: SplitChunk<'_> = serde_json::from_str(data).map_err(malformed)?;
                let choices = split.choices.map(serde_json::from_str).transpose().map_err(malformed)?;
                (split, choices.flatten())
            }
        };
        let chunk = ChunkIn {
            error: split.error.map(serde_json::from_str).transpose().map_err(malformed)?,
            usage: split.usage.map(serde_json::from_str).transpose().map_err(malformed)?.flatten(),
            choices,
        };
        let no_choices = chunk.choices.as_ref().is_none_or(Vec::is_empty);
        self.read(chunk, &mut output)?;
        Ok(output.behind(|output| Event::Relay(split.relay(no_choices, output))))
    }

    fn is_closed(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        if self.done {
            Ok(Vec::new())
        } else {
            Err(http::truncated("data: [DONE]"))
        }
    }
}
