//! The request pipeline called in process, without HTTP: `serve::serve` over a real simulator,
//! as a bench or a test of the pipeline alone would call it. The answer streams, the outcome
//! record and the cost header's figure come from the same one pricing.

use crate::common;

use std::sync::Arc;
use std::time::SystemTime;

use axum::http::HeaderMap;
use futures::StreamExt;
use rust_decimal::Decimal;
use spillway::canonical::{ChatRequest, Event, Message, Role};
use spillway::dispatch::Keys;
use spillway::outcome::{AnswerCost, Ending, Record, RequestOutcome};
use spillway::serve::{self, Arrival, Serving};
use spillway::sim::SimKind;

/// A request arriving with no key, no pin and default priority.
fn arrival<'a>(request_id: &str, headers: &'a HeaderMap) -> Arrival<'a> {
    Arrival {
        arrived_at: SystemTime::now(),
        request_id: request_id.into(),
        principal: None,
        headers,
        priority: None,
        pin: None,
        owned: None,
        fleet_only: false,
        trace: None,
    }
}

/// `request`, streamed, through the pipeline of the config `yaml` (one task, `t`): what was
/// served, and the records the pipeline writes.
async fn serve_stream(
    yaml: &str,
    request_id: &str,
    request: ChatRequest,
) -> (serve::Served, tokio::sync::mpsc::UnboundedReceiver<Record>) {
    let config = spillway::config::parse(yaml).unwrap();
    let (records, outcomes) = tokio::sync::mpsc::unbounded_channel();
    let serving = Serving::in_process(Arc::new(config), Keys::default(), records);
    let headers = HeaderMap::new();
    let request = ChatRequest { model: "t".into(), stream: true, ..request };
    let served = serve::serve(&serving, arrival(request_id, &headers), "t", |_task| Ok(request))
        .await
        .unwrap_or_else(|e| panic!("served: {e:?}"));
    (served, outcomes)
}

/// The request's outcome record, once it has ended.
async fn outcome(outcomes: &mut tokio::sync::mpsc::UnboundedReceiver<Record>) -> RequestOutcome {
    loop {
        match outcomes.recv().await.expect("the request's outcome is recorded") {
            Record::Request(r) if r.ending != Ending::InFlight => return r,
            _ => {}
        }
    }
}

#[tokio::test]
async fn serve_runs_the_whole_pipeline_without_http_and_prices_the_answer_once() {
    let hosted = common::sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let yaml = format!(
        "backends:\n  - {{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6, \
         price: {{input_per_mtok: 2, output_per_mtok: 8}}}}\n\
         tasks:\n  - {{name: t, backends: [hosted], slo: {{ttft_ms: 2000}}}}\n",
        hosted.base_url()
    );
    let request =
        ChatRequest { messages: vec![Message::new(Role::User, "Say hello.")].into(), ..Default::default() };
    let (served, mut outcomes) = serve_stream(&yaml, "in-process-1", request).await;
    assert_eq!((served.task.as_str(), served.committed.backend.as_str()), ("t", "hosted"));
    let events: Vec<Event> = served.committed.events.map(|e| e.expect("no upstream error")).collect().await;
    let text: String = events
        .iter()
        .filter_map(|e| if let Event::TextDelta(t) = e { Some(t.as_str()) } else { None })
        .collect();
    assert!(!text.is_empty(), "{events:?}");
    let usage = events.iter().find_map(|e| if let Event::Usage(u) = e { Some(*u) } else { None }).unwrap();
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0, "{usage:?}");

    let outcome = outcome(&mut outcomes).await;
    assert_eq!(
        (outcome.backend.as_str(), outcome.ending, outcome.usage),
        ("hosted", Ending::Completed, usage)
    );
    // $2 and $8 per million tokens.
    let expected = (Decimal::from(usage.input_tokens) * Decimal::from(2)
        + Decimal::from(usage.output_tokens) * Decimal::from(8))
        / Decimal::from(1_000_000);
    assert_eq!(outcome.cost, Some(AnswerCost::ListPrice(expected)));
    assert_eq!(served.cost.get(), Some(expected.normalize()), "the header's figure is the outcome's");
}

/// A stream through the pipeline from a simulator that writes a token every `token_ms`, under
/// `stream_idle_timeout_ms: idle_ms`: its events, then its outcome record.
async fn stream_with_idle(token_ms: u64, idle_ms: u64) -> (Vec<Result<Event, String>>, Ending) {
    let node = common::sim(SimKind::Vllm, "llama", |a| a.token_delay_ms = token_ms).await;
    let yaml = format!(
        "backends:\n  - {{name: node, kind: openai_compatible, base_url: \"{}/v1\", model: llama}}\n\
         tasks:\n  - {{name: t, backends: [node], slo: {{ttft_ms: 5000}}}}\n\
         dispatch: {{stream_idle_timeout_ms: {idle_ms}}}\n",
        node.base_url()
    );
    let request = ChatRequest {
        messages: vec![Message::new(Role::User, "Count to five.")].into(),
        max_tokens: Some(12),
        ..Default::default()
    };
    let (served, mut outcomes) = serve_stream(&yaml, "idle-1", request).await;
    let events: Vec<_> = served.committed.events.map(|e| e.map_err(|e| e.message)).collect().await;
    (events, outcome(&mut outcomes).await.ending)
}

#[tokio::test]
async fn a_stream_quiet_for_the_idle_timeout_ends_with_a_timeout_and_one_that_keeps_talking_does_not() {
    // Twelve tokens 40 ms apart: about 480 ms in all, twice the idle timeout, never quiet for it.
    let (events, ending) = stream_with_idle(40, 250).await;
    assert_eq!(ending, Ending::Completed, "{events:?}");
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    let text = events.iter().filter(|e| matches!(e, Ok(Event::TextDelta(_)))).count();
    assert!(text >= 8, "the tokens arrived, over more than the idle timeout: {events:?}");
    // Tokens a second apart under a 250 ms idle timeout: cut after the first, with a timeout.
    let (events, ending) = stream_with_idle(1000, 250).await;
    assert_eq!(ending, Ending::Failed(spillway::canonical::ErrorClass::Timeout), "{events:?}");
    let last = events.last().expect("events").as_ref().unwrap_err();
    assert!(last.contains("upstream sent nothing for 250 ms"), "{last}");
    assert_eq!(events.iter().filter(|e| e.is_err()).count(), 1, "the error ends the stream: {events:?}");
}
