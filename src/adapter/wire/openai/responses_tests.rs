use super::*;
use crate::adapter::transport::http::testing::run_sse;
use crate::adapter::{Call, Upstream, WireFormat};
use serde_json::json;

fn sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect()
}

fn opening() -> Vec<Value> {
    let response = json!({"id": "resp_up", "object": "response", "status": "in_progress", "model": "gpt-5.6",
                          "output": [], "previous_response_id": "resp_prev", "store": true});
    vec![
        json!({"type": "response.created", "sequence_number": 0, "response": response}),
        json!({"type": "response.in_progress", "sequence_number": 1, "response": response}),
    ]
}

fn completed(status: &str, extra: Value) -> Value {
    let mut response = json!({"id": "resp_up", "status": status, "output": [],
        "usage": {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3}});
    if let (Some(r), Value::Object(extra)) = (response.as_object_mut(), extra) {
        r.extend(extra);
    }
    json!({"type": format!("response.{status}"), "sequence_number": 9, "response": response})
}

fn text_answer() -> Vec<Value> {
    let mut events = opening();
    events.extend([
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
        json!({"type": "response.content_part.added", "output_index": 0, "content_index": 0,
               "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hel"}),
        json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "lo"}),
        json!({"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": "Hello"}),
        completed("completed", json!({})),
    ]);
    events
}

fn canonical(events: &[Result<Event, UpstreamError>]) -> Vec<Event> {
    events.iter().filter_map(|e| e.clone().ok()).filter(|e| !matches!(e, Event::Native(_))).collect()
}

const USAGE: Usage =
    Usage { input_tokens: 9, cached_input_tokens: 4, output_tokens: 3, cache_write_tokens: 0 };

#[tokio::test]
async fn a_text_stream_is_read_and_nothing_before_the_first_delta_is_output() {
    let events = run_sse(&sse(&text_answer()), || ResponsesStream::new(Relaying::Off)).await;
    assert_eq!(
        canonical(&events),
        [
            Event::TextDelta("Hel".into()),
            Event::TextDelta("lo".into()),
            Event::Usage(USAGE),
            Event::Finish(FinishReason::Stop)
        ],
        "the done event's text is not repeated"
    );
    assert!(events.iter().all(|e| !matches!(e, Ok(Event::Native(_)))), "no relay unless asked");
}

#[tokio::test]
async fn relayed_each_event_comes_first_as_it_came() {
    let upstream = text_answer();
    let events = run_sse(&sse(&upstream), || ResponsesStream::new(Relaying::WithEvents)).await;
    let natives: Vec<&NativeEvent> = events
        .iter()
        .filter_map(|e| match e {
            Ok(Event::Native(n)) => Some(n),
            _ => None,
        })
        .collect();
    assert_eq!(natives.len(), upstream.len());
    for (native, sent) in natives.iter().zip(&upstream) {
        assert_eq!(*native.name, *sent["type"].as_str().unwrap());
        assert_eq!(serde_json::from_slice::<Value>(&native.data).unwrap(), *sent);
    }
    // Opening events are relayed but are not output: dispatch has not committed yet.
    let first_output = events.iter().position(|e| e.as_ref().is_ok_and(Event::is_output)).unwrap();
    let before: Vec<&str> = events[..first_output]
        .iter()
        .filter_map(|e| match e {
            Ok(Event::Native(n)) => Some(&*n.name),
            _ => None,
        })
        .collect();
    assert_eq!(
        before,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta"
        ]
    );
}

