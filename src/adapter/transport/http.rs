//! Plumbing shared by the adapters: send the request (through the lean client or reqwest), turn
//! a non-2xx answer into a classified error, and drive a provider's stream parser over the SSE
//! body (or its parse function over a JSON body). Everything provider-specific stays in the
//! adapter modules.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderName};
use serde_json::Value;

use super::sse::{Flow, SseDecoder};
use super::Transport;
use crate::adapter::EventStream;
use crate::canonical::{ErrorClass, Event, UpstreamError};

/// Turns an HTTP status, the response headers and the body text into a classified error.
pub(crate) type Classify = fn(u16, &HeaderMap, &str) -> UpstreamError;

/// Translates one provider's SSE events into canonical events. One value per answer.
pub(crate) trait StreamParser: Send + Unpin + 'static {
    /// One SSE event (`event` is `"message"` when the provider sent no event name). `Err` ends
    /// the stream with that error.
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<Event>, UpstreamError>;

    /// Whether the provider's terminal marker has been seen: the driver stops reading then.
    fn is_closed(&self) -> bool;

    /// The body ended. The closing events if the answer is complete, otherwise the error
    /// (`StreamBroken` when the terminal marker never came).
    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError>;
}

/// A 2xx answer's head, its body still to be read.
pub(crate) struct Answer {
    headers: HeaderMap,
    body: ByteStream,
}

/// A body, piece by piece, as it arrives.
pub(crate) type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, UpstreamError>> + Send>>;

/// The most of an error body read for its message.
const MAX_ERROR_BODY: usize = 1024 * 1024;

/// `POST url` through the transport that fits it: the lean client for `http://`, reqwest for
/// the rest, with the transport's trace context headers (the one place they are added).
/// Resolves once the head is in; a non-2xx answer is read and classified.
pub(in crate::adapter) async fn post(
    transport: &Transport,
    url: &str,
    headers: &[(HeaderName, String)],
    body: Vec<u8>,
    classify: Classify,
) -> Result<Answer, UpstreamError> {
    let traced: Vec<(HeaderName, String)>;
    let headers = if transport.trace.is_empty() {
        headers
    } else {
        traced = headers.iter().chain(&transport.trace).cloned().collect();
        &traced
    };
    let (status, headers, mut body): (u16, HeaderMap, ByteStream) = if url.starts_with("http://") {
        let response = transport.plain.post(url, headers, &body).await?;
        (response.status, response.headers, Box::pin(response.body.into_stream()))
    } else {
        // A place on a connection with room, held until the body has been read or dropped.
        let slot = transport.lanes.take(url).await;
        slot.wait_open().await;
        let mut builder = slot.client().post(url).body(body);
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let sent = builder.send().await;
        slot.settled();
        let response = sent.map_err(|e| UpstreamError::from_reqwest(&e))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes_stream().map(move |piece| {
            let _held = &slot;
            piece.map_err(|e| UpstreamError::from_reqwest(&e))
        });
        (status, headers, Box::pin(body))
    };
    if (200..300).contains(&status) {
        return Ok(Answer { headers, body });
    }
    let mut text = Vec::new();
    while let Some(Ok(piece)) = body.next().await {
        text.extend_from_slice(&piece[..piece.len().min(MAX_ERROR_BODY - text.len())]);
        if text.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    // The body as the upstream wrote it: `super::send` cuts the error of every credential.
    Err(classify(status, &headers, &String::from_utf8_lossy(&text)))
}

impl Answer {
    /// The answer's media type (its `content-type` without parameters), lowercased.
    pub(crate) fn media_type(&self) -> Option<String> {
        let value = self.headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
        Some(value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
    }

    /// The same answer with its body read through `reframe`, which makes it `media_type`.
    pub(in crate::adapter) fn reframed(
        mut self,
        media_type: &'static str,
        reframe: impl FnOnce(ByteStream) -> ByteStream,
    ) -> Answer {
        self.headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(media_type));
        Answer { body: reframe(self.body), ..self }
    }
}

/// The events of a 2xx answer, read as what its `content-type` says it is, whatever was asked
/// for: some OpenAI-compatible servers ignore `stream` and answer JSON, and an SSE answer to a
/// plain call is as good an answer. With no (or an unknown) content type, as asked.
pub(in crate::adapter) fn answer_events<P: StreamParser>(
    answer: Answer,
    asked_stream: bool,
    parser: P,
    parse: impl Fn(&[u8]) -> Result<Vec<Event>, UpstreamError> + Send + 'static,
) -> EventStream {
    let sse = match answer.media_type().as_deref() {
        Some("text/event-stream") => true,
        Some(t) if t == "application/json" || t.ends_with("+json") => false,
        _ => asked_stream,
    };
    if sse {
        drive(answer.body, parser, |e| e)
    } else {
        json_events(answer.body, parse)
    }
}

/// A 2xx answer's whole body as JSON (an answer that is not an event stream).
pub(in crate::adapter) async fn read_json(answer: Answer) -> Result<Value, UpstreamError> {
    let mut body = answer.body;
    let mut whole = Vec::new();
    while let Some(piece) = body.next().await {
        whole.extend_from_slice(&piece?);
    }
    serde_json::from_slice(&whole)
        .map_err(|e| UpstreamError::new(ErrorClass::StreamBroken, None, format!("malformed JSON body: {e}")))
}

/// The events of a 2xx answer that must be JSON whatever its content type says (embeddings,
/// which are never streamed; a legacy completion asked for whole, which is relayed whole).
pub(in crate::adapter) fn json_answer_events(
    answer: Answer,
    parse: fn(&[u8]) -> Result<Vec<Event>, UpstreamError>,
) -> EventStream {
    json_events(answer.body, parse)
}

/// The events of a non-streamed 2xx answer: the body is read lazily, when the stream is first
/// polled, and `parse` reads every event from its bytes.
fn json_events(
    mut body: ByteStream,
    parse: impl Fn(&[u8]) -> Result<Vec<Event>, UpstreamError> + Send + 'static,
) -> EventStream {
    let read = async move {
        let mut whole = Vec::new();
        while let Some(piece) = body.next().await {
            match piece {
                Ok(piece) => whole.extend_from_slice(&piece),
                Err(e) => return vec![Err(e)],
            }
        }
        match parse(&whole) {
            Ok(events) => events.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        }
    };
    Box::pin(futures::stream::once(read).flat_map(futures::stream::iter))
}

/// A whole JSON answer read as `T`, straight from its bytes; one that is not JSON, or not a
/// `T`, is a broken answer.
pub(in crate::adapter) fn whole<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, UpstreamError> {
    serde_json::from_slice(body).map_err(|e| {
        let why = format!("malformed JSON body ({e}): {}", excerpt(&String::from_utf8_lossy(body)));
        UpstreamError::new(ErrorClass::StreamBroken, None, why)
    })
}

/// Read `bytes` as SSE ([`SseDecoder`]) and feed every event through `parser`. Ends after the
/// terminal marker, after the first error (the last item), or at the end of the body, where
/// the parser decides whether the answer was complete.
pub(in crate::adapter) fn drive<S, B, E, P>(
    bytes: S,
    parser: P,
    transport_error: fn(E) -> UpstreamError,
) -> EventStream
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]>,
    E: Send + 'static,
    P: StreamParser,
{
    Box::pin(Driven {
        bytes: Box::pin(bytes),
        sse: SseDecoder::default(),
        parser,
        pending: VecDeque::new(),
        finished: false,
        transport_error,
    })
}

