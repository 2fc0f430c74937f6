use super::*;
use crate::adapter::transport::http::testing::{canned_server, run_sse};
use crate::adapter::{Call, EventStream, Transport, Upstream, WireFormat};
use serde_json::Value;

/// `send` as the request is written (its own model).
async fn send(
    transport: &Transport,
    upstream: &Upstream,
    req: &ChatRequest,
    completion: &Completion,
) -> Result<EventStream, UpstreamError> {
    super::send(transport, &Call::as_written(WireFormat::OpenAi, upstream.clone(), req), req, completion)
        .await
}
use crate::canonical::{ErrorClass, Input, Operation};
use futures::StreamExt;
use serde_json::json;

/// The body a completion is sent as, as a JSON tree.
fn request_body(req: &ChatRequest, model: &str, completion: &Completion) -> Value {
    serde_json::to_value(CompletionBody::of(req, model, completion)).unwrap()
}

fn completion(stream: bool) -> Completion {
    let mut passthrough = serde_json::Map::new();
    passthrough.insert("presence_penalty".into(), json!(0.5));
    passthrough.insert("top_k".into(), json!(40));
    Completion {
        prompt: Input::Texts(vec!["Once upon".into(), "a time".into()]),
        stream,
        echo: Some(true),
        logprobs: Some(2),
        suffix: None,
        n: Some(2),
        passthrough,
    }
}

fn request(completion: &Completion) -> ChatRequest {
    ChatRequest {
        model: "qwen-7b".into(),
        max_tokens: Some(5),
        stop: vec!["\n".into()],
        // Dispatch may set `stream` for `stream_upstream`; the completion's own flag decides.
        stream: true,
        operation: Operation::Completion(completion.clone()),
        ..ChatRequest::default()
    }
}

#[test]
fn the_request_passes_through_with_the_backends_model() {
    let streamed = completion(true);
    assert_eq!(
        request_body(&request(&streamed), "qwen-7b", &streamed),
        json!({
            "model": "qwen-7b", "prompt": ["Once upon", "a time"], "stream": true,
            "stream_options": {"include_usage": true}, "max_tokens": 5, "stop": ["\n"],
            "echo": true, "logprobs": 2, "n": 2, "presence_penalty": 0.5, "top_k": 40,
        })
    );
    let whole = completion(false);
    let body = request_body(&request(&whole), "qwen-7b", &whole);
    assert_eq!(body["stream"], false, "the client's own stream flag");
    assert!(body.get("stream_options").is_none(), "{body}");
}

const WHOLE: &str = r#"{"id":"cmpl-up","object":"text_completion","created":1,"model":"qwen-7b","choices":[{"index":0,"text":" there was","logprobs":null,"finish_reason":"length"},{"index":1,"text":" a cat","logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":5,"total_tokens":9}}"#;

#[tokio::test]
async fn a_whole_answer_is_relayed_without_its_head_and_read_for_text_and_usage() {
    let (base, seen) = canned_server(200, &[("content-type", "application/json")], WHOLE).await;
    let upstream = Upstream {
        base_url: format!("{base}/v1"),
        api_key: None,
        serves_messages: false,
        serves_responses: false,
        ..Default::default()
    };
    let whole = completion(false);
    let transport = Transport::from(reqwest::Client::new());
    let events = send(&transport, &upstream, &request(&whole), &whole).await.unwrap();
    let events: Vec<Event> = events.map(Result::unwrap).collect().await;
    assert_eq!(seen.lock().unwrap().uri, "/v1/completions");
    let Event::Relay(relay) = &events[0] else { panic!("{events:?}") };
    let fields = String::from_utf8(relay.fields.to_vec()).unwrap();
    let members: Value = serde_json::from_str(&format!("{{{}}}", &fields[1..])).unwrap();
    let upstream: Value = serde_json::from_str(WHOLE).unwrap();
    assert_eq!(members, json!({"choices": upstream["choices"]}), "the head is the router's to write");
    let usage: Value = serde_json::from_slice(relay.usage.as_deref().unwrap()).unwrap();
    assert_eq!(usage, upstream["usage"]);
    assert!(!relay.no_choices);
    assert_eq!(
        events[1..],
        [
            Event::TextDelta(" there was".into()),
            Event::TextDelta(" a cat".into()),
            Event::Usage(Usage {
                input_tokens: 4,
                cached_input_tokens: 0,
                output_tokens: 5,
                cache_write_tokens: 0
            }),
            Event::Finish(FinishReason::Length),
        ]
    );
}

