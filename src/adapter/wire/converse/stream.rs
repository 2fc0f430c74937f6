//! Converse's answers, read into typed structs. A stream's events come in event-stream frames
//! named by their `:event-type` ([`StreamEvent`], with an `Unknown` arm for the types added
//! later); it sends no `contentBlockStart` for text and reasoning (blocks are known by
//! `contentBlockIndex`), and its `metadata` event, with the usage, comes after `messageStop`.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::wire::usage_beside_cache;
use crate::canonical::{ErrorClass, Event, FinishReason, UpstreamError, Usage};

/// One event of a ConverseStream answer, by its `:event-type`.
enum StreamEvent<'a> {
    ContentBlockStart(BlockStart<'a>),
    ContentBlockDelta(BlockDelta<'a>),
    MessageStop(MessageStop<'a>),
    Metadata(Metadata),
    /// messageStart, contentBlockStop, and event types added later.
    Unknown,
}

impl<'a> StreamEvent<'a> {
    fn read(event: &str, data: &'a str) -> Result<StreamEvent<'a>, serde_json::Error> {
        Ok(match event {
            "contentBlockStart" => StreamEvent::ContentBlockStart(serde_json::from_str(data)?),
            "contentBlockDelta" => StreamEvent::ContentBlockDelta(serde_json::from_str(data)?),
            "messageStop" => StreamEvent::MessageStop(serde_json::from_str(data)?),
            "metadata" => StreamEvent::Metadata(serde_json::from_str(data)?),
            _ => StreamEvent::Unknown,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart<'a> {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default, borrow)]
    start: Option<Start<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Start<'a> {
    #[serde(default, borrow)]
    tool_use: Option<ToolUseIn<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseIn<'a> {
    #[serde(default, borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    /// A whole answer's tool input (an object); a stream's comes in deltas.
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta<'a> {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<ReasoningDelta<'a>>,
    #[serde(default, borrow)]
    tool_use: Option<InputDelta<'a>>,
}

#[derive(Deserialize)]
struct ReasoningDelta<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct InputDelta<'a> {
    #[serde(default, borrow)]
    input: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop<'a> {
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    usage: Option<UsageIn>,
}

/// Converse's `inputTokens` leaves cache reads and writes out, as Anthropic's does.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageIn {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_write_input_tokens: Option<u64>,
}

impl UsageIn {
    fn to_usage(&self) -> Usage {
        usage_beside_cache(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens,
            self.cache_write_input_tokens,
        )
    }
}

/// A whole Converse answer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerIn<'a> {
    #[serde(default, borrow)]
    output: Option<OutputIn<'a>>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct OutputIn<'a> {
    #[serde(default, borrow)]
    message: Option<MessageIn<'a>>,
}

#[derive(Deserialize)]
struct MessageIn<'a> {
    #[serde(borrow)]
    content: Vec<BlockIn<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockIn<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<ReasoningIn<'a>>,
    #[serde(default, borrow)]
    tool_use: Option<ToolUseIn<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningIn<'a> {
    #[serde(default, borrow)]
    reasoning_text: Option<ReasoningDelta<'a>>,
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

/// Every event of a non-streamed Converse answer.
pub(in crate::adapter) fn parse_response(body: &[u8]) -> Result<Vec<Event>, UpstreamError> {
    let no_message =
        || UpstreamError::new(ErrorClass::StreamBroken, None, "the Converse answer has no output message");
    let answer: AnswerIn = serde_json::from_slice(body).map_err(|_| no_message())?;
    let message = answer.output.and_then(|o| o.message).ok_or_else(no_message)?;
    let mut events = Vec::new();
    let mut tools = 0;
    for block in message.content {
        if let Some(text) = block.text.filter(|t| !t.is_empty()) {
            events.push(Event::TextDelta(text.into_owned()));
        } else if let Some(text) = block.reasoning_content.and_then(|r| r.reasoning_text).and_then(|r| r.text)
        {
            events.push(Event::ReasoningDelta(text.into_owned()));
        } else if let Some(tool) = block.tool_use {
            events.push(Event::ToolCallDelta {
                index: tools,
                id: tool.tool_use_id.map(Cow::into_owned),
                name: tool.name.map(Cow::into_owned),
                arguments: tool.input.unwrap_or_else(|| Value::Object(Default::default())).to_string(),
            });
            tools += 1;
        }
    }
    if let Some(usage) = &answer.usage {
        events.push(Event::Usage(usage.to_usage()));
    }
    events.push(Event::Finish(finish_reason(answer.stop_reason.as_deref().unwrap_or("end_turn"))));
    Ok(events)
}

/// Parser state of one ConverseStream answer.
#[derive(Debug, Default)]
pub(crate) struct ConverseStream {
    /// Content block index → canonical tool call index.
    tool_blocks: HashMap<u64, u32>,
    finish: Option<FinishReason>,
    done: bool,
}

impl StreamParser for ConverseStream {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let event = StreamEvent::read(event, data).map_err(|e| http::malformed(data, &e))?;
        let mut events = Vec::new();
        match event {
            StreamEvent::ContentBlockStart(start) => {
                if let Some(tool) = start.start.and_then(|s| s.tool_use) {
                    let tool_index = self.tool_blocks.len() as u32;
                    self.tool_blocks.insert(start.content_block_index, tool_index);
                    events.push(Event::ToolCallDelta {
                        index: tool_index,
                        id: tool.tool_use_id.map(Cow::into_owned),
                        name: tool.name.map(Cow::into_owned),
                        arguments: String::new(),
                    });
                }
            }
            StreamEvent::ContentBlockDelta(BlockDelta { content_block_index: index, delta: Some(delta) }) => {
                if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                    events.push(Event::TextDelta(text.into_owned()));
                } else if let Some(text) = delta.reasoning_content.and_then(|r| r.text) {
                    events.push(Event::ReasoningDelta(text.into_owned()));
                } else if let Some(input) = delta.tool_use.and_then(|t| t.input).filter(|i| !i.is_empty()) {
                    if let Some(&tool_index) = self.tool_blocks.get(&index) {
                        events.push(Event::ToolCallDelta {
                            index: tool_index,
                            id: None,
                            name: None,
                            arguments: input.into_owned(),
                        });
                    }
                }
            }
            StreamEvent::MessageStop(stop) => {
                self.finish = Some(finish_reason(stop.stop_reason.as_deref().unwrap_or("end_turn")));
            }
            // The usage, after messageStop: the answer is whole.
            StreamEvent::Metadata(metadata) => {
                if let Some(usage) = &metadata.usage {
                    events.push(Event::Usage(usage.to_usage()));
                }
                if let Some(finish) = self.finish.take() {
                    events.push(Event::Finish(finish));
                    self.done = true;
                }
            }
            StreamEvent::ContentBlockDelta(_) | StreamEvent::Unknown => {}
        }
        Ok(events)
    }

    fn is_closed(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        match self.finish.take() {
            // A stream may end after messageStop without its metadata.
            Some(finish) if !self.done => Ok(vec![Event::Finish(finish)]),
            _ if self.done => Ok(Vec::new()),
            _ => Err(http::truncated("messageStop")),
        }
    }
}