/// [`drive`]'s stream, polled in place: its state stays where it is between events.
struct Driven<S, P, E> {
    bytes: Pin<Box<S>>,
    sse: SseDecoder,
    parser: P,
    /// Events read and not yet taken.
    pending: VecDeque<Result<Event, UpstreamError>>,
    finished: bool,
    transport_error: fn(E) -> UpstreamError,
}

impl<S, B, E, P> Driven<S, P, E>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    P: StreamParser,
{
    /// Feed one read of the body through the decoder and the parser.
    fn feed(&mut self, read: &[u8]) {
        let Driven { sse, parser, pending, .. } = self;
        let fed = sse.feed(read, &mut |event, data| match parser.on_event(event, data) {
            Ok(events) => {
                pending.extend(events.into_iter().map(Ok));
                if parser.is_closed() {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            }
            Err(e) => {
                pending.push_back(Err(e));
                Flow::Stop
            }
        });
        match fed {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => self.finished = true,
            Err(e) => {
                self.pending.push_back(Err(UpstreamError::new(
                    ErrorClass::StreamBroken,
                    None,
                    e.to_string(),
                )));
                self.finished = true;
            }
        }
    }
}

impl<S, B, E, P> Stream for Driven<S, P, E>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    P: StreamParser,
{
    type Item = Result<Event, UpstreamError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.pending.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match std::task::ready!(this.bytes.as_mut().poll_next(cx)) {
                Some(Ok(read)) => this.feed(read.as_ref()),
                Some(Err(e)) => {
                    this.pending.push_back(Err((this.transport_error)(e)));
                    this.finished = true;
                }
                None => {
                    this.finished = true;
                    match this.parser.on_end() {
                        Ok(events) => this.pending.extend(events.into_iter().map(Ok)),
                        Err(e) => this.pending.push_back(Err(e)),
                    }
                }
            }
        }
    }
}

/// The error a stream gets when it ends without the provider's terminal marker.
pub(in crate::adapter) fn truncated(what: &str) -> UpstreamError {
    UpstreamError::new(
        ErrorClass::StreamBroken,
        None,
        format!("upstream stream ended before {what}; the answer is incomplete"),
    )
}

/// A malformed event payload: the stream cannot be trusted past it.
pub(in crate::adapter) fn malformed(data: &str, err: &serde_json::Error) -> UpstreamError {
    UpstreamError::new(
        ErrorClass::StreamBroken,
        None,
        format!("malformed stream event ({err}): {}", excerpt(data)),
    )
}

