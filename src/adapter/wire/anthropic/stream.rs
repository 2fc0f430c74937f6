//! Claude's answers, read into typed structs: a stream's events by their `type`, with an
//! `Unknown` arm for `ping`, `content_block_stop` and the types added later, and a whole
//! `message` body. A stream is complete only once `message_stop` has arrived. Relayed to a
//! Messages client, each event goes on as the host wrote it, its thinking signatures marked
//! with their signer ([`super::provenance`]).

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::ErrorObject;
use super::provenance;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::wire::output::Output;
use crate::adapter::wire::{count, event_type, usage_beside_cache, ObjectOr};
use crate::canonical::{ErrorClass, Event, FinishReason, NativeEvent, Relaying, UpstreamError, Usage};

/// One event of a streamed answer.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent<'a> {
    MessageStart {
        #[serde(default)]
        message: Option<MessageHead>,
    },
    ContentBlockStart {
        #[serde(default)]
        index: u64,
        #[serde(borrow)]
        content_block: BlockStart<'a>,
    },
    ContentBlockDelta {
        #[serde(default)]
        index: u64,
        #[serde(borrow)]
        delta: DeltaIn<'a>,
    },
    MessageDelta {
        #[serde(default, borrow)]
        delta: Option<MessageDelta<'a>>,
        #[serde(default)]
        usage: Option<UsageIn>,
    },
    MessageStop,
    Error {
        #[serde(default)]
        error: Option<ErrorObject>,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageHead {
    #[serde(default)]
    usage: Option<UsageIn>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart<'a> {
    Text {
        #[serde(default, borrow)]
        text: Cow<'a, str>,
    },
    ToolUse {
        #[serde(default, borrow)]
        id: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        name: Option<Cow<'a, str>>,
    },
    /// Its data is a signature to mark when relayed.
    RedactedThinking,
    /// Thinking (its text comes in deltas), server tools, and block types added later.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DeltaIn<'a> {
    TextDelta {
        #[serde(default, borrow)]
        text: Cow<'a, str>,
    },
    ThinkingDelta {
        #[serde(default, borrow)]
        thinking: Cow<'a, str>,
    },
    InputJsonDelta {
        #[serde(default, borrow)]
        partial_json: Cow<'a, str>,
    },
    /// A signature to mark when relayed.
    SignatureDelta,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta<'a> {
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

/// A `usage` object, whose `input_tokens` counts only the uncached prompt: canonical input
/// counts every prompt token, those read from the cache (`cache_read_input_tokens`) and written
/// to it (`cache_creation_input_tokens`) included.
#[derive(Deserialize)]
struct UsageIn {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl UsageIn {
    fn to_usage(&self) -> Usage {
        usage_beside_cache(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens,
            self.cache_creation_input_tokens,
        )
    }
}

/// A whole `message` body (or an error in its place).
#[derive(Deserialize)]
struct MessageIn<'a> {
    #[serde(default, rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<ObjectOr<ErrorObject>>,
    #[serde(default, borrow)]
    content: Option<Vec<BlockIn<'a>>>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockIn<'a> {
    Text {
        #[serde(default, borrow)]
        text: Cow<'a, str>,
    },
    Thinking {
        #[serde(default, borrow)]
        thinking: Cow<'a, str>,
    },
    ToolUse {
        #[serde(default, borrow)]
        id: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(default)]
        input: Option<Value>,
    },
    #[serde(other)]
    Other,
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        // end_turn, stop_sequence, pause_turn and anything new.
        _ => FinishReason::Stop,
    }
}

/// [`parse_response`], with the whole body first as a [`NativeEvent`] named `message`, its
/// thinking signatures marked with their `signer` ([`provenance`]), relayed as `relaying` says.
pub(super) fn relayed(
    body: &[u8],
    signer: Option<&str>,
    relaying: Relaying,
) -> Result<Vec<Event>, UpstreamError> {
    let events = parse_response(body)?;
    // On one line, as the door may write it as one SSE event.
    let mut body: Value = serde_json::from_slice(body).unwrap_or_default();
    if let Some(signer) = signer.filter(|_| provenance::signed(&body)) {
        provenance::mark_all(signer, &mut body);
    }
    let data = serde_json::to_vec(&body);
    let data = data.unwrap_or_default().into();
    Ok(Output::of(relaying, events)
        .behind(|output| Event::Native(NativeEvent { name: "message".into(), data, output })))
}

/// Every event of a non-streamed `message` body.
pub(in crate::adapter) fn parse_response(body: &[u8]) -> Result<Vec<Event>, UpstreamError> {
    let message: MessageIn = http::whole(body)?;
    if message.kind.as_deref() == Some("error") {
        let error = message.error.as_ref().and_then(ObjectOr::object);
        return Err(error.map_or_else(|| ErrorObject::default().in_band(), ErrorObject::in_band));
    }
    let content = message
        .content
        .ok_or_else(|| UpstreamError::new(ErrorClass::StreamBroken, None, "message has no content"))?;
    let mut events = Vec::new();
    let mut tool_index = 0;
    for block in content {
        match block {
            BlockIn::Text { text } if !text.is_empty() => events.push(Event::TextDelta(text.into_owned())),
            BlockIn::Thinking { thinking } if !thinking.is_empty() => {
                events.push(Event::ReasoningDelta(thinking.into_owned()))
            }
            BlockIn::ToolUse { id, name, input } => {
                events.push(Event::ToolCallDelta {
                    index: tool_index,
                    id: id.map(Cow::into_owned),
                    name: name.map(Cow::into_owned),
                    arguments: input.unwrap_or_else(|| Value::Object(Default::default())).to_string(),
                });
                tool_index += 1;
            }
            _ => {}
        }
    }
    if let Some(usage) = &message.usage {
        events.push(Event::Usage(usage.to_usage()));
    }
    events.push(Event::Finish(finish_reason(message.stop_reason.as_deref().unwrap_or("end_turn"))));
    Ok(events)
}

/// Parser state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    /// Hand each event on raw, as an [`Event::Native`] (ahead of the events read from it, or
    /// alone).
    relaying: Relaying,
    /// Who signs the thinking relayed ([`provenance`]); `None`: a node, which signs none.
    signer: Option<&'static str>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    /// Content block index → canonical tool call index.
    tool_blocks: HashMap<u64, u32>,
    done: bool,
}

