//! `POST /v1/completions`: OpenAI's legacy completions dialect. It decodes the request (`prompt`
//! as a string, strings, token ids or lists of them; the sampling fields; `stream` with
//! `stream_options.include_usage`; `echo`, `logprobs`, `suffix`, `n`), keeps every other member
//! to pass on as written, and hands it to the shared core (`serve::serve`) as a canonical
//! request whose operation is a [`Completion`].
//!
//! Only OpenAI-wire backends (vLLM pools, openai, openai_compatible) are eligible (the
//! capability filter), and they speak this very format, so the answer is the upstream's own
//! `text_completion` JSON or chunks with the head (`id`, `created`, `model`) rewritten to the
//! router's. After the first token an upstream failure ends the stream with an in-band error
//! and no `[DONE]`, as chat does. Its decode and whole answer are a [`DialectDoor`], which batch
//! lines go through too. It must not route, retry or price anything itself.

use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::chunks::{self, ChunkWriter};
use super::error::{ApiError, ErrorCode};
use super::front::{self, Incoming};
use super::input::{self, EmptyText};
use super::whole::{self, DialectDoor, WholeBody};
use super::wire::{self, StopField, StreamOptions, WireUsage};
use crate::canonical::{ChatRequest, Completion, Operation, RelayChunk, Usage};
use crate::config::TaskConfig;
use crate::serve::{self, Headers, Served};

#[derive(Debug, Deserialize)]
pub(crate) struct CompletionsRequest {
    model: String,
    /// Checked by [`input::decode`], so that every wrong shape names its place.
    prompt: Value,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default)]
    logprobs: Option<u32>,
    #[serde(default)]
    suffix: Option<String>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    seed: Option<u64>,
    /// Every other member, passed on as written.
    #[serde(flatten)]
    passthrough: Map<String, Value>,
}

impl CompletionsRequest {
    fn wants_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// The canonical request (its `model` is filled in per backend by dispatch); the task's
    /// `output_cap` caps `max_tokens` as it does for chat.
    fn to_canonical(&self, output_cap: Option<u32>) -> Result<ChatRequest, ApiError> {
        let prompt = input::decode(&self.prompt, "prompt", EmptyText::Allowed)?;
        let invalid = |param: &str, why: String| ApiError::new(ErrorCode::InvalidValue, why).param(param);
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(invalid("temperature", format!("`temperature` {t} is outside 0 to 2")));
        }
        if let Some(p) = self.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(invalid("top_p", format!("`top_p` {p} is outside 0 to 1")));
        }
        if self.n == Some(0) {
            return Err(invalid("n", "`n` must be at least 1".into()));
        }
        let max_tokens = match (self.max_tokens, output_cap) {
            (Some(asked), Some(cap)) => Some(asked.min(cap)),
            (asked, cap) => asked.or(cap),
        };
        Ok(ChatRequest {
            max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            stop: match &self.stop {
                None => Vec::new(),
                Some(StopField::One(s)) => vec![s.clone()],
                Some(StopField::Many(v)) => v.clone(),
            },
            seed: self.seed,
            stream: self.wants_stream(),
            operation: Operation::Completion(Completion {
                prompt,
                stream: self.wants_stream(),
                echo: self.echo,
                logprobs: self.logprobs,
                suffix: self.suffix.clone(),
                n: self.n,
                passthrough: self.passthrough.clone(),
            }),
            ..ChatRequest::default()
        })
    }
}

/// OpenAI's legacy completions.
pub(crate) struct Completions;

impl DialectDoor for Completions {
    type Request = CompletionsRequest;

    fn decode(body: &bytes::Bytes) -> Result<CompletionsRequest, ApiError> {
        wire::decode_json(body, "a completions request")
    }

    fn model(request: &CompletionsRequest) -> &str {
        &request.model
    }

    fn to_canonical(
        request: &mut CompletionsRequest,
        _: &dyn Headers,
        task: &TaskConfig,
    ) -> Result<ChatRequest, ApiError> {
        request.to_canonical(task.max_output_tokens)
    }

    /// The upstream's `text_completion` under the router's head.
    async fn encode_whole(_: &CompletionsRequest, served: Served) -> WholeBody {
        let Served { committed, task, created, .. } = served;
        let answer = whole::whole_answer(committed.events, &committed.backend).await?;
        let usage = answer.usage.unwrap_or_default();
        Ok(answer_body(&new_id(), &task, created, answer.relayed, &usage))
    }

    fn envelope(error: &ApiError) -> (u16, Value) {
        (error.status, error.body())
    }
}

fn new_id() -> String {
    format!("cmpl-{:016x}", rand::random::<u64>())
}

pub async fn completions(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, &headers, body).await?;
    let mut request = Completions::decode(&received.body)?;
    let arrival = received.arrival(request_id, trace, &headers);
    let admission = received.admission;
    let served = whole::serve::<Completions>(&state.serving, arrival, &mut request).await?;
    if !request.wants_stream() {
        return whole::respond_whole::<Completions>(&request, served, admission).await;
    }
    let Served { committed, task, created, headers: spillway_headers, cost, .. } = served;
    let include_usage = request.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let writer = ChunkWriter::text_completion(&new_id(), &task, created);
    let c = std::sync::Arc::clone(&cost);
    let mut response =
        chunks::stream_response(committed.events, &committed.backend, writer, include_usage, c, admission);
    front::add_headers(response.headers_mut(), spillway_headers.into_iter().chain(serve::cost_header(&cost)));
    Ok(response)
}

/// The upstream's `text_completion` under the router's head, with its usage (or, when it
/// wrote none, the usage as read).
fn answer_body(id: &str, task: &str, created: u64, relayed: Option<RelayChunk>, usage: &Usage) -> Vec<u8> {
    let head = serde_json::json!({"id": id, "object": "text_completion", "created": created, "model": task});
    let mut out = head.to_string().into_bytes();
    out.pop(); // the closing brace: the upstream's members follow
    let (fields, raw_usage) = match &relayed {
        Some(chunk) => (&chunk.fields[..], chunk.usage.as_deref().filter(|u| *u != b"null")),
        None => (&b",\"choices\":[]"[..], None),
    };
    out.extend_from_slice(fields);
    out.extend_from_slice(b",\"usage\":");
    match raw_usage {
        Some(raw) => out.extend_from_slice(raw),
        None => serde_json::to_writer(&mut out, &WireUsage::from(usage)).expect("numbers serialise"),
    }
    out.push(b'}');
    out
}

#[cfg(test)]
#[path = "completions_tests.rs"]
mod tests;
