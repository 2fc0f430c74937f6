//! The Responses WebSocket mode: `GET /v1/responses` upgraded to a WebSocket, which Codex opens
//! before anything else when pointed at a base URL (`openai_base_url`). Each text message is a
//! `response.create`: a Responses request body beside its `type`. It is served by the same door
//! as `POST /v1/responses`, in process and with the upgrade's headers (the same key, limits,
//! pipeline, ledger, metrics and access log), and the answer's events go back one per text
//! message, as the SSE stream carries them, up to its final event. An error before the answer
//! starts is an `error` message with the HTTP status the POST would have had.
//!
//! A socket keeps only its last response: the input it answered and the output items it sent.
//! A `response.create` that continues it (`previous_response_id` and only the new input items,
//! as Codex sends on a socket it reuses) is served as that input, that output and the new
//! items; one naming any other response closes the socket, and the client sends the whole
//! conversation again on a new one. `generate: false` (the warm-up at a session's start) is
//! checked and answered with an empty response, sent to no backend. Nothing outlives the
//! socket, which closes after `limits.websocket_idle_timeout_ms` without a message, and when
//! the router drains, once the answer in flight has been sent.

use std::time::Duration;

use axum::body::Body;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, State};
use axum::http::{header, HeaderMap, HeaderValue, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};
use tower_service::Service;

use super::warmed;
// door: the socket reads its own POST answer with the one SSE reader every upstream stream uses.
use crate::adapter::transport::sse::{Flow, SseDecoder};
use crate::api::edge::ConnectionLife;
use crate::api::error::{ApiError, ErrorCode};
use crate::api::front::Doors;

/// What the upgraded sockets are served with.
#[derive(Clone)]
pub(crate) struct Sockets {
    /// The API itself: each message is a `POST /v1/responses` sent through it.
    pub api: Router,
    pub doors: Doors,
}

/// `GET /v1/responses`: authenticate, then take the connection over.
pub(crate) async fn upgrade(State(sockets): State<Sockets>, request: Request<Body>) -> Response {
    let (mut parts, _) = request.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(why) => {
            let message = format!(
                "GET /v1/responses opens the Responses WebSocket mode and needs a WebSocket upgrade \
                 ({why}); to create a response over HTTP, POST it"
            );
            return ApiError::new(ErrorCode::InvalidRequest, message).into_response();
        }
    };
    if let Err(refusal) = crate::api::authenticate(&sockets.doors.door.client_keys, &parts.headers) {
        return refusal.into_response();
    }
    let life = parts.extensions.get::<ConnectionLife>().cloned();
    let limits = &sockets.doors.door;
    let idle = sockets.doors.serving.snapshot.load().config.limits.websocket_idle_timeout();
    let conversation =
        Conversation { api: sockets.api.clone(), headers: forwarded(&parts.headers), last: None, idle };
    upgrade
        .max_message_size(limits.max_body_bytes)
        .max_frame_size(limits.max_body_bytes)
        .on_upgrade(move |socket| conversation.run(socket, life))
}

/// The upgrade's headers, for each message's request: who is asking and the hints it gives,
/// not the upgrade itself, and not a request id (each message gets its own).
fn forwarded(headers: &HeaderMap) -> HeaderMap {
    let mut kept = headers.clone();
    for name in [header::CONNECTION, header::UPGRADE, header::CONTENT_LENGTH, header::ACCEPT_ENCODING] {
        kept.remove(name);
    }
    kept.remove(crate::api::request_id::HEADER);
    let upgrade_only: Vec<_> =
        kept.keys().filter(|k| k.as_str().starts_with("sec-websocket-")).cloned().collect();
    for name in upgrade_only {
        kept.remove(name);
    }
    kept.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    kept
}

/// The last response a socket answered: what a continuation of it stands for.
struct Last {
    id: String,
    input: Vec<Value>,
    output: Vec<Value>,
}

/// One socket's requests, one at a time.
struct Conversation {
    api: Router,
    headers: HeaderMap,
    last: Option<Last>,
    idle: Duration,
}

