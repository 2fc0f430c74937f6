//! Each adapter against the simulator of its provider, over real HTTP: streamed and whole
//! answers, usage, finish reasons, and errors classified where they are born.

use crate::common;

use futures::StreamExt;
use spillway::adapter::{self, Upstream, WireFormat};
use spillway::canonical::{ChatRequest, ErrorClass, Event, FinishReason, Message, Role, UpstreamError};
use spillway::sim::{SimArgs, SimKind};

struct Case {
    kind: SimKind,
    format: WireFormat,
    model: &'static str,
    /// Path the adapter's base URL adds to the simulator's address.
    suffix: &'static str,
}

const CASES: &[Case] = &[
    Case {
        kind: SimKind::Vllm,
        format: WireFormat::OpenAi,
        model: "meta-llama/Llama-3.1-8B-Instruct",
        suffix: "/v1",
    },
    Case { kind: SimKind::OpenAi, format: WireFormat::OpenAi, model: "gpt-5.6", suffix: "/v1" },
    Case { kind: SimKind::Anthropic, format: WireFormat::Anthropic, model: "claude-sonnet-4-6", suffix: "" },
    Case { kind: SimKind::Gemini, format: WireFormat::Gemini, model: "gemini-3.5-pro", suffix: "/v1beta" },
];

fn request(model: &str, stream: bool, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![
            Message::new(Role::System, "You are terse."),
            Message::new(Role::User, "Summarise the ticket: VPN drops every hour."),
        ],
        max_tokens: Some(max_tokens),
        stream,
        ..Default::default()
    }
}

async fn collect(
    case: &Case,
    tune: impl FnOnce(&mut SimArgs),
    req: ChatRequest,
) -> Result<Vec<Result<Event, UpstreamError>>, UpstreamError> {
    let sim = common::sim(case.kind, case.model, tune).await;
    let upstream = Upstream {
        base_url: format!("{}{}", sim.base_url(), case.suffix),
        api_key: Some("test-key".into()),
        serves_messages: false,
        serves_responses: false,
    };
    let client = adapter::Transport::from(reqwest::Client::new());
    let call = adapter::Call::as_written(case.format, upstream, &req);
    let stream = adapter::send(&client, &call, &req).await?;
    Ok(stream.collect().await)
}

fn summarise(
    events: &[Result<Event, UpstreamError>],
) -> (String, Option<FinishReason>, Option<spillway::canonical::Usage>) {
    let mut text = String::new();
    let (mut finish, mut usage) = (None, None);
    for e in events {
        match e.as_ref().unwrap_or_else(|e| panic!("unexpected error {e}")) {
            Event::TextDelta(t) => text.push_str(t),
            Event::Finish(f) => finish = Some(*f),
            Event::Usage(u) => usage = Some(*u),
            Event::ToolCallDelta { .. }
            | Event::Relay(_)
            | Event::Native(_)
            | Event::ReasoningDelta(_)
            | Event::Embeddings(_) => {}
        }
    }
    (text, finish, usage)
}

#[tokio::test]
async fn every_adapter_streams_and_answers_whole_against_its_simulator() {
    for case in CASES {
        for stream in [true, false] {
            let events = collect(case, |_| {}, request(case.model, stream, 7)).await.unwrap();
            let (text, finish, usage) = summarise(&events);
            let label = format!("{:?} stream={stream}", case.kind);
            assert_eq!(text.split_whitespace().count(), 7, "{label}: {text:?}");
            assert_eq!(finish, Some(FinishReason::Length), "{label}");
            let usage = usage.unwrap_or_else(|| panic!("{label}: no usage"));
            assert_eq!(usage.output_tokens, 7, "{label}");
            assert!(usage.input_tokens > 5, "{label}: {usage:?}");
            if stream {
                assert!(
                    events.iter().filter(|e| matches!(e, Ok(Event::TextDelta(_)))).count() >= 7,
                    "{label}: not streamed"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_short_answer_finishes_with_stop() {
    for case in CASES {
        let events = collect(case, |a| a.output_tokens = 3, request(case.model, true, 50)).await.unwrap();
        let (text, finish, _) = summarise(&events);
        assert_eq!(text.split_whitespace().count(), 3, "{:?}", case.kind);
        assert_eq!(finish, Some(FinishReason::Stop), "{:?}", case.kind);
    }
}

#[tokio::test]
async fn provider_errors_are_classified_with_status_and_retry_after() {
    for case in CASES {
        for (status, class) in [
            (429, ErrorClass::RateLimited),
            (503, ErrorClass::Overloaded),
            (500, ErrorClass::ServerError),
            (400, ErrorClass::InvalidRequest),
        ] {
            let tune = |a: &mut SimArgs| {
                a.error_rate = 1.0;
                a.error_status = status;
            };
            let err = collect(case, tune, request(case.model, true, 5))
                .await
                .err()
                .unwrap_or_else(|| panic!("{:?} {status}: no error", case.kind));
            assert_eq!((err.class, err.status), (class, Some(status)), "{:?}: {err}", case.kind);
            assert!(!err.message.is_empty());
            if status == 429 {
                assert!(err.retry_after.is_some(), "{:?}: 429 without Retry-After", case.kind);
            }
        }
    }
}

#[tokio::test]
async fn anthropic_529_is_overloaded() {
    let case = &CASES[2];
    let tune = |a: &mut SimArgs| {
        a.error_rate = 1.0;
        a.error_status = 529;
    };
    let err = collect(case, tune, request(case.model, true, 5)).await.err().unwrap();
    assert_eq!(err.class, ErrorClass::Overloaded);
    assert!(err.class.may_fail_over());
}

#[tokio::test]
async fn a_cut_stream_ends_with_stream_broken_never_a_clean_finish() {
    for case in CASES {
        let events = collect(case, |a| a.drop_after = Some(2), request(case.model, true, 20)).await.unwrap();
        let texts = events.iter().filter(|e| matches!(e, Ok(Event::TextDelta(_)))).count();
        assert!((1..=2).contains(&texts), "{:?}: {texts}", case.kind);
        assert!(!events.iter().any(|e| matches!(e, Ok(Event::Finish(_)))), "{:?}: finished", case.kind);
        let last = events.last().unwrap().as_ref().unwrap_err();
        assert_eq!(last.class, ErrorClass::StreamBroken, "{:?}", case.kind);
    }
}

#[tokio::test]
async fn quotas_answer_429_in_each_providers_format() {
    for case in &CASES[1..] {
        let sim = common::sim(case.kind, case.model, |a| a.rpm = 1).await;
        let upstream = Upstream {
            base_url: format!("{}{}", sim.base_url(), case.suffix),
            api_key: Some("k".into()),
            serves_messages: false,
            serves_responses: false,
        };
        let client = adapter::Transport::from(reqwest::Client::new());
        let req = request(case.model, false, 3);
        let call = adapter::Call::as_written(case.format, upstream, &req);
        let first = adapter::send(&client, &call, &req).await;
        assert!(first.is_ok(), "{:?}", case.kind);
        let second = adapter::send(&client, &call, &req).await.err().unwrap();
        assert_eq!(second.class, ErrorClass::RateLimited, "{:?}", case.kind);
        assert!(second.retry_after.is_some_and(|d| d.as_secs() <= 60), "{:?}", case.kind);
    }
}