/// At most 512 characters of a body, for error messages.
pub(crate) fn excerpt(body: &str) -> String {
    let body = body.trim();
    match body.char_indices().nth(512) {
        Some((cut, _)) => format!("{}…", &body[..cut]),
        None => body.to_string(),
    }
}

/// Test helpers: run a parser over SSE text chopped into odd-sized chunks, and a tiny HTTP
/// server that answers every request with one canned response.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::{Arc, Mutex};

    use axum::body::Body;
    use axum::http::{HeaderMap, StatusCode, Uri};
    use axum::response::Response;

    use super::*;

    /// Run `parser` over `text`, delivered in chunks of the given sizes (cycled), as bytes.
    pub(crate) async fn run_chopped<P: StreamParser>(
        text: &str,
        sizes: &[usize],
        parser: P,
    ) -> Vec<Result<Event, UpstreamError>> {
        let bytes = text.as_bytes();
        let mut chunks = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while at < bytes.len() {
            let n = sizes[i % sizes.len()].max(1).min(bytes.len() - at);
            chunks.push(Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(&bytes[at..at + n])));
            at += n;
            i += 1;
        }
        let stream = drive(futures::stream::iter(chunks), parser, |e: std::io::Error| {
            UpstreamError::new(ErrorClass::StreamBroken, None, e.to_string())
        });
        stream.collect().await
    }

    /// Run `parser` over `text` with several chunkings, check they all agree, return the result.
    pub(crate) async fn run_sse<P: StreamParser>(
        text: &str,
        make: impl Fn() -> P,
    ) -> Vec<Result<Event, UpstreamError>> {
        let whole = run_chopped(text, &[usize::MAX], make()).await;
        for sizes in [&[1usize][..], &[7, 3, 13], &[64, 5], &[2, 1, 97]] {
            let chopped = run_chopped(text, sizes, make()).await;
            assert_eq!(chopped, whole, "chunking {sizes:?} changed the events");
        }
        whole
    }

    /// What the canned server saw of the last request.
    #[derive(Debug, Clone, Default)]
    pub(crate) struct Seen {
        pub uri: String,
        pub headers: HeaderMap,
        pub body: String,
    }

    /// Serve one canned response (status, headers, body) to every request on 127.0.0.1:0.
    /// Returns `http://127.0.0.1:port` and what the server saw.
    pub(crate) async fn canned_server(
        status: u16,
        headers: &[(&'static str, &'static str)],
        body: impl Into<bytes::Bytes>,
    ) -> (String, Arc<Mutex<Seen>>) {
        let body: bytes::Bytes = body.into();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let headers: Vec<(&'static str, &'static str)> = headers.to_vec();
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, req_headers: HeaderMap, req_body: String| {
            let headers = headers.clone();
            let (record, body) = (record.clone(), body.clone());
            async move {
                *record.lock().unwrap() = Seen { uri: uri.to_string(), headers: req_headers, body: req_body };
                let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap());
                for (name, value) in headers {
                    response = response.header(name, value);
                }
                response.body(Body::from(body)).unwrap()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        (format!("http://{addr}"), seen)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::canned_server;
    use super::*;
    use crate::adapter::wire::openai::chat;
    use crate::adapter::{Transport, Upstream};
    use crate::canonical::{ChatRequest, FinishReason, Message, Role};

    const JSON_ANSWER: &str = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
    const SSE_ANSWER: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hel\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

    async fn answer(content_type: &'static str, body: &'static str, stream: bool) -> Vec<Event> {
        let (base, _) = canned_server(200, &[("content-type", content_type)], body).await;
        let upstream = Upstream { base_url: base, ..Default::default() };
        let req = ChatRequest {
            stream,
            messages: vec![Message::new(Role::User, "hi")].into(),
            ..Default::default()
        };
        let transport = Transport::from(reqwest::Client::new());
        let call = crate::adapter::Call::as_written(crate::adapter::WireFormat::OpenAi, upstream, &req);
        let events = chat::send(&transport, &call, &req).await.unwrap();
        events.map(|e| e.unwrap()).collect().await
    }

    fn text(events: &[Event]) -> String {
        events
            .iter()
            .filter_map(|e| if let Event::TextDelta(t) = e { Some(t.as_str()) } else { None })
            .collect()
    }

    #[tokio::test]
    async fn answers_are_read_by_their_content_type_not_by_what_was_asked() {
        // A server that ignores `stream: true` and answers JSON.
        let events = answer("application/json", JSON_ANSWER, true).await;
        assert_eq!(text(&events), "hello");
        assert_eq!(events.last(), Some(&Event::Finish(FinishReason::Stop)));
        // An SSE answer to a plain call.
        let events = answer("text/event-stream; charset=utf-8", SSE_ANSWER, false).await;
        assert_eq!(text(&events), "hello");
        assert_eq!(events.last(), Some(&Event::Finish(FinishReason::Stop)));
        // No content type: as asked.
        assert_eq!(text(&answer("", SSE_ANSWER, true).await), "hello");
    }

    #[test]
    fn excerpt_cuts_long_bodies_on_char_boundaries() {
        let long = "é".repeat(600);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), 513);
        assert_eq!(excerpt("  short \n"), "short");
    }
}
