//! AWS's event stream (`application/vnd.amazon.eventstream`), the binary framing of Bedrock's
//! streamed answers: each frame has a prelude and a message checksum, read with
//! `aws-smithy-eventstream` (both checksums verified, a frame split across reads put back
//! together, at most [`MAX_FRAME`] held). Each message becomes the SSE event the adapter's
//! parser reads, so one parser serves a provider whatever carries its events:
//!
//! - an `event` message becomes `event: {:event-type}` with its payload as the data, except
//!   InvokeModel's `chunk`, whose `bytes` hold one event of the model's own stream (base64
//!   JSON): that event is given as it is, named by its `type`;
//! - an `exception` message (`:exception-type`, e.g. `throttlingException`) or an `error`
//!   message (`:error-code`) ends the stream with the error the provider's classifier makes.

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use serde_json::Value;

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::Message;

use super::http::{Answer, ByteStream};
use crate::canonical::{ErrorClass, UpstreamError};

/// The media type of an event-stream body.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// The most of one frame held while it arrives (a frame's own limit is 16 MiB of payload).
pub const MAX_FRAME: usize = 16 * 1024 * 1024 + 64 * 1024;

/// Makes the error of an exception (its type, e.g. `throttlingException`, and message).
type Exception = fn(&str, &str) -> UpstreamError;

/// `answer` read as the SSE its event-stream frames carry (Bedrock's exceptions ending it), if
/// it is an event stream; else as it is.
pub(in crate::adapter) fn unframed(answer: Answer) -> Answer {
    if answer.media_type().as_deref() != Some(CONTENT_TYPE) {
        return answer;
    }
    answer.reframed("text/event-stream", |frames| {
        as_sse(frames, crate::adapter::provider::bedrock::errors::exception)
    })
}

/// `body` (event-stream frames) as SSE text, one event per message.
fn as_sse(body: ByteStream, exception: Exception) -> ByteStream {
    struct State {
        body: ByteStream,
        held: BytesMut,
        decoder: MessageFrameDecoder,
        /// The error that ends the stream, once the events before it have gone.
        ending: Option<UpstreamError>,
        done: bool,
    }
    let state =
        State { body, held: BytesMut::new(), decoder: MessageFrameDecoder::new(), ending: None, done: false };
    Box::pin(futures::stream::unfold(state, move |mut st| async move {
        loop {
            if let Some(e) = st.ending.take() {
                st.done = true;
                return Some((Err(e), st));
            }
            if st.done {
                return None;
            }
            let mut sse = BytesMut::new();
            while st.ending.is_none() {
                match st.decoder.decode_frame(&mut st.held) {
                    Ok(DecodedFrame::Complete(message)) => {
                        st.ending = write_event(&message, &mut sse, exception).err();
                    }
                    Ok(DecodedFrame::Incomplete) => break,
                    Err(e) => st.ending = Some(broken(format!("malformed event-stream frame: {e}"))),
                }
            }
            if !sse.is_empty() {
                return Some((Ok(sse.freeze()), st));
            }
            if st.ending.is_some() {
                continue;
            }
            match st.body.next().await {
                Some(Ok(read)) if st.held.len() + read.len() > MAX_FRAME => {
                    st.done = true;
                    let why = format!("an event-stream frame over {MAX_FRAME} bytes");
                    return Some((Err(broken(why)), st));
                }
                Some(Ok(read)) => st.held.extend_from_slice(&read),
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                None if st.held.is_empty() => return None,
                None => {
                    st.done = true;
                    return Some((Err(broken("the body ended inside an event-stream frame".into())), st));
                }
            }
        }
    }))
}

fn broken(message: String) -> UpstreamError {
    UpstreamError::new(ErrorClass::StreamBroken, None, message)
}

/// The value of `message`'s string header `name`.
fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    let header = message.headers().iter().find(|h| h.name().as_str() == name)?;
    header.value().as_string().ok().map(|s| s.as_str())
}

/// Append the SSE event of one message to `sse`, or say the error it carries.
fn write_event(message: &Message, sse: &mut BytesMut, exception: Exception) -> Result<(), UpstreamError> {
    let payload = std::str::from_utf8(message.payload())
        .map_err(|_| broken("an event-stream payload that is not UTF-8".into()))?;
    match header(message, ":message-type") {
        Some("exception") => {
            let kind = header(message, ":exception-type").unwrap_or("exception");
            Err(exception(kind, &message_of(payload)))
        }
        Some("error") => {
            let code = header(message, ":error-code").unwrap_or("error");
            Err(exception(code, header(message, ":error-message").unwrap_or(payload)))
        }
        _ => {
            let event = header(message, ":event-type").unwrap_or("message");
            if event != "chunk" {
                put(sse, event, payload);
                return Ok(());
            }
            let inner = chunk_bytes(payload)?;
            let name = serde_json::from_str::<Value>(&inner)
                .ok()
                .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| "message".into());
            put(sse, &name, &inner);
            Ok(())
        }
    }
}