#[tokio::test]
async fn a_function_call_takes_its_id_and_name_from_the_added_item() {
    let mut upstream = opening();
    upstream.extend([
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "fc_1",
               "type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{\"city\""}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": ":\"Paris\"}"}),
        json!({"type": "response.function_call_arguments.done", "output_index": 0,
               "arguments": "{\"city\":\"Paris\"}"}),
        // A second call whose arguments come only whole.
        json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "fc_2",
               "type": "function_call", "call_id": "call_8", "name": "get_time", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.done", "output_index": 1, "arguments": "{}"}),
        completed("completed", json!({})),
    ]);
    let events = canonical(&run_sse(&sse(&upstream), || ResponsesStream::new(Relaying::WithEvents)).await);
    let call = |index, id: Option<&str>, name: Option<&str>, arguments: &str| Event::ToolCallDelta {
        index,
        id: id.map(str::to_string),
        name: name.map(str::to_string),
        arguments: arguments.into(),
    };
    assert_eq!(
        events,
        [
            call(0, Some("call_7"), Some("get_weather"), ""),
            call(0, None, None, "{\"city\""),
            call(0, None, None, ":\"Paris\"}"),
            call(1, Some("call_8"), Some("get_time"), ""),
            call(1, None, None, "{}"),
            Event::Usage(USAGE),
            Event::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn failures_are_classified_and_never_relayed() {
    // Failed right after opening: an error before any output, so dispatch has not committed.
    let mut upstream = opening();
    upstream.push(json!({"type": "response.failed", "response": {"id": "resp_up", "status": "failed",
        "error": {"code": "server_error", "message": "The server had an error"}}}));
    let events = run_sse(&sse(&upstream), || ResponsesStream::new(Relaying::WithEvents)).await;
    assert!(events.iter().all(|e| !e.as_ref().is_ok_and(Event::is_output)));
    let error = events.last().unwrap().clone().unwrap_err();
    assert_eq!((error.class, error.message.as_str()), (ErrorClass::ServerError, "The server had an error"));
    let relayed = events.iter().filter(|e| matches!(e, Ok(Event::Native(_)))).count();
    assert_eq!(relayed, 2, "response.failed is the door's to write");

    let mut upstream = opening();
    upstream
        .push(json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null}));
    let error = run_sse(&sse(&upstream), || ResponsesStream::new(Relaying::WithEvents))
        .await
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::RateLimited);
    assert!(error.class.may_fail_over());

    let error =
        run_sse(&sse(&opening()), || ResponsesStream::new(Relaying::Off)).await.pop().unwrap().unwrap_err();
    assert_eq!(error.class, ErrorClass::StreamBroken, "ended without response.completed: {error:?}");
}

#[test]
fn a_whole_response_is_read_and_relayed_whole() {
    let body = json!({"id": "resp_up", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Hi"}, {"type": "refusal", "refusal": "no"}]},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}],
        "usage": {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3}});
    let events = parse_response_relayed(body.to_string().as_bytes(), Relaying::WithEvents).unwrap();
    assert!(matches!(&events[0], Event::Native(n) if &*n.name == "response"));
    assert_eq!(
        events[1..],
        [
            Event::ReasoningDelta("think".into()),
            Event::TextDelta("Hi".into()),
            Event::TextDelta("no".into()),
            Event::ToolCallDelta {
                index: 0,
                id: Some("call_1".into()),
                name: Some("f".into()),
                arguments: "{}".into()
            },
            Event::Usage(USAGE),
            Event::Finish(FinishReason::Length),
        ]
    );
    let failed =
        json!({"status": "failed", "error": {"code": "invalid_prompt", "message": "bad"}, "output": []});
    assert_eq!(parse_response(failed.to_string().as_bytes()).unwrap_err().class, ErrorClass::InvalidRequest);
}

fn client(body: Value) -> NativeRequest {
    NativeRequest::of_tree(Dialect::OpenAiResponses, &body)
}

#[test]
fn the_variant_leads_the_clients_instructions_and_no_member_is_written_twice() {
    let native =
        client(json!({"model": "t", "instructions": "be brief", "input": "hi", "max_output_tokens": 9000}));
    let req = ChatRequest { model: "gpt-5.6".into(), max_tokens: None, ..Default::default() };
    let call =
        Call::as_written(WireFormat::OpenAi, Upstream::default(), &req).with_variant(Some("Use JSON."));
    let written = serde_json::to_string(&ResponsesBody::of(&req, &call, &native)).unwrap();
    for member in ["\"model\"", "\"instructions\"", "\"max_output_tokens\"", "\"stream\""] {
        assert_eq!(written.matches(member).count(), 1, "{member} once in {written}");
    }
    let sent: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(sent["instructions"], "Use JSON.\n\nbe brief");
    assert_eq!(sent["max_output_tokens"], 9000, "the client's own cap stays when the task sets none");
    assert_eq!((sent["model"].as_str(), sent["input"].as_str()), (Some("gpt-5.6"), Some("hi")));
}

#[tokio::test]
async fn a_request_without_the_clients_responses_body_is_refused_before_any_call() {
    let req = ChatRequest { model: "gpt-5.6".into(), stream: true, ..Default::default() };
    let call = Call::as_written(WireFormat::OpenAi, Upstream::default(), &req);
    let refused = send(&reqwest::Client::new().into(), &call, &req).await.err().unwrap();
    assert_eq!(refused.class, ErrorClass::InvalidRequest);
}
