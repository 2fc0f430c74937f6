//! OpenAI legacy completions (`/v1/completions`), as spoken by vLLM, OpenAI and any
//! OpenAI-compatible endpoint.
//!
//! The client speaks the upstream's own wire, so the request passes through: `POST
//! {base_url}/completions` with `model` rewritten, the checked fields written back and every
//! other member the client sent as it sent it. A stream always asks for
//! `stream_options.include_usage`, so the ledger gets the usage. The answer is relayed: each
//! upstream `text_completion` (the whole body, or each chunk) comes as an [`Event::Relay`]
//! with only its head dropped, then the text deltas read from it (dispatch commits at the
//! first, and fails over before it), and at the end the usage and the finish.

use std::borrow::Cow;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{json, Value};

use super::chat::{classify, finish_reason, in_band_error, usage};
use super::relay::SplitChunk;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{ChatRequest, Completion, Event, FinishReason, RelayChunk, UpstreamError, Usage};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
    completion: &Completion,
) -> Result<EventStream, UpstreamError> {
    let url = call.upstream.url("completions");
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(call.upstream.openai_key());
    if completion.stream {
        headers.push((ACCEPT, "text/event-stream".to_string()));
    }
    let body = request_body(req, call.model, completion).to_string().into_bytes();
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, classify).await?;
    if completion.stream {
        // A whole JSON answer to a stream request is relayed as its one chunk.
        Ok(http::answer_events(answer, true, CompletionStream::default(), parse_response))
    } else {
        // Relayed whole, so it must be whole: an event stream here is a broken answer.
        Ok(http::json_answer_events(answer, parse_response))
    }
}

/// The completions request body: the client's other members, then the checked ones.
pub(crate) fn request_body(req: &ChatRequest, model: &str, completion: &Completion) -> Value {
    let mut body = completion.passthrough.clone();
    body.insert("model".into(), json!(model));
    body.insert("prompt".into(), json!(completion.prompt));
    body.insert("stream".into(), json!(completion.stream));
    if completion.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let optional = [
        ("max_tokens", req.max_tokens.map(|v| json!(v))),
        ("temperature", req.temperature.map(|v| json!(v))),
        ("top_p", req.top_p.map(|v| json!(v))),
        ("stop", (!req.stop.is_empty()).then(|| json!(req.stop))),
        ("seed", req.seed.map(|v| json!(v))),
        ("echo", completion.echo.map(|v| json!(v))),
        ("logprobs", completion.logprobs.map(|v| json!(v))),
        ("suffix", completion.suffix.as_ref().map(|v| json!(v))),
        ("n", completion.n.map(|v| json!(v))),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            body.insert(key.into(), value);
        }
    }
    Value::Object(body)
}

/// One choice of a completion (whole or chunk), as far as dispatch reads it.
#[derive(Deserialize)]
struct ChoiceIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

/// The text deltas of `choices` (every choice's: any of them is output); the finish reason of
/// choice 0, when it has one.
fn read_choices(choices: &[ChoiceIn<'_>]) -> Result<(Vec<Event>, Option<FinishReason>), UpstreamError> {
    let mut events = Vec::new();
    let mut finish = None;
    for choice in choices {
        if let Some(text) = choice.text.as_deref().filter(|t| !t.is_empty()) {
            events.push(Event::TextDelta(text.to_string()));
        }
        if let (0, Some(reason)) = (choice.index.unwrap_or(0), choice.finish_reason.as_deref()) {
            finish = Some(finish_reason(reason)?);
        }
    }
    Ok((events, finish))
}

/// Every event of a non-streamed `text_completion` body.
pub(in crate::adapter) fn parse_response(body: &Value) -> Result<Vec<Event>, UpstreamError> {
    if let Some(error) = body.get("error").filter(|e| e.is_object()) {
        return Err(in_band_error(error));
    }
    let text = body.to_string();
    let malformed = |e: serde_json::Error| http::malformed(&text, &e);
    let split: SplitChunk<'_> = serde_json::from_str(&text).map_err(malformed)?;
    let choices: Vec<ChoiceIn<'_>> = split
        .choices
        .map(|c| serde_json::from_str(c.get()))
        .transpose()
        .map_err(malformed)?
        .unwrap_or_default();
    let (mut events, finish) = read_choices(&choices)?;
    let relay: RelayChunk = split.relay(choices.is_empty());
    events.insert(0, Event::Relay(relay));
    if let Some(usage) = body.get("usage").and_then(usage) {
        events.push(Event::Usage(usage));
    }
    events.push(Event::Finish(finish.unwrap_or(FinishReason::Stop)));
    Ok(events)
}

/// Parser state of one streamed completion: usage and finish are held for `[DONE]`.
#[derive(Debug, Default)]
pub(crate) struct CompletionStream {
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    done: bool,
}

impl StreamParser for CompletionStream {
    fn on_event(&mut self, _event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            let mut events: Vec<Event> = self.usage.take().map(Event::Usage).into_iter().collect();
            events.push(Event::Finish(self.finish.take().unwrap_or(FinishReason::Stop)));
            return Ok(events);
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let malformed = |e: serde_json::Error| http::malformed(data, &e);
        let split: SplitChunk<'_> = serde_json::from_str(data).map_err(malformed)?;
        if let Some(error) = split.error {
            let error: Value = serde_json::from_str(error.get()).map_err(malformed)?;
            if error.is_object() {
                return Err(in_band_error(&error));
            }
        }
        if let Some(raw) = split.usage {
            let value: Value = serde_json::from_str(raw.get()).map_err(malformed)?;
            if let Some(usage) = usage(&value) {
                self.usage = Some(usage);
            }
        }
        let choices: Vec<ChoiceIn<'_>> = split
            .choices
            .map(|c| serde_json::from_str(c.get()))
            .transpose()
            .map_err(malformed)?
            .unwrap_or_default();
        let (mut events, finish) = read_choices(&choices)?;
        if finish.is_some() {
            self.finish = finish;
        }
        events.insert(0, Event::Relay(split.relay(choices.is_empty())));
        Ok(events)
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

#[cfg(test)]
#[path = "completions_tests.rs"]
mod tests;
