use super::*;
use crate::canonical::{ErrorClass, UpstreamError};
use futures::StreamExt;
use serde_json::Map;

fn head() -> Head {
    let mut echo = Map::new();
    echo.insert("instructions".into(), json!("be brief"));
    Head {
        id: "resp_1".into(),
        created_at: 1764547200,
        model: "summarise".into(),
        echo,
        tools: Default::default(),
    }
}

/// The SSE body the handler writes for `events`: each event's data, after checking that its
/// `event:` line names its `type` and that sequence numbers count up from 0.
async fn streamed(events: Vec<Result<Event, UpstreamError>>) -> Vec<Value> {
    let encoder = Encoder::new(head(), true);
    let body =
        crate::api::responses::sse_body(Box::pin(futures::stream::iter(events)), "local".into(), encoder, ());
    let bytes: Vec<u8> = body.map(|frame| frame.unwrap().to_vec()).concat().await;
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.ends_with("\n\n"), "{text:?}");
    let events: Vec<Value> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (kind, data) = e.split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(kind.strip_prefix("event: "), data["type"].as_str(), "{e}");
            data
        })
        .collect();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], i, "{event}");
    }
    events
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn text(t: &str) -> Result<Event, UpstreamError> {
    Ok(Event::TextDelta(t.into()))
}

const USAGE: Usage =
    Usage { input_tokens: 7, cached_input_tokens: 2, output_tokens: 3, cache_write_tokens: 0 };

