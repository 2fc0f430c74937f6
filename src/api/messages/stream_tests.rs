use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use super::*;
use crate::canonical::{ErrorClass, UpstreamError};

async fn events_of(events: Vec<Result<Event, UpstreamError>>) -> Vec<(String, Value)> {
    let head = Head { id: "msg_1".into(), model: "claude-sonnet-4-6".into(), estimated_input_tokens: 12 };
    let stream: EventStream = Box::pin(futures::stream::iter(events));
    let bytes: Vec<u8> =
        frames(stream, "local".into(), head, (), PING_EVERY).map(|f| f.unwrap().to_vec()).concat().await;
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e.split_once('\n').unwrap();
            let name = name.strip_prefix("event: ").unwrap().to_string();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            if name != "error" {
                assert_eq!(data["type"], name.as_str(), "the data's type is the event's name");
            }
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn translated_events_follow_anthropics_sequence() {
    let events = events_of(vec![
        Ok(Event::ReasoningDelta("hmm".into())),
        Ok(Event::TextDelta("Hel".into())),
        Ok(Event::TextDelta("lo".into())),
        Ok(Event::ToolCallDelta {
            index: 0,
            id: Some("call_1".into()),
            name: Some("get".into()),
            arguments: String::new(),
        }),
        Ok(Event::ToolCallDelta { index: 0, id: None, name: None, arguments: "{\"a\":1}".into() }),
        Ok(Event::Usage(Usage {
            input_tokens: 30,
            cached_input_tokens: 10,
            output_tokens: 7,
            cache_write_tokens: 5,
        })),
        Ok(Event::Finish(FinishReason::ToolCalls)),
    ])
    .await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let start = &events[0].1["message"];
    assert_eq!(
        (start["model"].clone(), start["usage"]["input_tokens"].clone()),
        (json!("claude-sonnet-4-6"), json!(12))
    );
    assert_eq!(events[2].1["content_block"], json!({"type": "thinking", "thinking": ""}));
    assert_eq!(events[3].1["delta"], json!({"type": "thinking_delta", "thinking": "hmm"}));
    assert_eq!(events[5].1["index"], 1);
    assert_eq!(events[7].1["delta"]["text"], "lo");
    assert_eq!(
        events[9].1["content_block"],
        json!({"type": "tool_use", "id": "call_1", "name": "get", "input": {}})
    );
    assert_eq!(events[10].1["delta"], json!({"type": "input_json_delta", "partial_json": "{\"a\":1}"}));
    assert_eq!(events[12].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        events[12].1["usage"],
        json!({"input_tokens": 15, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 5, "output_tokens": 7})
    );
}

#[tokio::test]
async fn a_failure_after_the_first_token_ends_with_an_error_event() {
    let events = events_of(vec![
        Ok(Event::TextDelta("partial".into())),
        Err(UpstreamError::new(ErrorClass::StreamBroken, None, "connection reset")),
    ])
    .await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "ping", "content_block_start", "content_block_delta", "error"]);
    let error = &events[4].1;
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["message"], "connection reset");
    assert!(!names.contains(&"message_stop"), "a broken answer never looks whole");
}

#[tokio::test]
async fn relayed_events_pass_as_they_came_with_the_clients_model() {
    let native = |name: &str, data: Value| {
        Ok(Event::Native(NativeEvent {
            name: name.to_string().into(),
            data: serde_json::to_vec(&data).unwrap().into(),
            output: false,
        }))
    };
    let events = events_of(vec![
        native("message_start", json!({"type": "message_start", "message": {"id": "msg_up", "model": "claude-opus-4-5", "content": []}})),
        native("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}})),
        Ok(Event::ReasoningDelta("not written twice".into())),
        native("message_stop", json!({"type": "message_stop"})),
    ])
    .await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "content_block_delta", "message_stop"]);
    assert_eq!(events[0].1["message"]["model"], "claude-sonnet-4-6");
    assert_eq!(events[0].1["message"]["id"], "msg_up");
    assert_eq!(events[1].1["delta"]["signature"], "sig");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_upstream_gets_pings() {
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Event, UpstreamError>>();
    tx.unbounded_send(Ok(Event::TextDelta("a".into()))).unwrap();
    let head = Head { id: "msg_1".into(), model: "m".into(), estimated_input_tokens: 1 };
    let mut frames = Box::pin(frames(Box::pin(rx), "local".into(), head, (), Duration::from_secs(10)));
    let first = parse(&frames.next().await.unwrap().unwrap());
    assert_eq!(first.last().unwrap().0, "content_block_delta");
    let quiet = parse(&frames.next().await.unwrap().unwrap());
    assert_eq!(quiet, [("ping".to_string(), json!({"type": "ping"}))]);
    tx.unbounded_send(Ok(Event::TextDelta("b".into()))).unwrap();
    drop(tx);
    let rest: Vec<u8> = frames.map(|f| f.unwrap().to_vec()).concat().await;
    let names: Vec<String> = parse(&rest).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
}
