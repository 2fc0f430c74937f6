//! Each adapter against the simulator of its provider, over real HTTP: streamed and whole
//! answers, usage, finish reasons, and errors classified where they are born.

use crate::common;

use futures::StreamExt;
use spillway::adapter::provider::anthropic::Anthropic;
use spillway::adapter::{self, KeyHeader, Upstream, WireFormat};
use spillway::canonical::{ChatRequest, ErrorClass, Event, FinishReason, Message, Role, UpstreamError};
use spillway::sim::{SimArgs, SimKind};

struct Case {
    kind: SimKind,
    format: WireFormat,
    model: &'static str,
    /// Path the adapter's base URL adds to the simulator's address.
    suffix: &'static str,
    /// Azure's key header and `api-version` (a legacy deployment's).
    azure: Option<Option<&'static str>>,
}

impl Case {
    const fn new(kind: SimKind, format: WireFormat, model: &'static str, suffix: &'static str) -> Case {
        Case { kind, format, model, suffix, azure: None }
    }
}

const CASES: &[Case] = &[
    Case::new(SimKind::Vllm, WireFormat::OpenAi, "meta-llama/Llama-3.1-8B-Instruct", "/v1"),
    Case::new(SimKind::OpenAi, WireFormat::OpenAi, "gpt-5.6", "/v1"),
    Case::new(SimKind::Anthropic, WireFormat::Claude(&Anthropic), "claude-sonnet-4-6", ""),
    Case::new(SimKind::Gemini, WireFormat::Gemini, "gemini-3.5-pro", "/v1beta"),
    // Azure's v1 API, then a legacy deployment of the same name.
    Case {
        azure: Some(None),
        ..Case::new(SimKind::AzureOpenai, WireFormat::OpenAi, "gpt-5.6", "/openai/v1")
    },
    Case {
        azure: Some(Some("api-version=2024-10-21")),
        ..Case::new(SimKind::AzureOpenai, WireFormat::OpenAi, "gpt-5.6", "/openai/deployments/gpt-5.6")
    },
];

/// Where and as whom `case`'s adapter calls `sim`, with `key`.
fn upstream(case: &Case, sim: &spillway::sim::SimHandle, key: &str) -> Upstream {
    Upstream {
        base_url: format!("{}{}", sim.base_url(), case.suffix),
        api_key: Some(key.into()),
        key_header: if case.azure.is_some() { KeyHeader::ApiKey } else { KeyHeader::Bearer },
        query: case.azure.flatten().map(str::to_string),
        ..Default::default()
    }
}

fn request(model: &str, stream: bool, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![
            Message::new(Role::System, "You are terse."),
            Message::new(Role::User, "Summarise the ticket: VPN drops every hour."),
        ]
        .into(),
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
    let sim = common::sim(case.kind, case.model, |a| {
        // Azure's simulator checks the key it is sent as `api-key`.
        a.api_key = case.azure.map(|_| "test-key".into());
        tune(a)
    })
    .await;
    let upstream = upstream(case, &sim, "test-key");
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
        let sim = common::sim(case.kind, case.model, |a| {
            a.rpm = 1;
            a.api_key = case.azure.map(|_| "k".into());
        })
        .await;
        let upstream = upstream(case, &sim, "k");
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

#[tokio::test]
async fn azure_asks_for_its_wait_in_milliseconds_and_refuses_a_wrong_key() {
    for case in CASES.iter().filter(|c| c.azure.is_some()) {
        let tune = |a: &mut SimArgs| {
            a.error_rate = 1.0;
            a.error_status = 429;
            a.retry_after_ms = 250;
        };
        let err = collect(case, tune, request(case.model, true, 5)).await.err().unwrap();
        assert_eq!(err.class, ErrorClass::RateLimited, "{err}");
        // `retry-after-ms: 250` beside `Retry-After: 1`: the milliseconds are what was asked.
        assert_eq!(err.retry_after, Some(std::time::Duration::from_millis(250)), "{}", case.suffix);

        let sim = common::sim(case.kind, case.model, |a| a.api_key = Some("right".into())).await;
        let client = adapter::Transport::from(reqwest::Client::new());
        let req = request(case.model, false, 3);
        let call = adapter::Call::as_written(case.format, upstream(case, &sim, "wrong"), &req);
        let err = adapter::send(&client, &call, &req).await.err().unwrap();
        assert_eq!((err.class, err.status), (ErrorClass::Auth, Some(401)), "{err}");
        assert!(err.message.contains("Access denied"), "Azure's own words: {err}");
    }
}

#[tokio::test]
async fn an_azure_deployment_that_does_not_exist_is_a_404_naming_it() {
    let case = &CASES[5];
    let sim = common::sim(case.kind, "another-deployment", |_| {}).await;
    let client = adapter::Transport::from(reqwest::Client::new());
    let req = request(case.model, false, 3);
    let call = adapter::Call::as_written(case.format, upstream(case, &sim, "k"), &req);
    let err = adapter::send(&client, &call, &req).await.err().unwrap();
    assert_eq!(err.status, Some(404), "{err}");
    assert!(err.message.contains("deployment for this resource does not exist"), "{err}");
}