/// How a socket ends.
enum End {
    /// The client closed it, or went away.
    Client,
    /// Closed here, with a code and why.
    Closed(u16, &'static str),
}

impl Conversation {
    async fn run(mut self, mut socket: WebSocket, mut life: Option<ConnectionLife>) {
        let end = loop {
            let message = tokio::select! {
                message = tokio::time::timeout(self.idle, socket.recv()) => message,
                () = leaving(&mut life) => break End::Closed(1001, "the router is restarting; reconnect"),
            };
            let text = match message {
                Err(_) => break End::Closed(1000, "idle for too long"),
                Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => break End::Client,
                Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
                Ok(Some(Ok(Message::Text(text)))) => text,
                Ok(Some(Ok(Message::Binary(_)))) => {
                    let why = "this socket takes text messages (JSON), not binary ones";
                    match send_error(&mut socket, &ApiError::new(ErrorCode::InvalidBody, why)).await {
                        Ok(()) => continue,
                        Err(()) => break End::Client,
                    }
                }
            };
            match self.message(&mut socket, &text, &mut life).await {
                Ok(None) => {}
                Ok(Some(end)) => break end,
                Err(()) => break End::Client,
            }
        };
        if let End::Closed(code, reason) = end {
            tracing::info!(code, reason, "responses websocket closed");
            let frame = CloseFrame { code, reason: Utf8Bytes::from_static(reason) };
            let _ = socket.send(Message::Close(Some(frame))).await;
        }
    }

    /// Serve one message; `Some` ends the socket, `Err` means it is gone.
    async fn message(
        &mut self,
        socket: &mut WebSocket,
        text: &str,
        life: &mut Option<ConnectionLife>,
    ) -> Result<Option<End>, ()> {
        let mut body = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(body)) => body,
            _ => {
                let why = "a message must be a JSON object with a `type` (`response.create`)";
                return send_error(socket, &ApiError::new(ErrorCode::InvalidJson, why)).await.map(|()| None);
            }
        };
        match body.remove("type").as_ref().and_then(Value::as_str) {
            Some("response.create") => {}
            // Codex acknowledging an answer: nothing to say back.
            Some("response.processed") => return Ok(None),
            other => {
                let why = format!(
                    "unknown message type {}: this socket takes `response.create`",
                    other.map_or("(none)".to_string(), |t| format!("`{t}`"))
                );
                return send_error(socket, &ApiError::new(ErrorCode::InvalidValue, why)).await.map(|()| None);
            }
        }
        let Some(input) = self.whole_input(&mut body) else {
            tracing::info!("responses websocket: a continuation of a response this socket did not answer; closing it so the client sends the whole conversation");
            return Ok(Some(End::Closed(1011, "previous_response_id is not this socket's last response")));
        };
        body.insert("input".into(), Value::Array(input.clone()));
        // Codex's notes on a socket's request (its timings, trace headers): the socket's own.
        body.remove("client_metadata");
        let generate = body.remove("generate").and_then(|g| g.as_bool()).unwrap_or(true);
        body.insert("stream".into(), Value::Bool(true));
        let bytes = bytes::Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        self.last = None;
        if !generate {
            return match warmed(&bytes) {
                Ok(frames) => self.relay(socket, Body::from(frames), input, life).await,
                Err(refusal) => send_error(socket, &refusal).await.map(|()| None),
            };
        }
        let mut request = Request::post("/v1/responses").body(Body::from(bytes)).map_err(|_| ())?;
        *request.headers_mut() = self.headers.clone();
        let Ok(response) = self.api.call(request).await;
        if !response.status().is_success() {
            let status = response.status().as_u16();
            let envelope = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let envelope: Value = serde_json::from_slice(&envelope).unwrap_or_default();
            let error = json!({"type": "error", "status": status, "error": envelope["error"]});
            return send(socket, error.to_string()).await.map(|()| None);
        }
        self.relay(socket, response.into_body(), input, life).await
    }

    /// The input a `response.create` stands for: its own, after the last response's input
    /// and output when it continues that response; `None` when it continues another.
    fn whole_input(&self, body: &mut Map<String, Value>) -> Option<Vec<Value>> {
        let input = match body.remove("input") {
            Some(Value::Array(items)) => items,
            Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
            _ => Vec::new(),
        };
        match body.remove("previous_response_id") {
            None | Some(Value::Null) => Some(input),
            Some(id) => {
                let last = self.last.as_ref().filter(|l| id.as_str() == Some(l.id.as_str()))?;
                Some(last.input.iter().chain(&last.output).cloned().chain(input).collect())
            }
        }
    }

    /// Send an answer's SSE events, one message each, up to its final event; a completed
    /// answer becomes the socket's last response.
    async fn relay(
        &mut self,
        socket: &mut WebSocket,
        mut body: Body,
        input: Vec<Value>,
        life: &mut Option<ConnectionLife>,
    ) -> Result<Option<End>, ()> {
        let mut events = SseDecoder::default();
        let mut output = Vec::new();
        loop {
            let frame = tokio::select! {
                frame = body.frame() => frame,
                () = closing(life) => return Ok(Some(End::Closed(1001, "the router is restarting; reconnect"))),
            };
            let Some(Ok(frame)) = frame else {
                // No final event: the client would wait for one.
                return Ok(Some(End::Closed(1011, "the answer ended before its final event")));
            };
            let Ok(data) = frame.into_data() else { continue };
            let mut ready = Vec::new();
            let read = events.feed(&data, &mut |kind, data| {
                ready.push((kind.to_string(), data.to_string()));
                Flow::Continue
            });
            if read.is_err() {
                return Ok(Some(End::Closed(1011, "the answer was not an event stream")));
            }
            for (kind, data) in ready {
                match kind.as_str() {
                    "response.output_item.done" => {
                        let item = serde_json::from_str::<Value>(&data).ok().map(|mut e| e["item"].take());
                        output.extend(item.filter(|i| !i.is_null()));
                    }
                    "response.completed" => {
                        let id = serde_json::from_str::<Value>(&data)
                            .ok()
                            .and_then(|e| e["response"]["id"].as_str().map(str::to_string));
                        send(socket, data).await?;
                        if let Some(id) = id {
                            self.last = Some(Last { id, input, output });
                        }
                        return Ok(None);
                    }
                    "response.failed" | "response.incomplete" | "error" => {
                        // The answer's end: what follows in its stream is not for the next one.
                        return send(socket, data).await.map(|()| None);
                    }
                    _ => {}
                }
                send(socket, data).await?;
            }
        }
    }
}

