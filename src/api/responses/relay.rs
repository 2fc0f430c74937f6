//! A Responses answer relayed from OpenAI itself (a request pinned there for the state OpenAI
//! keeps): the backend's events are written as they came, its response id, stored items and
//! sequence numbers included, with only the Response object's `model` set to the task the
//! client named. A whole answer is OpenAI's own Response object, under the same rewrite.
//!
//! An upstream failure after the first token is written as OpenAI would: `response.failed`
//! (the response so far, `failed`, with the error) then `error`, numbered after the last
//! relayed event. Nothing here translates canonical events: that is `events.rs`.

use serde_json::{json, Value};

use crate::api::error::ApiError;
use crate::canonical::NativeEvent;

/// The relayed stream being written.
pub struct Relay {
    /// The task's name, the model every Response object says.
    model: String,
    frames: Vec<u8>,
    /// The upstream's Response object as last seen, with the items finished since.
    response: Value,
    next_sequence: u64,
}

/// `event`'s Response object, when it carries one (`response.created`, `…completed`, …).
fn response_of<'v>(name: &str, data: &'v mut Value) -> Option<&'v mut Value> {
    match name {
        // A whole answer: the object itself.
        "response" => Some(data),
        _ => data.get_mut("response").filter(|r| r.is_object()),
    }
}

/// The Response object that ends a relayed answer (a whole one, or a stream's last event), with
/// the task's name as its model.
pub(crate) fn final_response(event: &NativeEvent, model: &str) -> Option<Value> {
    if !matches!(&*event.name, "response" | "response.completed" | "response.incomplete") {
        return None;
    }
    let mut data: Value = serde_json::from_slice(&event.data).ok()?;
    let mut response = response_of(&event.name, &mut data)?.take();
    response["model"] = json!(model);
    Some(response)
}

impl Relay {
    pub fn new(model: String) -> Relay {
        Relay { model, frames: Vec::new(), response: json!({"output": []}), next_sequence: 0 }
    }

    /// How many SSE bytes are waiting to be taken.
    pub fn pending(&self) -> usize {
        self.frames.len()
    }

    /// The SSE bytes written since the last call.
    pub(crate) fn take_frames(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.frames)
    }

    /// One upstream event, as it came unless it carries a Response object (then with the
    /// task's name as its model).
    pub fn event(&mut self, event: &NativeEvent) {
        let Ok(mut data) = serde_json::from_slice::<Value>(&event.data) else {
            self.raw(event);
            return;
        };
        if let Some(n) = data.get("sequence_number").and_then(Value::as_u64) {
            self.next_sequence = n + 1;
        }
        if &*event.name == "response.output_item.done" {
            if let (Some(output), Some(item)) = (self.response["output"].as_array_mut(), data.get("item")) {
                output.push(item.clone());
            }
        }
        match response_of(&event.name, &mut data) {
            Some(response) => {
                response["model"] = json!(self.model);
                self.response = response.clone();
                write(&mut self.frames, &event.name, &data);
            }
            None => self.raw(event),
        }
    }

    fn raw(&mut self, event: &NativeEvent) {
        self.frames.extend_from_slice(b"event: ");
        self.frames.extend_from_slice(event.name.as_bytes());
        self.frames.extend_from_slice(b"\ndata: ");
        self.frames.extend_from_slice(&event.data);
        self.frames.extend_from_slice(b"\n\n");
    }

    /// The upstream broke after the answer started: `response.failed`, then `error`.
    pub fn fail(&mut self, error: &ApiError) {
        let body = error.body();
        let message = body["error"]["message"].clone();
        let failed_code = if error.status == 429 { "rate_limit_exceeded" } else { "server_error" };
        let mut response = self.response.take();
        response["status"] = json!("failed");
        response["error"] = json!({"code": failed_code, "message": message});
        response["model"] = json!(self.model);
        let failed =
            json!({"type": "response.failed", "sequence_number": self.next_sequence, "response": response});
        write(&mut self.frames, "response.failed", &failed);
        let error = json!({"type": "error", "sequence_number": self.next_sequence + 1,
                           "code": body["error"]["code"], "message": message,
                           "param": body["error"]["param"]});
        write(&mut self.frames, "error", &error);
        self.next_sequence += 2;
    }
}

