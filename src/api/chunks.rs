//! The SSE body of a streamed chat completion, written cheaply per event.
//!
//! Each response serialises its fixed part (`id`, `object`, `created`, `model`) once; every
//! event then costs one buffer and one typed serialisation of its `choices`, with no JSON tree.
//! Events the upstream has already delivered are written together in one body frame (up to
//! [`super::frames::BATCH_BYTES`]), so a burst of tokens costs one socket write, while an event that arrives on
//! its own is sent at once. The stream ends with `data: [DONE]`, or with an in-band error event
//! and no `[DONE]` when the upstream broke after the first token.
//!
//! When the upstream writes chat completion chunks itself, its chunks come as
//! [`Event::Relay`] and are passed on with only the head rewritten; the canonical events read
//! from them are then not written again.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use serde::Serialize;

use super::error::ApiError;
use super::frames::{sse_frames, FrameWriter, Frames, Next};
use super::wire::WireUsage;
use crate::canonical::EventStream;
use crate::canonical::{Event, FinishReason, RelayChunk, Usage};
use crate::serve::CostCell;
use std::sync::Arc;

/// The fixed part of every chunk of one response, serialised once.
pub(crate) struct ChunkWriter {
    /// `data: {"id":…,"object":"chat.completion.chunk","created":…,"model":…`
    head: Vec<u8>,
    /// Legacy completions: only relayed upstream chunks are written (a canonical event has no
    /// `text_completion` form of its own).
    relay_only: bool,
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
        ChunkWriter { head: head(id, "chat.completion.chunk", model, created), relay_only: false }
    }

    /// The writer of a legacy completion's stream: its upstream's chunks, relayed under this
    /// head, and the usage chunk.
    pub fn text_completion(id: &str, model: &str, created: u64) -> ChunkWriter {
        ChunkWriter { head: head(id, "text_completion", model, created), relay_only: true }
    }

    fn choice(&self, out: &mut Vec<u8>, delta: Delta<'_>, finish_reason: Option<&'static str>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b",\"choices\":[");
        serde_json::to_writer(&mut *out, &Choice { index: 0, delta, finish_reason })
            .expect("a chunk of strings and numbers serialises");
        out.extend_from_slice(b"]}\n\n");
    }

    /// The first chunk: the assistant role with empty content.
    pub fn role(&self, out: &mut Vec<u8>) {
        if self.relay_only {
            return;
        }
        self.choice(out, Delta { role: Some("assistant"), content: Some(""), ..Delta::default() }, None);
    }

    /// The chunk for one canonical event (`Usage` is written by [`ChunkWriter::usage`]).
    pub fn event(&self, out: &mut Vec<u8>, event: &Event) {
        if self.relay_only {
            return;
        }
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
            Event::Usage(_)
            | Event::Relay(_)
            | Event::Native(_)
            | Event::ReasoningDelta(_)
            | Event::Embeddings(_) => {}
        }
    }

    /// An upstream chunk under this response's head. Its `usage` goes only to a client that
    /// asked for usage, and a usage-only chunk not at all to one that did not. Returns whether
    /// a usage object was written.
    pub(crate) fn relay(
        &self,
        out: &mut Vec<u8>,
        chunk: &RelayChunk,
        include_usage: bool,
        cost: &CostCell,
    ) -> bool {
        if chunk.no_choices && !include_usage {
            return false;
        }
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&chunk.fields);
        let usage = chunk.usage.as_deref().filter(|_| include_usage);
        if let Some(usage) = usage {
            out.extend_from_slice(b",\"usage\":");
            // The upstream's usage object, with the cost as its last member.
            match (cost.get(), usage.strip_suffix(b"}")) {
                (Some(c), Some(open)) if usage != b"null" => {
                    out.extend_from_slice(open);
                    let member = serde_json::to_string(&c.to_string()).expect("a string serialises");
                    let sep = if open.trim_ascii_end().ends_with(b"{") { "" } else { "," };
                    out.extend_from_slice(
                        format!("{sep}\"{}\":{member}}}", super::wire::COST_FIELD).as_bytes(),
                    );
                }
                _ => out.extend_from_slice(usage),
            }
        }
        out.extend_from_slice(b"}\n\n");
        usage.is_some_and(|u| u != b"null")
    }

    fn finish(&self, out: &mut Vec<u8>, reason: FinishReason) {
        self.choice(out, Delta::default(), Some(reason.as_str()));
    }

    /// The usage chunk (`stream_options.include_usage`): empty `choices`.
    pub fn usage(&self, out: &mut Vec<u8>, usage: &Usage, cost: &CostCell) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b",\"choices\":[],\"usage\":");
        let wire = WireUsage::from(usage).with_cost(cost.get());
        serde_json::to_writer(&mut *out, &wire).expect("numbers serialise");
        out.extend_from_slice(b"}\n\n");
    }
}

