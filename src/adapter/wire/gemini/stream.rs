//! Gemini's answers, read into typed structs: every streamed event is a whole
//! `GenerateContentResponse`, and the stream is complete once a candidate has carried a
//! `finishReason` (there is no `[DONE]`). Usage is taken from the last `usageMetadata`. Gemini
//! has no tool call ids, so they are synthesised; thought summaries are not the answer.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::error::ErrorObject;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::wire::{count, ObjectOr};
use crate::canonical::{ErrorClass, Event, FinishReason, UpstreamError, Usage};

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "PROHIBITED_CONTENT" | "BLOCKLIST" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        // STOP, and anything else that ends the candidate.
        _ => FinishReason::Stop,
    }
}

/// One `GenerateContentResponse`, as far as Spillway reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponseIn<'a> {
    #[serde(default)]
    error: Option<ObjectOr<ErrorObject>>,
    #[serde(default)]
    usage_metadata: Option<UsageIn>,
    #[serde(default, borrow)]
    candidates: Option<Vec<CandidateIn<'a>>>,
    #[serde(default, borrow)]
    prompt_feedback: Option<FeedbackIn<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CandidateIn<'a> {
    #[serde(default, borrow)]
    content: Option<ContentIn<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ContentIn<'a> {
    #[serde(default, borrow)]
    parts: Option<Vec<PartIn<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartIn<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    /// A thought summary, not the answer.
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default, borrow)]
    function_call: Option<CallIn<'a>>,
}

#[derive(Deserialize)]
struct CallIn<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FeedbackIn<'a> {
    #[serde(default, borrow)]
    block_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageIn {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
}

impl UsageIn {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: count(self.prompt_token_count),
            cached_input_tokens: count(self.cached_content_token_count),
            output_tokens: count(self.candidates_token_count)
                .saturating_add(count(self.thoughts_token_count)),
            // Implicit caching bills no writes (explicit cached contents are made apart).
            cache_write_tokens: 0,
        }
    }
}

/// Every event of a non-streamed `GenerateContentResponse` body.
pub(in crate::adapter) fn parse_response(body: &[u8]) -> Result<Vec<Event>, UpstreamError> {
    let mut parser = GeminiStream::new();
    let chunk: ResponseIn = http::whole(body)?;
    let mut events = parser.on_chunk(chunk)?;
    events.extend(parser.close()?);
    Ok(events)
}

/// Parser state of one answer (streamed, or one whole body).
#[derive(Debug)]
pub(crate) struct GeminiStream {
    /// Prefix of the synthesised tool call ids, unique per answer.
    id_prefix: String,
    tool_calls: u32,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

impl GeminiStream {
    pub(crate) fn new() -> Self {
        Self::with_id_prefix(format!("call_{:012x}", rand::random::<u64>() >> 16))
    }

    pub(crate) fn with_id_prefix(id_prefix: impl Into<String>) -> Self {
        GeminiStream { id_prefix: id_prefix.into(), tool_calls: 0, usage: None, finish: None }
    }

    /// One `GenerateContentResponse`.
    fn on_chunk(&mut self, chunk: ResponseIn<'_>) -> Result<Vec<Event>, UpstreamError> {
        if let Some(error) = chunk.error.as_ref().and_then(ObjectOr::object) {
            return Err(error.in_band());
        }
        if let Some(meta) = &chunk.usage_metadata {
            self.usage = Some(meta.to_usage());
        }
        let Some(candidate) = chunk.candidates.into_iter().flatten().next() else {
            if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
                return Err(UpstreamError::new(
                    ErrorClass::ContentPolicy,
                    None,
                    format!("prompt blocked by the provider: {reason}"),
                ));
            }
            return Ok(Vec::new());
        };
        let mut events = Vec::new();
        let parts = candidate.content.and_then(|c| c.parts).into_iter().flatten();
        for part in parts.filter(|p| p.thought != Some(true)) {
            if let Some(text) = part.text.filter(|t| !t.is_empty()) {
                events.push(Event::TextDelta(text.into_owned()));
            }
            if let Some(call) = part.function_call {
                let index = self.tool_calls;
                self.tool_calls += 1;
                let id =
                    call.id.map(Cow::into_owned).unwrap_or_else(|| format!("{}_{index}", self.id_prefix));
                let args = call.args.unwrap_or_else(|| Value::Object(Default::default()));
                events.push(Event::ToolCallDelta {
                    index,
                    id: Some(id),
                    name: call.name.map(Cow::into_owned),
                    arguments: args.to_string(),
                });
            }
        }
        if let Some(reason) = candidate.finish_reason {
            self.finish = Some(finish_reason(&reason));
        }
        Ok(events)
    }

    /// The answer is over: its closing events, or `StreamBroken` if no candidate finished.
    fn close(&mut self) -> Result<Vec<Event>, UpstreamError> {
        let Some(mut finish) = self.finish.take() else {
            return Err(http::truncated("a candidate with finishReason"));
        };
        // Gemini says STOP after function calls.
        if finish == FinishReason::Stop && self.tool_calls > 0 {
            finish = FinishReason::ToolCalls;
        }
        let mut events = Vec::new();
        if let Some(usage) = self.usage.take() {
            events.push(Event::Usage(usage));
        }
        events.push(Event::Finish(finish));
        Ok(events)
    }
}

impl StreamParser for GeminiStream {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let chunk: ResponseIn<'_> = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
        self.on_chunk(chunk)
    }

    /// Gemini has no end marker after the finishing chunk: read to the end of the body, where
    /// the last `usageMetadata` is known.
    fn is_closed(&self) -> bool {
        false
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        self.close()
    }
}
