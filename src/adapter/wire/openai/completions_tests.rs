//! The legacy completions stream parser fed in odd chunkings and broken streams; the wire round
//! trips (body, relayed chunks, whole and streamed answers) are cases in
//! tests/fixtures/openai/cases/completion_*.json.
use super::*;
use crate::adapter::transport::http::testing::run_sse;

use crate::canonical::ErrorClass;

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