#[tokio::test]
async fn a_text_answer_streams_in_openais_order() {
    let events = streamed(vec![
        text("Hel"),
        text("lo"),
        Ok(Event::Usage(USAGE)),
        Ok(Event::Finish(FinishReason::Stop)),
    ])
    .await;
    assert_eq!(
        types(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &events[0]["response"];
    assert_eq!((created["id"].as_str(), created["status"].as_str()), (Some("resp_1"), Some("in_progress")));
    assert_eq!(created["output"], json!([]));
    assert_eq!(created["instructions"], "be brief", "the request's settings are echoed");
    let item_id = events[2]["item"]["id"].as_str().unwrap();
    assert!(item_id.starts_with("msg_"), "{item_id}");
    assert_eq!(events[2]["item"]["status"], "in_progress");
    for event in &events[3..9] {
        assert_eq!(event["item_id"].as_str().unwrap_or(item_id), item_id);
        assert_eq!(event["output_index"], 0);
    }
    assert_eq!((events[4]["delta"].as_str(), events[5]["delta"].as_str()), (Some("Hel"), Some("lo")));
    assert_eq!(events[6]["text"], "Hello");
    assert_eq!(
        events[7]["part"],
        json!({"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []})
    );
    let done = &events[9]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["model"], "summarise");
    assert_eq!(done["object"], "response");
    assert_eq!(done["output"], json!([events[8]["item"]]));
    assert_eq!(done["output"][0]["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "Hello");
    assert_eq!(
        done["usage"],
        json!({"input_tokens": 7, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 3,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10})
    );
    assert_eq!(done["error"], Value::Null);
}

#[tokio::test]
async fn text_then_function_calls_are_items_in_turn() {
    let call = |index: u32, id: Option<&str>, name: Option<&str>, arguments: &str| {
        Ok(Event::ToolCallDelta {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: arguments.into(),
        })
    };
    let events = streamed(vec![
        text("Let me look."),
        call(0, Some("call_a"), Some("lookup"), "{\"q\""),
        call(0, None, None, ":1}"),
        call(1, Some("call_b"), Some("fetch"), ""),
        call(1, None, None, "{}"),
        Ok(Event::Finish(FinishReason::ToolCalls)),
    ])
    .await;
    let calls: Vec<&str> = types(&events).into_iter().skip(8).collect();
    assert_eq!(
        calls,
        [
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let added = &events[8];
    assert_eq!(added["output_index"], 1);
    assert_eq!(added["item"]["type"], "function_call");
    assert_eq!(added["item"]["arguments"], "");
    assert!(added["item"]["id"].as_str().unwrap().starts_with("fc_"));
    assert_eq!(events[11]["arguments"], "{\"q\":1}");
    let output = &events.last().unwrap()["response"]["output"];
    assert_eq!(output.as_array().unwrap().len(), 3);
    assert_eq!(output[0]["type"], "message");
    assert_eq!(
        (&output[1]["call_id"], &output[1]["name"], &output[1]["arguments"], &output[1]["status"]),
        (&json!("call_a"), &json!("lookup"), &json!("{\"q\":1}"), &json!("completed"))
    );
    assert_eq!((&output[2]["call_id"], &output[2]["arguments"]), (&json!("call_b"), &json!("{}")));
    assert_eq!(events.last().unwrap()["response"]["usage"], Value::Null, "no usage was reported");
}

#[tokio::test]
async fn an_answer_cut_at_the_token_limit_is_incomplete() {
    let events =
        streamed(vec![text("partial"), Ok(Event::Finish(FinishReason::Length)), Ok(Event::Usage(USAGE))])
            .await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(last["response"]["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!(last["response"]["output"][0]["status"], "incomplete");
    assert_eq!(last["response"]["usage"]["output_tokens"], 3);
}

#[tokio::test]
async fn a_break_after_the_first_token_ends_with_response_failed_then_error() {
    let broken = Err(UpstreamError::new(ErrorClass::StreamBroken, None, "connection reset"));
    let events = streamed(vec![text("part"), broken]).await;
    assert_eq!(
        types(&events)[4..],
        ["response.output_text.delta", "response.failed", "error"],
        "no done events, no completed: {events:#?}"
    );
    let failed = &events[5]["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "server_error");
    assert!(failed["error"]["message"].as_str().unwrap().contains("connection reset"), "{failed}");
    assert_eq!(failed["output"][0]["status"], "incomplete");
    assert_eq!(failed["output"][0]["content"][0]["text"], "part");
    let error = &events[6];
    assert_eq!(error["code"], "stream_broken");
    assert_eq!(error["message"], failed["error"]["message"]);
}

#[test]
fn a_whole_answer_is_the_same_response_without_frames() {
    let mut encoder = Encoder::new(head(), false);
    for event in [Event::TextDelta("Hi".into()), Event::Usage(USAGE), Event::Finish(FinishReason::Length)] {
        encoder.add(&event);
    }
    let response = encoder.finish();
    assert_eq!(encoder.pending(), 0, "nothing is written for a whole answer");
    assert_eq!(response["status"], "incomplete");
    assert_eq!(response["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(response["output"][0]["content"][0]["text"], "Hi");
    assert_eq!(response["usage"]["total_tokens"], 10);
    assert_eq!(response["instructions"], "be brief");
}

#[test]
fn calls_are_written_back_under_the_clients_own_names_and_shapes() {
    let tools = [
        json!({"type": "namespace", "name": "functions", "tools": [
            {"type": "custom", "name": "exec", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}]}),
        json!({"type": "namespace", "name": "clock", "tools": [
            {"type": "function", "name": "sleep", "parameters": {"type": "object"}}]}),
    ];
    let toolset = super::super::toolset::Toolset::of_tree(&json!(tools)).unwrap();
    let mut encoder = Encoder::new(Head { tools: std::sync::Arc::new(toolset), ..head() }, true);
    encoder.start();
    let call = |index, id: &str, name: &str, arguments: &str| Event::ToolCallDelta {
        index,
        id: Some(id.into()),
        name: Some(name.into()),
        arguments: arguments.into(),
    };
    encoder.add(&call(0, "c1", "exec", r#"{"input": "print("#));
    encoder.add(&Event::ToolCallDelta { index: 0, id: None, name: None, arguments: r#"1)"}"#.into() });
    encoder.add(&call(1, "c2", "sleep", r#"{"duration_ms": 1}"#));
    encoder.add(&Event::Finish(FinishReason::ToolCalls));
    let response = encoder.finish();
    let output = &response["output"];
    assert_eq!(output[0]["type"], "custom_tool_call");
    assert_eq!(
        (&output[0]["name"], &output[0]["namespace"], &output[0]["input"]),
        (&json!("exec"), &json!("functions"), &json!("print(1)"))
    );
    assert_eq!(output[1]["type"], "function_call");
    assert_eq!((&output[1]["name"], &output[1]["namespace"]), (&json!("sleep"), &json!("clock")));
    assert_eq!(output[1]["arguments"], r#"{"duration_ms": 1}"#);
    let frames = String::from_utf8(encoder.take_frames()).unwrap();
    assert!(frames.contains("event: response.custom_tool_call_input.done"), "{frames}");
    assert!(!frames.contains(r#""delta":"{\"input\""#), "a custom tool's input is written whole: {frames}");
}
