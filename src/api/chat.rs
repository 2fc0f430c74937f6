//! `POST /v1/chat/completions`: decode, authorise, plan, dispatch, and answer as JSON or SSE.
//!
//! After dispatch commits, a streamed answer is forwarded event by event; an upstream failure
//! from then on ends the stream with an in-band error event and no `[DONE]`, so no client
//! mistakes a truncated answer for a whole one.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures::StreamExt;
use tokio::time::Instant;

use super::error::{ApiError, ErrorCode};
use super::request_id::RequestId;
use super::wire::{self, completion_json};
use super::{authenticate, AppState};
use crate::canonical::{ChatRequest, ErrorClass, Event, FinishReason, ToolCall, Usage};
use crate::config::Priority;
use crate::dispatch::{Committed, DispatchError};
use crate::gate::shadow;
use crate::outcome::{AttemptRecord, RequestMeta, Skip};
use crate::route::{self, PlanError, RequestFacts};
use crate::snapshot::NodeView;

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    request_id: Option<Extension<RequestId>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request_id = request_id.map_or_else(String::new, |Extension(RequestId(id))| id);
    match handle(state, request_id, headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn handle(
    state: Arc<AppState>,
    request_id: String,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let arrived_at = SystemTime::now();
    let key_name = authenticate(&state, &headers)?;
    let bytes = super::body::read_json(&headers, body, state.max_body_bytes, state.body_read_timeout).await?;
    // Admission only once the body is in: a slow sender never holds a permit.
    let Ok(admission) = Arc::clone(&state.limiter).try_acquire_owned() else {
        return Err(ApiError::new(
            ErrorCode::RouterOverloaded,
            "Spillway is at its concurrency limit; retry shortly",
        )
        .retry_after(1));
    };
    let request = wire::decode(&bytes)?;
    let priority = header_str(&headers, "x-spillway-priority")?
        .map(|p| {
            Priority::parse(p).ok_or_else(|| {
                let all: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
                ApiError::bad_request(format!("x-spillway-priority `{p}` is not one of {}", all.join(", ")))
                    .param("x-spillway-priority")
            })
        })
        .transpose()?;
    let project = header_str(&headers, "x-spillway-project")?;

    let snap = state.snapshot.load_full();
    let task = snap.config.task(&request.model).ok_or_else(|| {
        ApiError::new(ErrorCode::ModelNotFound, format!("no task named `{}`", request.model)).param("model")
    })?;
    if !super::key_may_use(key_name.as_deref(), task) {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("this key may not use task `{}`", task.name),
        ));
    }
    let canonical = request.to_canonical(task.max_output_tokens)?;

    let priority = priority.unwrap_or(task.priority);

    // The affinity key (project, else client key) keeps a project on the node that holds its
    // prefix cache; without one, requests spread at random.
    let affinity = project.or(key_name.as_deref()).map(|key| xxhash_rust::xxh3::xxh3_64(key.as_bytes()));
    let created = arrived_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let load = |node: &NodeView| node.handle.load.view();
    let plan = route::plan(
        &RequestFacts {
            task,
            prompt_tokens: canonical.estimated_prompt_tokens(),
            max_output_tokens: canonical.max_tokens.unwrap_or(1024),
            seed: affinity.unwrap_or_else(rand::random),
            affinity,
            window: route::chain::window_index(created, snap.config.balancing.affinity_window_secs),
            priority,
            load: &load,
            request: Some(&canonical),
        },
        &snap,
        Instant::now(),
    )
    .map_err(plan_error)?;
    let meta = RequestMeta {
        arrived_at,
        affinity_key: project.or(key_name.as_deref()).map(str::to_string),
        client_key: key_name,
        priority,
        request_id,
        synthetic: false,
    };
    let committed = state
        .dispatcher
        .dispatch(&snap, &plan, task, &canonical, priority, &meta)
        .await
        .map_err(dispatch_error)?;
    let mut spillway_headers = HeaderMap::new();
    add_spillway_headers(&mut spillway_headers, &committed);
    let mut committed = committed;
    if let Some(shadows) = state.gate.shadows.as_ref().filter(|_| shadow::sampled(task, rand::random())) {
        let load = |node: &NodeView| node.handle.load.view();
        let targets = shadow::targets(
            &snap,
            task,
            &canonical,
            &committed.backend,
            &load,
            Instant::now(),
            rand::random(),
        );
        if !targets.is_empty() {
            let (events, primary_answer) = shadow::tap(committed.events);
            committed.events = events;
            let job = shadow::Job {
                snap: Arc::clone(&snap),
                task: task.clone(),
                // Shadows are graded, never relayed to a client.
                request: ChatRequest { relay: false, ..canonical.clone() },
                targets,
                primary: committed.backend.clone(),
                request_id: meta.request_id.clone(),
            };
            shadows.spawn(job, primary_answer);
        }
    }

    let id = format!("chatcmpl-{:016x}", rand::random::<u64>());
    let mut response = if request.wants_stream() {
        super::chunks::stream_response(
            committed.events,
            &committed.backend,
            super::chunks::ChunkWriter::new(&id, &task.name, created),
            request.include_usage(),
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
        axum::Json(answer.to_json(&id, &task.name, created)).into_response()
    };
    response.headers_mut().extend(spillway_headers);
    Ok(response)
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str().map_err(|_| ApiError::bad_request(format!("header {name} is not text")).param(name))
        })
        .transpose()
}

