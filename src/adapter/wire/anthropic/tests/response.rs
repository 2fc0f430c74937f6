//! Reading Anthropic's responses: whole messages, streamed events in any chunking, tool use,
//! error bodies and events, and the cache usage in the final delta.
use super::*;

#[test]
fn parses_non_stream_responses() {
    let body: Value =
        serde_json::from_str(include_str!("../../../../../tests/fixtures/anthropic/message.json")).unwrap();
    assert_eq!(
        parse_response(body.to_string().as_bytes()).unwrap(),
        vec![
            text("Hi! My name is Claude."),
            Event::Usage(Usage {
                input_tokens: 3895,
                cached_input_tokens: 1800,
                output_tokens: 503,
                cache_write_tokens: 0
            }),
            Event::Finish(FinishReason::Stop),
        ]
    );
    let body: Value =
        serde_json::from_str(include_str!("../../../../../tests/fixtures/anthropic/message_tool_use.json"))
            .unwrap();
    assert_eq!(
        parse_response(body.to_string().as_bytes()).unwrap(),
        vec![
            text("I'll check the current weather in San Francisco for you."),
            Event::ToolCallDelta {
                index: 0,
                id: Some("toolu_01A09q90qw90lq917835lq9".into()),
                name: Some("get_weather".into()),
                arguments: r#"{"location":"San Francisco, CA","unit":"celsius"}"#.into(),
            },
            Event::Usage(Usage {
                input_tokens: 572,
                cached_input_tokens: 0,
                output_tokens: 91,
                cache_write_tokens: 100
            }),
            Event::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn parses_text_stream_in_any_chunking() {
    let events = run_sse(
        include_str!("../../../../../tests/fixtures/anthropic/message_stream.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(
        events,
        vec![
            Ok(text("Hello")),
            Ok(text("! Ça va?")),
            Ok(Event::Usage(Usage {
                input_tokens: 1035,
                cached_input_tokens: 1000,
                output_tokens: 15,
                cache_write_tokens: 10
            })),
            Ok(Event::Finish(FinishReason::Stop)),
        ]
    );
}

#[tokio::test]
async fn parses_tool_use_stream() {
    let events = run_sse(
        include_str!("../../../../../tests/fixtures/anthropic/message_stream_tool_use.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(
        events,
        vec![
            Ok(text("Okay, let's check the weather.")),
            Ok(Event::ToolCallDelta {
                index: 0,
                id: Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6".into()),
                name: Some("get_weather".into()),
                arguments: String::new(),
            }),
            Ok(Event::ToolCallDelta { index: 0, id: None, name: None, arguments: "{\"location\":".into() }),
            Ok(Event::ToolCallDelta {
                index: 0,
                id: None,
                name: None,
                arguments: " \"San Francisco, CA\"}".into(),
            }),
            Ok(Event::Usage(Usage {
                input_tokens: 472,
                cached_input_tokens: 0,
                output_tokens: 89,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ]
    );
}

#[tokio::test]
async fn truncated_stream_ends_with_stream_broken() {
    let events = run_sse(
        include_str!("../../../../../tests/fixtures/anthropic/message_stream_truncated.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("Hello")));
    assert_eq!(events[1].as_ref().unwrap_err().class, ErrorClass::StreamBroken);
}

#[tokio::test]
async fn overloaded_error_event_is_classified_and_last() {
    let events = run_sse(
        include_str!("../../../../../tests/fixtures/anthropic/message_stream_error.sse"),
        AnthropicStream::default,
    )
    .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("Once upon")));
    let err = events[1].as_ref().unwrap_err();
    assert_eq!(err.class, ErrorClass::Overloaded);
    assert_eq!(err.message, "Overloaded");
}

#[test]
fn classifies_error_bodies() {
    let mut h = HeaderMap::new();
    h.insert("retry-after", "30".parse().unwrap());
    let e =
        classify(429, &h, include_str!("../../../../../tests/fixtures/anthropic/error_429_rate_limit.json"));
    assert_eq!(e.class, ErrorClass::RateLimited);
    assert_eq!(e.retry_after, Some(Duration::from_secs(30)));
    assert!(e.message.starts_with("This request would exceed the rate limit"));

    let none = HeaderMap::new();
    let cases = [
        (
            529,
            include_str!("../../../../../tests/fixtures/anthropic/error_529_overloaded.json"),
            ErrorClass::Overloaded,
        ),
        (
            400,
            include_str!("../../../../../tests/fixtures/anthropic/error_400_prompt_too_long.json"),
            ErrorClass::ContextLength,
        ),
        (
            400,
            include_str!("../../../../../tests/fixtures/anthropic/error_400_invalid_request.json"),
            ErrorClass::InvalidRequest,
        ),
        (
            401,
            include_str!("../../../../../tests/fixtures/anthropic/error_401_authentication.json"),
            ErrorClass::Auth,
        ),
        (
            500,
            include_str!("../../../../../tests/fixtures/anthropic/error_500_api_error.json"),
            ErrorClass::ServerError,
        ),
        (502, "upstream connect error", ErrorClass::ServerError),
    ];
    for (status, body, class) in cases {
        let e = classify(status, &none, body);
        assert_eq!((e.class, e.status), (class, Some(status)), "{body}");
    }
    let e = classify(
        400,
        &none,
        include_str!("../../../../../tests/fixtures/anthropic/error_400_prompt_too_long.json"),
    );
    assert_eq!(e.message, "prompt is too long: 215064 tokens > 200000 maximum");
}

#[tokio::test]
async fn parallel_tool_use_blocks_stream_their_inputs_by_block_index() {
    let sse = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Checking.\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_a\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Pa\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ris\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_b\",\"name\":\"get_time\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"tz\\\": \\\"CET\\\"}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":40}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let events = run_sse(sse, AnthropicStream::default).await;
    let start = |index, id: &str, name: &str| {
        Ok(Event::ToolCallDelta {
            index,
            id: Some(id.into()),
            name: Some(name.into()),
            arguments: String::new(),
        })
    };
    let piece = |index, arguments: &str| {
        Ok(Event::ToolCallDelta { index, id: None, name: None, arguments: arguments.into() })
    };
    assert_eq!(
        events,
        vec![
            Ok(text("Checking.")),
            start(0, "toolu_a", "get_weather"),
            piece(0, "{\"city\": \"Pa"),
            piece(0, "ris\"}"),
            start(1, "toolu_b", "get_time"),
            piece(1, "{\"tz\": \"CET\"}"),
            Ok(Event::Usage(Usage {
                input_tokens: 50,
                cached_input_tokens: 0,
                output_tokens: 40,
                cache_write_tokens: 0
            })),
            Ok(Event::Finish(FinishReason::ToolCalls)),
        ]
    );
}

#[tokio::test]
async fn cache_writes_and_reads_are_read_from_the_final_message_delta() {
    let sse = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":4096,\"output_tokens\":7}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let events = run_sse(sse, AnthropicStream::default).await;
    let usage =
        Usage { input_tokens: 6156, cached_input_tokens: 4096, output_tokens: 7, cache_write_tokens: 2048 };
    assert_eq!(events, vec![Ok(text("ok")), Ok(Event::Usage(usage)), Ok(Event::Finish(FinishReason::Stop))]);
    assert_eq!(usage.uncached_input_tokens(), 12);
}
