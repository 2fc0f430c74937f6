//! The adapter over real HTTP against a canned server: headers, streams, a 529, a cut stream.
use super::*;

#[tokio::test]
async fn send_streams_over_http_with_anthropic_headers() {
    let (base, seen) = canned_server(
        200,
        &[("content-type", "text/event-stream")],
        include_str!("../../../../../tests/fixtures/anthropic/message_stream.sse"),
    )
    .await;
    let upstream = Upstream {
        base_url: base,
        api_key: Some("sk-ant-test".into()),
        serves_messages: false,
        serves_responses: false,
        ..Default::default()
    };
    let stream = send(&reqwest::Client::new().into(), &upstream, &sample_request(true)).await.unwrap();
    let events: Vec<_> = stream.collect().await;
    assert_eq!(events.last(), Some(&Ok(Event::Finish(FinishReason::Stop))));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.uri, "/v1/messages");
    assert_eq!(seen.headers["x-api-key"], "sk-ant-test");
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.headers["content-type"], "application/json");
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["max_tokens"], json!(4096));
}

#[tokio::test]
async fn send_classifies_529() {
    let (base, _) = canned_server(
        529,
        &[("content-type", "application/json")],
        include_str!("../../../../../tests/fixtures/anthropic/error_529_overloaded.json"),
    )
    .await;
    let upstream = Upstream { base_url: base, ..Default::default() };
    let err = send(&reqwest::Client::new().into(), &upstream, &sample_request(false)).await.err().unwrap();
    assert_eq!((err.class, err.status), (ErrorClass::Overloaded, Some(529)));
}

#[tokio::test]
async fn send_reports_cut_stream_as_broken() {
    let (base, _) = canned_server(
        200,
        &[("content-type", "text/event-stream")],
        include_str!("../../../../../tests/fixtures/anthropic/message_stream_truncated.sse"),
    )
    .await;
    let upstream = Upstream { base_url: base, ..Default::default() };
    let stream = send(&reqwest::Client::new().into(), &upstream, &sample_request(true)).await.unwrap();
    let events: Vec<_> = stream.collect().await;
    assert_eq!(events.last().unwrap().as_ref().unwrap_err().class, ErrorClass::StreamBroken);
}

#[tokio::test]
async fn send_non_stream_over_http() {
    let (base, _) = canned_server(
        200,
        &[("content-type", "application/json")],
        include_str!("../../../../../tests/fixtures/anthropic/message_tool_use.json"),
    )
    .await;
    let upstream = Upstream { base_url: base, ..Default::default() };
    let stream = send(&reqwest::Client::new().into(), &upstream, &sample_request(false)).await.unwrap();
    let events: Vec<_> = stream.collect().await;
    assert_eq!(events.len(), 4);
    assert_eq!(events.last(), Some(&Ok(Event::Finish(FinishReason::ToolCalls))));
}