/// The text an InvokeModel `chunk` carries: its `bytes`, base64-decoded.
fn chunk_bytes(payload: &str) -> Result<String, UpstreamError> {
    let chunk: Value = serde_json::from_str(payload).map_err(|e| super::http::malformed(payload, &e))?;
    let bytes = chunk.get("bytes").and_then(Value::as_str).unwrap_or_default();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(bytes)
        .map_err(|e| broken(format!("a chunk whose bytes are not base64: {e}")))?;
    String::from_utf8(decoded).map_err(|_| broken("a chunk whose bytes are not UTF-8".into()))
}

/// An exception's message: its JSON payload's `message` (or `Message`), else the payload.
fn message_of(payload: &str) -> String {
    let json: Option<Value> = serde_json::from_str(payload).ok();
    let said = json.as_ref().and_then(|v| v.get("message").or(v.get("Message"))).and_then(Value::as_str);
    said.unwrap_or(payload).to_string()
}

/// One SSE event; each line of `data` on a `data:` line of its own.
fn put(sse: &mut BytesMut, event: &str, data: &str) {
    sse.put_slice(b"event: ");
    sse.put_slice(event.as_bytes());
    sse.put_u8(b'\n');
    for line in data.lines() {
        sse.put_slice(b"data: ");
        sse.put_slice(line.as_bytes());
        sse.put_u8(b'\n');
    }
    sse.put_u8(b'\n');
}

/// An event-stream frame, as an upstream writes it (the simulator and the tests).
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Bytes {
    use aws_smithy_types::event_stream::{Header, HeaderValue};
    let mut message = Message::new(Bytes::copy_from_slice(payload));
    for (name, value) in headers {
        message =
            message.add_header(Header::new(name.to_string(), HeaderValue::String(value.to_string().into())));
    }
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&message, &mut out).expect("a message within the limits");
    Bytes::from(out)
}

/// InvokeModel's `chunk` event frame carrying one event of the model's stream.
pub fn chunk_frame(event_json: &str) -> Bytes {
    let bytes = base64::engine::general_purpose::STANDARD.encode(event_json);
    let payload = serde_json::json!({"bytes": bytes}).to_string();
    frame(
        &[(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")],
        payload.as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exception(kind: &str, message: &str) -> UpstreamError {
        UpstreamError::new(ErrorClass::RateLimited, Some(429), format!("{kind}: {message}"))
    }

    async fn sse_of(pieces: Vec<Bytes>) -> (String, Option<UpstreamError>) {
        let body: ByteStream = Box::pin(futures::stream::iter(pieces.into_iter().map(Ok)));
        let mut out = as_sse(body, exception);
        let (mut text, mut error) = (String::new(), None);
        while let Some(item) = out.next().await {
            match item {
                Ok(bytes) => text.push_str(std::str::from_utf8(&bytes).unwrap()),
                Err(e) => error = Some(e),
            }
        }
        (text, error)
    }

    /// `bytes` cut into pieces of `size`.
    fn cut(bytes: &[u8], size: usize) -> Vec<Bytes> {
        bytes.chunks(size).map(Bytes::copy_from_slice).collect()
    }

    #[tokio::test]
    async fn chunks_become_the_model_events_they_carry_however_the_frames_are_cut() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&chunk_frame(r#"{"type":"message_start","message":{"id":"m"}}"#));
        wire.extend_from_slice(&chunk_frame(r#"{"type":"content_block_delta","delta":{"text":"hi"}}"#));
        let conv = frame(
            &[(":event-type", "messageStop"), (":message-type", "event")],
            br#"{"stopReason":"end_turn"}"#,
        );
        wire.extend_from_slice(&conv);
        let expected = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n\
            event: messageStop\ndata: {\"stopReason\":\"end_turn\"}\n\n";
        for size in [1, 7, 64, wire.len()] {
            let (text, error) = sse_of(cut(&wire, size)).await;
            assert_eq!((text.as_str(), error), (expected, None), "pieces of {size}");
        }
    }

    #[tokio::test]
    async fn an_exception_ends_the_stream_with_the_providers_error() {
        let mut wire = chunk_frame(r#"{"type":"ping"}"#).to_vec();
        let headers = [(":exception-type", "throttlingException"), (":message-type", "exception")];
        wire.extend_from_slice(&frame(&headers, br#"{"message":"Too many requests"}"#));
        let (text, error) = sse_of(vec![Bytes::from(wire)]).await;
        assert_eq!(text, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
        assert_eq!(error.unwrap().message, "throttlingException: Too many requests");
    }

    #[tokio::test]
    async fn a_corrupt_or_cut_frame_breaks_the_stream() {
        let mut corrupt = chunk_frame(r#"{"type":"ping"}"#).to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        let (_, error) = sse_of(vec![Bytes::from(corrupt)]).await;
        assert_eq!(error.unwrap().class, ErrorClass::StreamBroken, "message checksum");
        let whole = chunk_frame(r#"{"type":"ping"}"#);
        let (_, error) = sse_of(vec![whole.slice(..whole.len() - 3)]).await;
        assert!(error.unwrap().message.contains("inside an event-stream frame"));
        let mut prelude = whole.to_vec();
        prelude[9] ^= 0xff;
        let (_, error) = sse_of(vec![Bytes::from(prelude)]).await;
        assert_eq!(error.unwrap().class, ErrorClass::StreamBroken, "prelude checksum");
    }
}