fn add_spillway_headers(headers: &mut HeaderMap, c: &Committed) {
    if let Ok(v) = HeaderValue::from_str(&c.backend) {
        headers.insert("x-spillway-backend", v);
    }
    if let Ok(v) = HeaderValue::from_str(&c.model) {
        headers.insert("x-spillway-model", v);
    }
    headers.insert("x-spillway-attempts", HeaderValue::from(c.attempts));
    headers.insert("x-spillway-ttft-ms", HeaderValue::from(c.ttft.as_millis() as u64));
    if let Some(spill) = c.spill {
        headers.insert("x-spillway-spill", HeaderValue::from_static(spill.as_str()));
    }
    if let Some(predicted) = c.predicted_ttft_ms {
        headers.insert("x-spillway-predicted-ttft-ms", HeaderValue::from(predicted));
    }
}

/// No plan: policy left nothing (503, the operator's business), or nothing eligible can serve
/// this request (400 naming the context limit or the missing capability: the client's).
fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::Policy(e) => ApiError::new(ErrorCode::NoEligibleBackend, e.0),
        PlanError::Unfit(unfit) if unfit.is_context_length() => {
            ApiError::new(ErrorCode::ContextLengthExceeded, unfit.to_string()).param("messages")
        }
        PlanError::Unfit(unfit) => {
            let param = unfit.missing().first().map_or("model", |c| c.param());
            ApiError::new(ErrorCode::UnsupportedCapability, unfit.to_string()).param(param)
        }
    }
}

fn dispatch_error(e: DispatchError) -> ApiError {
    match e {
        DispatchError::Rejected { backend, error, .. } => ApiError::from_upstream(&backend, &error),
        DispatchError::Shed { why } => ApiError::new(ErrorCode::Shed, why).retry_after(1),
        DispatchError::Exhausted { attempts } => {
            let detail: Vec<String> = attempts.iter().map(|a| a.describe()).collect();
            let called: Vec<_> = attempts.iter().filter(|a| a.skipped.is_none()).collect();
            let all_rate_limited =
                !called.is_empty() && called.iter().all(|a| a.error_class == Some(ErrorClass::RateLimited));
            let budget = attempts.iter().any(|a| a.skipped == Some(Skip::RetryBudget));
            let message = format!("no backend could serve the request: {}", detail.join("; "));
            let wait = retry_after_secs(&attempts);
            let no_room = called.is_empty()
                && attempts.iter().any(|a| matches!(a.skipped, Some(Skip::NodeFull | Skip::OverQuota)));
            if no_room {
                ApiError::new(ErrorCode::Shed, message).retry_after(wait)
            } else if all_rate_limited {
                ApiError::new(ErrorCode::UpstreamRateLimited, message).retry_after(wait)
            } else {
                let code =
                    if budget { ErrorCode::RetryBudgetExhausted } else { ErrorCode::AllBackendsFailed };
                ApiError::new(code, message).retry_after(wait)
            }
        }
    }
}

/// What the client should wait before trying again: the shortest wait an upstream asked for
/// (`Retry-After`, or what is left of a hold it set), in whole seconds, at least 1; 1 when
/// none asked.
fn retry_after_secs(attempts: &[AttemptRecord]) -> u64 {
    attempts
        .iter()
        .filter_map(|a| a.retry_after)
        .min()
        .map_or(1, |wait| wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
        .max(1)
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
            Event::Relay(_) => {}
        }
    }

    fn to_json(&self, id: &str, model: &str, created: u64) -> serde_json::Value {
        completion_json(id, model, created, &self.text, &self.tool_calls, self.finish, &self.usage)
    }
}