impl AnthropicStream {
    /// A parser for one answer, each event also handed on as an [`Event::Native`] as
    /// `relaying` says, its signatures marked with their `signer`.
    pub(crate) fn new(relaying: Relaying, signer: Option<&'static str>) -> AnthropicStream {
        AnthropicStream { relaying, signer, ..AnthropicStream::default() }
    }

    /// `event` as the client gets it, named by its type: as the host wrote it (`data`), or with
    /// its signature marked with its signer. An error is the stream's end, never relayed.
    fn relayed(&self, event: &StreamEvent<'_>, data: &str) -> Result<Option<NativeEvent>, UpstreamError> {
        let name: Cow<'static, str> = match event {
            StreamEvent::Error { .. } => return Ok(None),
            StreamEvent::MessageStart { .. } => "message_start".into(),
            StreamEvent::ContentBlockStart { .. } => "content_block_start".into(),
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta".into(),
            StreamEvent::MessageDelta { .. } => "message_delta".into(),
            StreamEvent::MessageStop => "message_stop".into(),
            StreamEvent::Unknown => event_type(data),
        };
        let signed = matches!(
            event,
            StreamEvent::ContentBlockDelta { delta: DeltaIn::SignatureDelta, .. }
                | StreamEvent::ContentBlockStart { content_block: BlockStart::RedactedThinking, .. }
        );
        let data = match self.signer.filter(|_| signed) {
            Some(signer) => {
                let mut marked: Value = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
                provenance::mark_all(signer, &mut marked);
                bytes::Bytes::from(marked.to_string())
            }
            None => bytes::Bytes::copy_from_slice(data.as_bytes()),
        };
        Ok(Some(NativeEvent { name, data, output: false }))
    }
}

impl StreamParser for AnthropicStream {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let event: StreamEvent<'_> = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
        let relayed = if self.relaying.is_on() { self.relayed(&event, data)? } else { None };
        let mut output = Output::new(self.relaying);
        match event {
            StreamEvent::MessageStart { message } => {
                if let Some(usage) = message.and_then(|m| m.usage) {
                    self.usage = Some(usage.to_usage());
                }
            }
            StreamEvent::ContentBlockStart { index, content_block } => match content_block {
                BlockStart::Text { text } if !text.is_empty() => {
                    output.push(|| Event::TextDelta(text.into_owned()))
                }
                BlockStart::ToolUse { id, name } => {
                    let tool_index = self.tool_blocks.len() as u32;
                    self.tool_blocks.insert(index, tool_index);
                    output.push(|| Event::ToolCallDelta {
                        index: tool_index,
                        id: id.map(Cow::into_owned),
                        name: name.map(Cow::into_owned),
                        arguments: String::new(),
                    });
                }
                _ => {}
            },
            StreamEvent::ContentBlockDelta { index, delta } => match delta {
                DeltaIn::TextDelta { text } if !text.is_empty() => {
                    output.push(|| Event::TextDelta(text.into_owned()))
                }
                DeltaIn::ThinkingDelta { thinking } if !thinking.is_empty() => {
                    output.push(|| Event::ReasoningDelta(thinking.into_owned()))
                }
                DeltaIn::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    if let Some(&tool_index) = self.tool_blocks.get(&index) {
                        output.push(|| Event::ToolCallDelta {
                            index: tool_index,
                            id: None,
                            name: None,
                            arguments: partial_json.into_owned(),
                        });
                    }
                }
                _ => {}
            },
            StreamEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|d| d.stop_reason) {
                    self.finish = Some(finish_reason(&reason));
                }
                if let Some(update) = usage {
                    // Counts in message_delta are cumulative; input counts may be absent.
                    let mut current = self.usage.unwrap_or_default();
                    if update.output_tokens.is_some() {
                        current.output_tokens = count(update.output_tokens);
                    }
                    if update.input_tokens.is_some() {
                        let update = update.to_usage();
                        current.input_tokens = update.input_tokens;
                        current.cached_input_tokens = update.cached_input_tokens;
                        current.cache_write_tokens = update.cache_write_tokens;
                    }
                    self.usage = Some(current);
                }
            }
            StreamEvent::MessageStop => {
                self.done = true;
                if let Some(usage) = self.usage.take() {
                    output.keep(Event::Usage(usage));
                }
                output.keep(Event::Finish(self.finish.take().unwrap_or(FinishReason::Stop)));
            }
            StreamEvent::Error { error } => return Err(error.unwrap_or_default().in_band()),
            StreamEvent::Unknown => {}
        }
        Ok(match relayed {
            Some(native) => output.behind(|output| Event::Native(NativeEvent { output, ..native })),
            None => output.events(),
        })
    }

    fn is_closed(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        if self.done {
            Ok(Vec::new())
        } else {
            Err(http::truncated("message_stop"))
        }
    }
}
