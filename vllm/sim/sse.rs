//! Server-sent events out of the simulator, with the ability to fail like a real network.
//!
//! Every streaming wire format here is SSE, except Bedrock's, which carries the same Anthropic
//! events inside AWS event-stream frames ([`Framing::EventStream`]). A wire module writes
//! whole frames into a `FrameTx` from its own task; the response body reads them. `FrameTx::abort` makes the body
//! fail, which makes hyper cut the connection without the terminating chunk: the abrupt
//! close that `drop_after` promises (a clean end would hide exactly the bug being tested).

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

type Frame = Result<Bytes, std::io::Error>;

/// How a streamed answer's events are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `event:` / `data:` lines.
    Sse,
    /// AWS event-stream frames: each event in a `chunk` frame's base64 `bytes`, an `error`
    /// event as an exception frame (Bedrock's InvokeModel).
    EventStream,
}

/// The writing end of an SSE response body.
pub struct FrameTx(mpsc::Sender<Frame>, Framing);

impl FrameTx {
    /// Send one frame; false when the client has gone.
    pub async fn send(&self, frame: String) -> bool {
        self.0.send(Ok(Bytes::from(frame))).await.is_ok()
    }

    pub fn framing(&self) -> Framing {
        self.1
    }

    /// Send one frame already written in this response's framing; false when the client has
    /// gone.
    pub async fn frame(&self, frame: Bytes) -> bool {
        self.0.send(Ok(frame)).await.is_ok()
    }

    /// `data: <json>` frame.
    pub async fn data(&self, v: &Value) -> bool {
        self.send(format!("data: {v}\n\n")).await
    }

    /// `event: <name>` + `data: <json>` frame, or in an event stream a `chunk` (an `error`
    /// event: the exception its `error.type` is on Bedrock).
    pub async fn event(&self, name: &str, v: &Value) -> bool {
        use crate::adapter::transport::eventstream;
        let frame = match (self.1, name) {
            (Framing::Sse, _) => Bytes::from(format!("event: {name}\ndata: {v}\n\n")),
            (Framing::EventStream, "error") => {
                let kind = match v.pointer("/error/type").and_then(Value::as_str) {
                    Some("rate_limit_error") => "throttlingException",
                    Some("overloaded_error") => "serviceUnavailableException",
                    _ => "internalServerException",
                };
                let message = v.pointer("/error/message").cloned().unwrap_or_default();
                let payload = serde_json::json!({ "message": message }).to_string();
                eventstream::frame(
                    &[(":exception-type", kind), (":message-type", "exception")],
                    payload.as_bytes(),
                )
            }
            (Framing::EventStream, _) => eventstream::chunk_frame(&v.to_string()),
        };
        self.0.send(Ok(frame)).await.is_ok()
    }

    /// Cut the connection abruptly, after the frames already sent have gone out (hyper
    /// drops its unflushed write buffer when a body fails).
    pub async fn abort(self) {
        for _ in 0..200 {
            if self.0.capacity() == self.0.max_capacity() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let err = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "simulated drop");
        let _ = self.0.send(Err(err)).await;
    }
}

/// A 200 `text/event-stream` response and the sender that feeds it.
pub fn response(extra: HeaderMap) -> (FrameTx, Response) {
    response_as(extra, Framing::Sse)
}

/// A 200 streamed response in `framing` and the sender that feeds it.
pub fn response_as(extra: HeaderMap, framing: Framing) -> (FrameTx, Response) {
    let (tx, rx) = mpsc::channel(64);
    let mut resp = Response::new(Body::from_stream(ReceiverStream::new(rx)));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    let content_type = match framing {
        Framing::Sse => "text/event-stream; charset=utf-8",
        Framing::EventStream => crate::adapter::transport::eventstream::CONTENT_TYPE,
    };
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.extend(extra);
    (FrameTx(tx, framing), resp)
}

/// A response whose body fails at once: a non-streaming reply cut mid-flight.
pub fn dropped_response() -> Response {
    let (tx, resp) = response(HeaderMap::new());
    tokio::spawn(tx.abort());
    let mut resp = resp;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