/// `data: {"id":…,"object":…,"created":…,"model":…` without its closing brace: the other
/// members follow.
fn head(id: &str, object: &'static str, model: &str, created: u64) -> Vec<u8> {
    let mut head = b"data: ".to_vec();
    serde_json::to_writer(&mut head, &Head { id, object, created, model })
        .expect("a struct of strings and numbers serialises");
    head.pop();
    head
}

/// Canonical events → the SSE response; `hold` (the admission permit) lives as long as the body.
pub(crate) fn stream_response<H: Send + Unpin + 'static>(
    events: EventStream,
    backend: &str,
    writer: ChunkWriter,
    include_usage: bool,
    cost: Arc<CostCell>,
    hold: H,
) -> Response {
    let body = Body::from_stream(sse_body(events, backend.to_string(), writer, include_usage, cost, hold));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

pub(crate) fn sse_body<H: Send + Unpin + 'static>(
    events: EventStream,
    backend: String,
    writer: ChunkWriter,
    include_usage: bool,
    cost: Arc<CostCell>,
    hold: H,
) -> Frames {
    let chat = ChatFrames {
        backend,
        writer,
        include_usage,
        cost,
        usage: None,
        relaying: false,
        usage_sent: false,
        out: Vec::with_capacity(512),
    };
    sse_frames(events, chat, hold)
}

/// A streamed chat completion's chunks, as [`sse_frames`] feeds them.
struct ChatFrames {
    backend: String,
    writer: ChunkWriter,
    include_usage: bool,
    cost: Arc<CostCell>,
    usage: Option<Usage>,
    /// Upstream chunks are being relayed: canonical events are not written again.
    relaying: bool,
    /// A relayed chunk carried the usage object: none of ours at the end.
    usage_sent: bool,
    out: Vec<u8>,
}

impl FrameWriter for ChatFrames {
    fn open(&mut self, first: &Next) {
        // A relayed upstream writes its own role chunk.
        if !matches!(first, Some(Ok(Event::Relay(_)))) {
            self.writer.role(&mut self.out);
        }
    }

    fn write(&mut self, next: Next) -> bool {
        let out = &mut self.out;
        match next {
            Some(Ok(Event::Usage(u))) => self.usage = Some(u),
            Some(Ok(Event::Relay(chunk))) => {
                self.relaying = true;
                self.usage_sent |= self.writer.relay(out, &chunk, self.include_usage, &self.cost);
            }
            Some(Ok(_)) if self.relaying => {}
            Some(Ok(event)) => self.writer.event(out, &event),
            Some(Err(e)) => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(
                    ApiError::from_upstream(&self.backend, &e).body().to_string().as_bytes(),
                );
                out.extend_from_slice(b"\n\n");
                return true;
            }
            None => {
                if self.include_usage && !self.usage_sent {
                    self.writer.usage(out, &self.usage.unwrap_or_default(), &self.cost);
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                return true;
            }
        }
        false
    }

    fn pending(&self) -> usize {
        self.out.len()
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.out, Vec::with_capacity(512))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{ErrorClass, UpstreamError};
    use axum::body::Bytes;
    use futures::StreamExt;
    use serde_json::{json, Value};