/// An error before an answer starts: its envelope and the status the POST would have had.
async fn send_error(socket: &mut WebSocket, error: &ApiError) -> Result<(), ()> {
    error.log();
    let message = json!({"type": "error", "status": error.status, "error": error.body()["error"]});
    send(socket, message.to_string()).await
}

async fn send(socket: &mut WebSocket, text: String) -> Result<(), ()> {
    socket.send(Message::Text(text.into())).await.map_err(|_| ())
}

/// Resolves when the router starts to leave (never for a socket with no connection's life).
async fn leaving(life: &mut Option<ConnectionLife>) {
    match life {
        Some(life) => life.leaving().await,
        None => std::future::pending().await,
    }
}

/// Resolves when the drain deadline has passed.
async fn closing(life: &mut Option<ConnectionLife>) {
    match life {
        Some(life) => life.closed().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continuation_stands_for_the_last_input_and_output_then_its_own() {
        let mut conversation = Conversation {
            api: Router::new(),
            headers: HeaderMap::new(),
            last: Some(Last {
                id: "resp_1".into(),
                input: vec![json!({"role": "user", "content": "hi"})],
                output: vec![json!({"type": "function_call", "call_id": "c1"})],
            }),
            idle: Duration::from_secs(1),
        };
        let mut body = json!({"previous_response_id": "resp_1", "input": [{"type": "function_call_output", "call_id": "c1"}]});
        let whole = conversation.whole_input(body.as_object_mut().unwrap()).unwrap();
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[1]["type"], "function_call");
        assert_eq!(whole[2]["type"], "function_call_output");
        assert!(body.get("previous_response_id").is_none(), "resolved here, never sent on");

        let mut other = json!({"previous_response_id": "resp_0", "input": []});
        assert!(conversation.whole_input(other.as_object_mut().unwrap()).is_none());
        conversation.last = None;
        let mut fresh = json!({"input": "hello"});
        assert_eq!(conversation.whole_input(fresh.as_object_mut().unwrap()).unwrap()[0]["content"], "hello");
    }
}
