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
use spillway::outcome::{AnswerCost, Ending, Record};
use spillway::serve::{self, Arrival, Serving};
use spillway::sim::SimKind;

#[tokio::test]
async fn serve_runs_the_whole_pipeline_without_http_and_prices_the_answer_once() {
    let hosted = common::sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let config = spillway::config::parse(&format!(
        "backends:\n  - {{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6, \
         price: {{input_per_mtok: 2, output_per_mtok: 8}}}}\n\
         tasks:\n  - {{name: t, backends: [hosted], slo: {{ttft_ms: 2000}}}}\n",
        hosted.base_url()
    ))
    .unwrap();
    let (records, mut outcomes) = tokio::sync::mpsc::unbounded_channel();
    let serving = Serving::in_process(Arc::new(config), Keys::default(), records);
    let headers = HeaderMap::new();
    let arrival = Arrival {
        arrived_at: SystemTime::now(),
        request_id: "in-process-1".into(),
        principal: None,
        headers: &headers,
        priority: None,
        pin: None,
        owned: None,
        fleet_only: false,
        trace: None,
    };
    let served = serve::serve(&serving, arrival, "t", |_task| {
        Ok(ChatRequest {
            model: "t".into(),
            messages: vec![Message::new(Role::User, "Say hello.")].into(),
            stream: true,
            ..Default::default()
        })
    })
    .await
    .unwrap_or_else(|e| panic!("served: {e:?}"));
    assert_eq!((served.task.as_str(), served.committed.backend.as_str()), ("t", "hosted"));
    let events: Vec<Event> = served.committed.events.map(|e| e.expect("no upstream error")).collect().await;
    let text: String = events
        .iter()
        .filter_map(|e| if let Event::TextDelta(t) = e { Some(t.as_str()) } else { None })
        .collect();
    assert!(!text.is_empty(), "{events:?}");
    let usage = events.iter().find_map(|e| if let Event::Usage(u) = e { Some(*u) } else { None }).unwrap();
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0, "{usage:?}");

    let outcome = loop {
        match outcomes.recv().await.expect("the request's outcome is recorded") {
            Record::Request(r) if r.ending != Ending::InFlight => break r,
            _ => {}
        }
    };
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
