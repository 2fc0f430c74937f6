//! The SSE body of a streamed chat completion, written cheaply per event.
//!
//! Each response serialises its fixed part (`id`, `object`, `created`, `model`) once; every
//! event then costs one buffer and one typed serialisation of its `choices`, with no JSON tree.
//! Events the upstream has already delivered are written together in one body frame (up to
//! [`BATCH_BYTES`]), so a burst of tokens costs one socket write, while an event that arrives on
//! its own is sent at once. The stream ends with `data: [DONE]`, or with an in-band error event
//! and no `[DONE]` when the upstream broke after the first token.

use std::pin::Pin;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures::{FutureExt, Stream, StreamExt};
use serde::Serialize;

use super::error::ApiError;
use super::wire::WireUsage;
use crate::adapter::EventStream;
use crate::canonical::{Event, FinishReason, Usage};

/// Most bytes written in one frame when several events are ready at once.
const BATCH_BYTES: usize = 16 * 1024;

/// The fixed part of every chunk of one response, serialised once.
pub struct ChunkWriter {
    /// `data: {"id":…,"object":"chat.completion.chunk","created":…,"model":…,"choices":`
    prefix: Vec<u8>,
}

#[derive(Serialize)]
struct Head<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallDelta<'a>; 1]>,
}

#[derive(Serialize)]
struct ToolCallDelta<'a> {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionDelta<'a>,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

impl ChunkWriter {
    pub fn new(id: &str, model: &str, created: u64) -> ChunkWriter {
        let mut prefix = b"data: ".to_vec();
        serde_json::to_writer(&mut prefix, &Head { id, object: "chat.completion.chunk", created, model })
            .expect("a struct of strings and numbers serialises");
        prefix.pop(); // the closing brace: `choices` follows
        prefix.extend_from_slice(b",\"choices\":");
        ChunkWriter { prefix }
    }

    fn choice(&self, out: &mut Vec<u8>, delta: Delta<'_>, finish_reason: Option<&'static str>) {
        out.extend_from_slice(&self.prefix);
        out.push(b'[');
        serde_json::to_writer(&mut *out, &Choice { index: 0, delta, finish_reason })
            .expect("a chunk of strings and numbers serialises");
        out.extend_from_slice(b"]}\n\n");
    }

    /// The first chunk: the assistant role with empty content.
    pub fn role(&self, out: &mut Vec<u8>) {
        self.choice(out, Delta { role: Some("assistant"), content: Some(""), ..Delta::default() }, None);
    }

    /// The chunk for one canonical event (`Usage` is written by [`ChunkWriter::usage`]).
    pub fn event(&self, out: &mut Vec<u8>, event: &Event) {
        match event {
            Event::TextDelta(text) => {
                self.choice(out, Delta { content: Some(text), ..Delta::default() }, None)
            }
            Event::ToolCallDelta { index, id, name, arguments } => {
                let call = ToolCallDelta {
                    index: *index,
                    id: id.as_deref(),
                    kind: id.as_ref().map(|_| "function"),
                    function: FunctionDelta { name: name.as_deref(), arguments },
                };
                self.choice(out, Delta { tool_calls: Some([call]), ..Delta::default() }, None)
            }
            Event::Finish(reason) => self.finish(out, *reason),
            Event::Usage(_) => {}
        }
    }

    fn finish(&self, out: &mut Vec<u8>, reason: FinishReason) {
        self.choice(out, Delta::default(), Some(reason.as_str()));
    }

    /// The usage chunk (`stream_options.include_usage`): empty `choices`.
    pub fn usage(&self, out: &mut Vec<u8>, usage: &Usage) {
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(b"[],\"usage\":");
        serde_json::to_writer(&mut *out, &WireUsage::from(usage)).expect("numbers serialise");
        out.extend_from_slice(b"}\n\n");
    }
}

