//! Tests of the anthropic adapter against the recorded fixtures in tests/fixtures/: the request
//! it writes (`request`) and the responses and events it reads (`response`), as units. Both over
//! HTTP through `adapter::send` are the cases of tests/fixtures/anthropic/cases/. This file holds
//! what they share.
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::adapter::provider::anthropic::Anthropic;
use crate::adapter::transport::http::testing::run_sse;
use crate::adapter::{Call, WireFormat};
use crate::canonical::{
    ErrorClass, Event, FinishReason, Image, Message, ResponseFormat, Role, ToolChoice, Usage,
};
use reqwest::header::HeaderMap;

mod request;
mod response;

/// The body Anthropic gets for a call made as the request is written.
fn request_body(req: &ChatRequest) -> Value {
    let call = Call::as_written(WireFormat::Claude(&Anthropic), Default::default(), req);
    let fields = Anthropic.fields(call.model, call.stream, &[]);
    serde_json::to_value(super::request::body(req, &call, fields, Purpose::Answer)).unwrap()
}

/// The body a client's own Messages request becomes on `call` for a host whose thinking
/// `signer` signs (`None`: a node), with the call's model and stream flag beside it.
pub(crate) fn written(req: &ChatRequest, call: &Call, client: &NativeRequest, signer: Option<&str>) -> Value {
    let fields = Anthropic.fields(call.model, call.stream, &[]);
    serde_json::to_value(native::body(req, call, client, signer, fields, Purpose::Answer)).unwrap()
}

/// [`written`] for a client's Messages `body` made as written, to `signer` (`""`: a node).
pub(crate) fn as_written(signer: &str, body: Value) -> Value {
    let client = NativeRequest::of_tree(crate::canonical::Dialect::AnthropicMessages, &body);
    let req = ChatRequest::default();
    let call = Call::as_written(WireFormat::Claude(&Anthropic), Default::default(), &req);
    written(&req, &call, &client, (!signer.is_empty()).then_some(signer))
}

fn text(s: &str) -> Event {
    Event::TextDelta(s.to_string())
}
