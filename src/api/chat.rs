//! `POST /v1/chat/completions`: OpenAI's chat dialect. It reads and decodes the request, hands
//! it to the shared core (`serve::serve`: task, key, plan, dispatch, shadow tap), and answers
//! as JSON or SSE. Its decode and whole answer are a [`DialectDoor`], which the batch runner's
//! lines go through too.
//!
//! After dispatch commits, a streamed answer is forwarded event by event; an upstream failure
//! from then on ends the stream with an in-band error event and no `[DONE]`, so no client
//! mistakes a truncated answer for a whole one.

use axum::response::Response;
use serde_json::Value;

use super::error::ApiError;
use super::front::{self, Incoming};
use super::whole::{self, DialectDoor, WholeBody};
use super::wire::{self, ChatCompletionRequest, Completion, WireUsage};
use crate::canonical::ChatRequest;
use crate::config::TaskConfig;
use crate::serve::{self, Headers, Served};

/// OpenAI's chat completions.
pub(crate) struct Chat;

impl DialectDoor for Chat {
    type Request = ChatCompletionRequest;

    /// The request, and the bytes it came in: an upstream of the same wire gets them as
    /// written ([`ChatRequest::written`]).
    fn decode(body: &bytes::Bytes) -> Result<ChatCompletionRequest, ApiError> {
        wire::decode_bytes(body)
    }

    fn model(request: &ChatCompletionRequest) -> &str {
        &request.model
    }

    fn to_canonical(
        request: &mut ChatCompletionRequest,
        _: &dyn Headers,
        task: &TaskConfig,
    ) -> Result<ChatRequest, ApiError> {
        request.to_canonical(task.max_output_tokens)
    }

    /// The `chat.completion` object, with its cost in `usage` once known.
    async fn encode_whole(_: &ChatCompletionRequest, served: Served) -> WholeBody {
        let Served { committed, task, created, cost, .. } = served;
        let answer = whole::whole_answer(committed.events, &committed.backend).await?;
        let id = new_id();
        let usage = WireUsage::from(&answer.usage.unwrap_or_default()).with_cost(cost.get());
        let said = (answer.text.as_str(), answer.tool_calls.as_slice());
        let completion = Completion::of(&id, &task, created, said, answer.finish, usage);
        Ok(serde_json::to_vec(&completion).expect("a completion serialises"))
    }

    fn envelope(error: &ApiError) -> (u16, Value) {
        (error.status, error.body())
    }
}

fn new_id() -> String {
    format!("chatcmpl-{:016x}", rand::random::<u64>())
}

pub(crate) async fn chat_completions(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, &headers, body).await?;
    let mut request = Chat::decode(&received.body)?;
    let arrival = received.arrival(request_id, trace, &headers);
    let admission = received.admission;
    let served = whole::serve::<Chat>(&state.serving, arrival, &mut request).await?;
    if !request.wants_stream() {
        return whole::respond_whole::<Chat>(&request, served, admission).await;
    }
    let Served { committed, task, created, headers: spillway_headers, cost, .. } = served;
    let mut response = super::chunks::stream_response(
        committed.events,
        &committed.backend,
        super::chunks::ChunkWriter::new(&new_id(), &task, created),
        request.include_usage(),
        std::sync::Arc::clone(&cost),
        admission,
    );
    front::add_headers(response.headers_mut(), spillway_headers.into_iter().chain(serve::cost_header(&cost)));
    Ok(response)
}