const STREAM: &str = concat!(
    "data: {\"id\":\"cmpl-up\",\"object\":\"text_completion\",\"created\":1,\"model\":\"qwen-7b\",\"choices\":[{\"index\":0,\"text\":\" there\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"cmpl-up\",\"object\":\"text_completion\",\"created\":1,\"model\":\"qwen-7b\",\"choices\":[{\"index\":0,\"text\":\" was\",\"logprobs\":null,\"finish_reason\":\"length\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"cmpl-up\",\"object\":\"text_completion\",\"created\":1,\"model\":\"qwen-7b\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\n",
    "data: [DONE]\n\n",
);

fn relays(events: &[Result<Event, UpstreamError>]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(Event::Relay(r)) => Some((String::from_utf8(r.fields.to_vec()).unwrap(), r.no_choices)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_stream_relays_each_chunk_then_what_it_read_from_it() {
    let events = run_sse(STREAM, CompletionStream::default).await;
    assert_eq!(relays(&events).len(), 3);
    assert_eq!(
        relays(&events)[0].0,
        r#","choices":[{"index":0,"text":" there","logprobs":null,"finish_reason":null}]"#
    );
    assert!(relays(&events)[2].1, "the usage chunk has no choices");
    let read: Vec<Event> =
        events.into_iter().map(Result::unwrap).filter(|e| !matches!(e, Event::Relay(_))).collect();
    assert_eq!(
        read,
        [
            Event::TextDelta(" there".into()),
            Event::TextDelta(" was".into()),
            Event::Usage(Usage {
                input_tokens: 4,
                cached_input_tokens: 0,
                output_tokens: 2,
                cache_write_tokens: 0
            }),
            Event::Finish(FinishReason::Length),
        ]
    );
}

#[tokio::test]
async fn a_stream_that_breaks_ends_with_the_error() {
    let first = STREAM.split_inclusive("\n\n").next().unwrap();
    let events = run_sse(first, CompletionStream::default).await;
    let error = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!(error.class, ErrorClass::StreamBroken, "no [DONE]: truncated");

    let in_band = format!("{first}data: {{\"error\":{{\"message\":\"engine died\",\"type\":\"InternalServerError\",\"code\":500}}}}\n\ndata: [DONE]\n\n");
    let events = run_sse(&in_band, CompletionStream::default).await;
    assert!(matches!(events[1], Ok(Event::TextDelta(_))), "{events:?}");
    let error = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!((error.class, error.message.as_str()), (ErrorClass::ServerError, "engine died"));
}

#[tokio::test]
async fn a_whole_completion_must_come_whole_and_a_stream_may() {
    let transport = Transport::from(reqwest::Client::new());
    // Asked whole, answered as an event stream: broken (so dispatch may fail over), never
    // a relay of its last chunk alone.
    let (base, _) = canned_server(200, &[("content-type", "text/event-stream")], STREAM).await;
    let upstream = Upstream { base_url: base, ..Default::default() };
    let whole = completion(false);
    let events: Vec<_> = send(&transport, &upstream, &request(&whole), &whole).await.unwrap().collect().await;
    assert_eq!(events.last().unwrap().as_ref().unwrap_err().class, ErrorClass::StreamBroken, "{events:?}");
    // Asked to stream, answered whole: the answer is its one chunk.
    let (base, _) = canned_server(200, &[("content-type", "application/json")], WHOLE).await;
    let upstream = Upstream { base_url: base, ..Default::default() };
    let streamed = completion(true);
    let events: Vec<Event> = send(&transport, &upstream, &request(&streamed), &streamed)
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(events.iter().filter(|e| matches!(e, Event::Relay(_))).count(), 1);
    assert_eq!(events.last(), Some(&Event::Finish(FinishReason::Length)));
}
