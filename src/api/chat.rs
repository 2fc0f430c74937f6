//! `POST /v1/chat/completions`: OpenAI's chat dialect. It reads and decodes the request, hands
//! it to the shared core (`serve::serve`: task, key, plan, dispatch, shadow tap), and answers
//! as JSON or SSE.
//!
//! After dispatch commits, a streamed answer is forwarded event by event; an upstream failure
//! from then on ends the stream with an in-band error event and no `[DONE]`, so no client
//! mistakes a truncated answer for a whole one.

use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::error::ApiError;
use super::front::{self, Incoming};
use super::wire::{self, completion_json};
use crate::canonical::{Event, FinishReason, ToolCall, Usage};
use crate::serve::{self, Served};

pub(crate) async fn chat_completions(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, batch, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, batch.as_ref(), &headers, body).await?;
    let request = wire::decode(&received.body)?;
    let arrival = received.arrival(request_id, trace, &headers);
    let admission = received.admission;
    let Served { committed, task, created, headers: spillway_headers, cost } =
        serve::serve(&state.serving, arrival, &request.model, |task| {
            request.to_canonical(task.max_output_tokens)
        })
        .await?;

    let id = format!("chatcmpl-{:016x}", rand::random::<u64>());
    let mut response = if request.wants_stream() {
        super::chunks::stream_response(
            committed.events,
            &committed.backend,
            super::chunks::ChunkWriter::new(&id, &task, created),
            request.include_usage(),
            std::sync::Arc::clone(&cost),
            admission,
        )
    } else {
        let mut events = committed.events;
        let mut answer = Answer::default();
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => answer.add(event),
                Err(e) => return Err(ApiError::from_upstream(&committed.backend, &e)),
            }
        }
        drop(admission);
        let mut json = answer.to_json(&id, &task, created);
        if let Some(c) = cost.get() {
            json["usage"][super::wire::COST_FIELD] = serde_json::Value::String(c.to_string());
        }
        axum::Json(json).into_response()
    };
    front::add_headers(response.headers_mut(), spillway_headers.into_iter().chain(serve::cost_header(&cost)));
    Ok(response)
}

/// A non-streamed answer being assembled.
#[derive(Default)]
struct Answer {
    text: String,
    tool_calls: Vec<ToolCall>,
    finish: Option<FinishReason>,
    usage: Usage,
}

impl Answer {
    fn add(&mut self, event: Event) {
        match event {
            Event::TextDelta(t) => self.text.push_str(&t),
            Event::ToolCallDelta { index, id, name, arguments } => {
                let i = index as usize;
                while self.tool_calls.len() <= i {
                    self.tool_calls.push(ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                }
                let call = &mut self.tool_calls[i];
                if let Some(id) = id {
                    call.id = id;
                }
                if let Some(name) = name {
                    call.name.push_str(&name);
                }
                call.arguments.push_str(&arguments);
            }
            Event::Usage(u) => self.usage = u,
            Event::Finish(f) => self.finish = Some(f),
            Event::Relay(_) | Event::Native(_) | Event::ReasoningDelta(_) | Event::Embeddings(_) => {}
        }
    }

    fn to_json(&self, id: &str, model: &str, created: u64) -> serde_json::Value {
        completion_json(id, model, created, &self.text, &self.tool_calls, self.finish, &self.usage)
    }
}
