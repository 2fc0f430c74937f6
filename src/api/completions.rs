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
//! and no `[DONE]`, as chat does. It must not route, retry or price anything itself.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::chunks::{self, ChunkWriter};
use super::error::{ApiError, ErrorCode};
use super::front::{self, Incoming};
use super::input::{self, EmptyText};
use super::wire::{self, StopField, StreamOptions, WireUsage};
use crate::canonical::{ChatRequest, Completion, Event, Operation, RelayChunk, Usage};
use crate::serve::{self, Served};

#[derive(Debug, Deserialize)]
struct CompletionsRequest {
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

pub async fn completions(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, batch, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, batch.as_ref(), &headers, body).await?;
    let request: CompletionsRequest = wire::decode_json(&received.body, "a completions request")?;
    let arrival = received.arrival(request_id, trace, &headers);
    let admission = received.admission;
    let Served { committed, task, created, headers: spillway_headers, cost } =
        serve::serve(&state.serving, arrival, &request.model, |task| {
            request.to_canonical(task.max_output_tokens)
        })
        .await?;

    let id = format!("cmpl-{:016x}", rand::random::<u64>());
    let mut response = if request.wants_stream() {
        let include_usage = request.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let writer = ChunkWriter::text_completion(&id, &task, created);
        let c = std::sync::Arc::clone(&cost);
        chunks::stream_response(committed.events, &committed.backend, writer, include_usage, c, admission)
    } else {
        let mut relayed = None;
        let mut usage = Usage::default();
        let mut events = committed.events;
        while let Some(item) = events.next().await {
            match item {
                Ok(Event::Relay(chunk)) => relayed = Some(chunk),
                Ok(Event::Usage(u)) => usage = u,
                Ok(_) => {}
                Err(e) => return Err(ApiError::from_upstream(&committed.backend, &e)),
            }
        }
        drop(admission);
        let mut response = Response::new(Body::from(answer_body(&id, &task, created, relayed, &usage)));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
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