fn write(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // A parsed JSON value always serialises.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error::ErrorCode;

    fn native(name: &str, data: Value) -> NativeEvent {
        NativeEvent {
            name: name.to_string().into(),
            data: data.to_string().into_bytes().into(),
            output: false,
        }
    }

    fn written(relay: &mut Relay) -> Vec<(String, Value)> {
        let text = String::from_utf8(relay.take_frames()).unwrap();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let data = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                (name.strip_prefix("event: ").unwrap().to_string(), data)
            })
            .collect()
    }

    #[test]
    fn events_go_as_they_came_with_the_tasks_name_as_model() {
        let mut relay = Relay::new("t".into());
        let created = json!({"type": "response.created", "sequence_number": 0,
                             "response": {"id": "resp_up", "model": "gpt-5.6"}});
        let delta = r#"{"type":"response.output_text.delta","sequence_number":1,"delta":"Hi","x":1}"#;
        relay.event(&native("response.created", created));
        relay.event(&NativeEvent {
            name: "response.output_text.delta".into(),
            data: delta.as_bytes().to_vec().into(),
            output: true,
        });
        let frames = String::from_utf8(relay.take_frames()).unwrap();
        assert!(
            frames.ends_with(&format!("event: response.output_text.delta\ndata: {delta}\n\n")),
            "{frames}"
        );
        let mut again = Relay::new("t".into());
        again.event(&native("response.created", json!({"response": {"id": "resp_up", "model": "gpt-5.6"}})));
        let (name, data) = written(&mut again).remove(0);
        assert_eq!((name.as_str(), data["response"]["model"].as_str()), ("response.created", Some("t")));
        assert_eq!(data["response"]["id"], "resp_up");
    }

    #[test]
    fn a_break_is_written_as_openai_would_after_the_last_event() {
        let mut relay = Relay::new("t".into());
        relay.event(&native(
            "response.in_progress",
            json!({"sequence_number": 1,
            "response": {"id": "resp_up", "status": "in_progress", "model": "gpt-5.6", "output": []}}),
        ));
        let item =
            json!({"id": "msg_1", "type": "message", "content": [{"type": "output_text", "text": "Hi"}]});
        relay.event(&native("response.output_item.done", json!({"sequence_number": 5, "item": item})));
        written(&mut relay);
        relay.fail(&ApiError::new(ErrorCode::AllBackendsFailed, "backend `hosted` broke"));
        let events = written(&mut relay);
        assert_eq!(events[0].0, "response.failed");
        let failed = &events[0].1;
        assert_eq!(
            (failed["sequence_number"].as_u64(), failed["response"]["id"].as_str()),
            (Some(6), Some("resp_up"))
        );
        assert_eq!(failed["response"]["status"], "failed");
        assert_eq!(failed["response"]["output"][0], item);
        assert_eq!((events[1].0.as_str(), events[1].1["sequence_number"].as_u64()), ("error", Some(7)));
    }

    #[test]
    fn the_final_response_is_the_whole_answer_or_the_streams_last_event() {
        let whole = native("response", json!({"id": "resp_up", "model": "gpt-5.6", "status": "completed"}));
        assert_eq!(final_response(&whole, "t").unwrap()["model"], "t");
        let done = native("response.completed", json!({"response": {"id": "resp_up", "model": "gpt-5.6"}}));
        assert_eq!(final_response(&done, "t").unwrap()["id"], "resp_up");
        assert!(final_response(&native("response.created", json!({"response": {}})), "t").is_none());
    }
}