    async fn body_of(events: Vec<Result<Event, UpstreamError>>, include_usage: bool) -> Vec<Value> {
        let writer = ChunkWriter::new("chatcmpl-1", "summarise", 1764547200);
        let frames = sse_body(
            Box::pin(futures::stream::iter(events)),
            "local".into(),
            writer,
            include_usage,
            Arc::default(),
            (),
        );
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
            Ok(Event::Usage(Usage {
                input_tokens: 7,
                cached_input_tokens: 2,
                output_tokens: 3,
                cache_write_tokens: 0,
            })),
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
            sse_body(Box::pin(futures::stream::iter(events)), "b".into(), writer, false, Arc::default(), ())
                .collect()
                .await;
        assert_eq!(frames.len(), 1, "30 ready events and the end in one write");
    }

    fn relayed(fields: &str, usage: Option<&str>, no_choices: bool) -> Result<Event, UpstreamError> {
        Ok(Event::Relay(RelayChunk {
            fields: Bytes::copy_from_slice(fields.as_bytes()),
            usage: usage.map(|u| Bytes::copy_from_slice(u.as_bytes())),
            no_choices,
            output: false,
        }))
    }

    /// An upstream's chunks as the OpenAI adapter hands them on: each relay, then what was
    /// read from it.
    fn relayed_answer() -> Vec<Result<Event, UpstreamError>> {
        vec![
            relayed(
                r#","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]"#,
                Some("null"),
                false,
            ),
            relayed(
                r#","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hi","reasoning_content":"think"},"logprobs":{"content":[]},"finish_reason":"stop"}]"#,
                Some("null"),
                false,
            ),
            Ok(Event::TextDelta("Hi".into())),
            relayed(
                r#","choices":[]"#,
                Some(r#"{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}"#),
                true,
            ),
            Ok(Event::Usage(Usage {
                input_tokens: 5,
                cached_input_tokens: 0,
                output_tokens: 1,
                cache_write_tokens: 0,
            })),
            Ok(Event::Finish(FinishReason::Stop)),
        ]
    }

    #[tokio::test]
    async fn relayed_chunks_keep_the_upstreams_fields_under_our_head() {
        let chunks = body_of(relayed_answer(), true).await;
        assert_eq!(chunks.len(), 4, "no role chunk of ours, no canonical copies: {chunks:?}");
        for chunk in &chunks[..3] {
            assert_eq!(chunk["id"], "chatcmpl-1");
            assert_eq!(chunk["model"], "summarise");
            assert_eq!(chunk["created"], 1764547200);
            assert_eq!(chunk["object"], "chat.completion.chunk");
        }
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(chunks[1]["system_fingerprint"], "fp_1");
        assert_eq!(chunks[1]["choices"][0]["delta"]["reasoning_content"], "think");
        assert_eq!(chunks[1]["choices"][0]["logprobs"], json!({"content": []}));
        assert_eq!(chunks[1]["usage"], Value::Null);
        assert_eq!(chunks[2]["usage"]["total_tokens"], 6, "the upstream's usage, not a second one");
        assert_eq!(chunks[3], json!("[DONE]"));
    }

    #[tokio::test]
    async fn a_client_that_did_not_ask_for_usage_gets_none_from_a_relay() {
        let chunks = body_of(relayed_answer(), false).await;
        assert_eq!(chunks.len(), 3, "the usage-only chunk is dropped: {chunks:?}");
        assert!(chunks[..2].iter().all(|c| c.get("usage").is_none()), "{chunks:?}");
    }

    #[tokio::test]
    async fn a_relay_without_usage_gets_ours_when_the_client_asked() {
        let mut events = relayed_answer();
        let _usage_chunk = events.remove(3);
        let chunks = body_of(events, true).await;
        assert_eq!(chunks[2]["choices"], json!([]));
        assert_eq!(chunks[2]["usage"]["prompt_tokens"], 5);
    }
}