/// Canonical events → the SSE response; `hold` (the admission permit) lives as long as the body.
pub fn stream_response<H: Send + 'static>(
    events: EventStream,
    backend: &str,
    writer: ChunkWriter,
    include_usage: bool,
    hold: H,
) -> Response {
    let body = Body::from_stream(sse_body(events, backend.to_string(), writer, include_usage, hold));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

type Frames = Pin<Box<dyn Stream<Item = Result<Bytes, std::convert::Infallible>> + Send>>;

fn sse_body<H: Send + 'static>(
    events: EventStream,
    backend: String,
    writer: ChunkWriter,
    include_usage: bool,
    hold: H,
) -> Frames {
    struct State<H> {
        events: EventStream,
        backend: String,
        writer: ChunkWriter,
        usage: Option<Usage>,
        started: bool,
        ended: bool,
        _hold: H,
    }
    let state = State { events, backend, writer, usage: None, started: false, ended: false, _hold: hold };
    Box::pin(futures::stream::unfold(state, move |mut s| {
        async move {
            if s.ended {
                return None;
            }
            let mut out = Vec::with_capacity(512);
            if !s.started {
                s.started = true;
                s.writer.role(&mut out);
            }
            let mut next = s.events.next().await;
            loop {
                match next {
                    Some(Ok(Event::Usage(u))) => s.usage = Some(u),
                    Some(Ok(event)) => s.writer.event(&mut out, &event),
                    Some(Err(e)) => {
                        s.ended = true;
                        out.extend_from_slice(b"data: ");
                        out.extend_from_slice(
                            ApiError::from_upstream(&s.backend, &e).body().to_string().as_bytes(),
                        );
                        out.extend_from_slice(b"\n\n");
                    }
                    None => {
                        s.ended = true;
                        if include_usage {
                            s.writer.usage(&mut out, &s.usage.unwrap_or_default());
                        }
                        out.extend_from_slice(b"data: [DONE]\n\n");
                    }
                }
                if s.ended || out.len() >= BATCH_BYTES {
                    break;
                }
                // Take what the upstream has already delivered; never wait for more here.
                match s.events.next().now_or_never() {
                    Some(ready) => next = ready,
                    None => break,
                }
            }
            Some((Ok(Bytes::from(out)), s))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::{ErrorClass, UpstreamError};
    use serde_json::{json, Value};

    async fn body_of(events: Vec<Result<Event, UpstreamError>>, include_usage: bool) -> Vec<Value> {
        let writer = ChunkWriter::new("chatcmpl-1", "summarise", 1764547200);
        let frames =
            sse_body(Box::pin(futures::stream::iter(events)), "local".into(), writer, include_usage, ());
        let bytes: Vec<u8> = frames.map(|f| f.unwrap().to_vec()).concat().await;
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.ends_with("\n\n"), "{text:?}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data line: {e:?}"));
                if data == "[DONE]" {
                    json!("[DONE]")
                } else {
                    serde_json::from_str(data).unwrap()
                }
            })
            .collect()
    }

    #[tokio::test]
    async fn chunks_have_the_openai_shape() {
        let events = vec![
            Ok(Event::TextDelta("Hel\"lo\n".into())),
            Ok(Event::ToolCallDelta {
                index: 0,
                id: Some("call_1".into()),
                name: Some("lookup".into()),
                arguments: "{\"q\"".into(),
            }),
            Ok(Event::ToolCallDelta { index: 0, id: None, name: None, arguments: ":1}".into() }),
            Ok(Event::Usage(Usage { input_tokens: 7, cached_input_tokens: 2, output_tokens: 3 })),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ];
        let chunks = body_of(events, true).await;
        let head =
            |c: &Value| (c["id"].clone(), c["object"].clone(), c["created"].clone(), c["model"].clone());
        for chunk in &chunks[..chunks.len() - 1] {
            assert_eq!(
                head(chunk),
                (json!("chatcmpl-1"), json!("chat.completion.chunk"), json!(1764547200), json!("summarise"))
            );
        }
        assert_eq!(
            chunks[0]["choices"],
            json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}])
        );
        assert_eq!(chunks[1]["choices"][0]["delta"], json!({"content": "Hel\"lo\n"}));
        assert_eq!(
            chunks[2]["choices"][0]["delta"],
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\""}}]})
        );
        assert_eq!(
            chunks[3]["choices"][0]["delta"],
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]})
        );
        assert_eq!(chunks[4]["choices"], json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]));
        assert_eq!(chunks[5]["choices"], json!([]));
        assert_eq!(
            chunks[5]["usage"],
            json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 2}})
        );
        assert_eq!(chunks[6], json!("[DONE]"));
        assert_eq!(chunks.len(), 7);
    }

    #[tokio::test]
    async fn a_break_after_the_first_token_ends_with_an_error_event_and_no_done() {
        let events = vec![
            Ok(Event::TextDelta("partial".into())),
            Err(UpstreamError::new(ErrorClass::StreamBroken, None, "connection reset")),
        ];
        let chunks = body_of(events, true).await;
        assert_eq!(chunks.len(), 3, "{chunks:?}");
        let error = &chunks[2]["error"];
        assert!(error["message"].as_str().unwrap().contains("connection reset"), "{error}");
        assert!(!chunks.contains(&json!("[DONE]")));
    }

    #[tokio::test]
    async fn events_that_are_ready_together_go_out_in_one_frame() {
        let events: Vec<_> = (0..30).map(|i| Ok(Event::TextDelta(format!("w{i} ")))).collect();
        let writer = ChunkWriter::new("c", "m", 0);
        let frames: Vec<_> =
            sse_body(Box::pin(futures::stream::iter(events)), "b".into(), writer, false, ()).collect().await;
        assert_eq!(frames.len(), 1, "30 ready events and the end in one write");
    }
}
