//! The Converse adapter's body and stream, checked without a network.

use super::stream::ConverseStream;
use super::*;
use crate::adapter::transport::http::testing::run_sse;
use crate::adapter::{Upstream, WireFormat};
use crate::canonical::{
    CachePlacement, ErrorClass, Event, FinishReason, Message, Role, Tool, ToolCall, ToolChoice, Usage,
};
use serde_json::json;

#[test]
fn a_history_with_tool_calls_declares_its_tools_and_turns_alternate() {
    let mut call_turn = Message::new(Role::Assistant, "");
    call_turn.tool_calls =
        vec![ToolCall { id: "t1".into(), name: "weather".into(), arguments: r#"{"city":"Oslo"}"#.into() }];
    let mut result = Message::new(Role::Tool, r#"{"temp": 3}"#);
    result.tool_call_id = Some("t1".into());
    let req = ChatRequest {
        messages: vec![
            Message::new(Role::System, "be brief"),
            Message::new(Role::User, "weather?"),
            call_turn,
            result,
            Message::new(Role::User, "and tomorrow?"),
        ]
        .into(),
        max_tokens: Some(50),
        stop: vec!["END".into()],
        ..Default::default()
    };
    let call = Call::as_written(WireFormat::BedrockConverse, Upstream::default(), &req);
    let body = request_body(&req, &call);
    assert_eq!(body["system"], json!([{"text": "be brief"}]));
    assert_eq!(body["inferenceConfig"], json!({"maxTokens": 50, "stopSequences": ["END"]}));
    assert_eq!(body["toolConfig"]["tools"][0]["toolSpec"]["name"], "weather", "declared for the history");
    let roles: Vec<&str> =
        body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"], "the result and the next question share a turn");
    assert_eq!(body["messages"][1]["content"][0]["toolUse"]["input"], json!({"city": "Oslo"}));
    assert_eq!(body["messages"][2]["content"][0]["toolResult"]["content"][0]["json"], json!({"temp": 3}));

    let declared = ChatRequest {
        tools: vec![Tool {
            name: "weather".into(),
            description: Some("the weather".into()),
            parameters: json!({"type": "object"}).into(),
        }],
        tool_choice: Some(ToolChoice::Function("weather".into())),
        ..req.clone()
    };
    let body = request_body(&declared, &call);
    assert_eq!(body["toolConfig"]["toolChoice"], json!({"tool": {"name": "weather"}}));
}

#[test]
fn models_that_cache_get_at_most_four_cache_points() {
    let req = ChatRequest {
        messages: ["be brief", "a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Message::new(
                    if i == 0 {
                        Role::System
                    } else if i % 2 == 1 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    *t,
                )
            })
            .collect(),
        tools: vec![Tool {
            name: "weather".into(),
            description: None,
            parameters: json!({"type": "object"}).into(),
        }],
        ..Default::default()
    };
    let placement = CachePlacement { system: true, tools: true, last_turns: 4 };
    let points = |model: &str| {
        let call = Call {
            model,
            cache_placement: Some(placement),
            ..Call::as_written(WireFormat::BedrockConverse, Upstream::default(), &req)
        };
        request_body(&req, &call).to_string().matches("cachePoint").count()
    };
    assert_eq!(points("amazon.nova-pro-v1:0"), 4, "tools, system and two user turns: four in all");
    assert_eq!(points("meta.llama3-3-70b-instruct-v1:0"), 0, "a model that does not cache gets none");
}

#[tokio::test]
async fn a_stream_folds_tool_input_and_ends_with_its_usage() {
    let sse = "event: messageStart\ndata: {\"role\":\"assistant\"}\n\n\
        event: contentBlockDelta\ndata: {\"contentBlockIndex\":0,\"delta\":{\"text\":\"Let me check\"}}\n\n\
        event: contentBlockStop\ndata: {\"contentBlockIndex\":0}\n\n\
        event: contentBlockStart\ndata: {\"contentBlockIndex\":1,\"start\":{\"toolUse\":{\"toolUseId\":\"tooluse_1\",\"name\":\"weather\"}}}\n\n\
        event: contentBlockDelta\ndata: {\"contentBlockIndex\":1,\"delta\":{\"toolUse\":{\"input\":\"{\\\"city\\\":\"}}}\n\n\
        event: contentBlockDelta\ndata: {\"contentBlockIndex\":1,\"delta\":{\"toolUse\":{\"input\":\"\\\"Oslo\\\"}\"}}}\n\n\
        event: messageStop\ndata: {\"stopReason\":\"tool_use\"}\n\n\
        event: metadata\ndata: {\"usage\":{\"inputTokens\":10,\"outputTokens\":7,\"cacheReadInputTokens\":4},\"metrics\":{\"latencyMs\":90}}\n\n";
    let events: Vec<Event> =
        run_sse(sse, ConverseStream::default).await.into_iter().map(Result::unwrap).collect();
    let arguments: String = events
        .iter()
        .filter_map(|e| {
            if let Event::ToolCallDelta { arguments, .. } = e {
                Some(arguments.as_str())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(arguments, r#"{"city":"Oslo"}"#);
    assert_eq!(events[0], Event::TextDelta("Let me check".into()));
    assert!(events.contains(&Event::Usage(Usage {
        input_tokens: 14,
        cached_input_tokens: 4,
        output_tokens: 7,
        cache_write_tokens: 0
    })));
    assert_eq!(events.last(), Some(&Event::Finish(FinishReason::ToolCalls)));
    let cut = run_sse(
        "event: contentBlockDelta\ndata: {\"contentBlockIndex\":0,\"delta\":{\"text\":\"hi\"}}\n\n",
        ConverseStream::default,
    )
    .await;
    assert_eq!(cut.last().unwrap().as_ref().unwrap_err().class, ErrorClass::StreamBroken);
}
