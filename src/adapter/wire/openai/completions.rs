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
use serde::{Deserialize, Serialize};

use super::error::{classify, finish_reason, ErrorMember};
use super::relay::SplitChunk;
use super::request::{Sampling, StreamOptions};
use super::stream::UsageIn;
use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::wire::Passthrough;
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{
    ChatRequest, Completion, Event, FinishReason, Input, RelayChunk, UpstreamError, Usage,
};

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
    let body = serde_json::to_vec(&CompletionBody::of(req, call.model, completion))
        .expect("a typed body serialises");
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

/// The completions request body: the checked members, then the client's others as written.
#[derive(Serialize)]
pub(crate) struct CompletionBody<'a> {
    model: &'a str,
    prompt: &'a Input,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    sampling: Sampling<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    echo: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    suffix: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    n: Option<u32>,
    #[serde(flatten)]
    rest: Passthrough<'a>,
}

impl<'a> CompletionBody<'a> {
    /// Each member the body writes itself.
    const OWNED: &'static [&'static str] = &[
        "model",
        "prompt",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "echo",
        "logprobs",
        "suffix",
        "n",
    ];

    pub(crate) fn of(req: &'a ChatRequest, model: &'a str, completion: &'a Completion) -> CompletionBody<'a> {
        CompletionBody {
            model,
            prompt: &completion.prompt,
            stream: completion.stream,
            stream_options: completion.stream.then_some(StreamOptions { include_usage: true }),
            sampling: Sampling::of(req),
            echo: completion.echo,
            logprobs: completion.logprobs,
            suffix: completion.suffix.as_deref(),
            n: completion.n,
            rest: Passthrough { members: &completion.passthrough, owned: Self::OWNED },
        }
    }
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
pub(in crate::adapter) fn parse_response(body: &[u8]) -> Result<Vec<Event>, UpstreamError> {
    let malformed = |e: serde_json::Error| http::malformed(&String::from_utf8_lossy(body), &e);
    let split: SplitChunk<'_> = http::whole(body)?;
    if let Some(error) =
        split.error.map(serde_json::from_str::<ErrorMember>).transpose().map_err(malformed)?
    {
        if let Some(error) = error.object() {
            return Err(error.in_band());
        }
    }
    let usage = split.usage.map(serde_json::from_str::<Option<UsageIn>>).transpose().map_err(malformed)?;
    let choices: Vec<ChoiceIn<'_>> =
        split.choices.map(serde_json::from_str).transpose().map_err(malformed)?.unwrap_or_default();
    let (mut events, finish) = read_choices(&choices)?;
    let relay: RelayChunk = split.relay(choices.is_empty(), false);
    events.insert(0, Event::Relay(relay));
    if let Some(usage) = usage.flatten() {
        events.push(Event::Usage(usage.to_usage()));
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
            if let Some(error) = serde_json::from_str::<ErrorMember>(error).map_err(malformed)?.object() {
                return Err(error.in_band());
            }
        }
        if let Some(raw) = split.usage {
            if let Some(usage) = serde_json::from_str::<Option<UsageIn>>(raw).map_err(malformed)? {
                self.usage = Some(usage.to_usage());
            }
        }
        let choices: Vec<ChoiceIn<'_>> =
            split.choices.map(serde_json::from_str).transpose().map_err(malformed)?.unwrap_or_default();
        let (mut events, finish) = read_choices(&choices)?;
        if finish.is_some() {
            self.finish = finish;
        }
        events.insert(0, Event::Relay(split.relay(choices.is_empty(), false)));
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
