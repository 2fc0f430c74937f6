//! The two kinds of span a request makes: one server span for the request as the client sees
//! it (from the first byte in to the last byte of the answer out), and one client span per
//! upstream call dispatch makes, a child of the first. Each is a typed handle with setters for
//! what the router learns along the way, so no caller writes an attribute name or a value the
//! conventions would not recognise, and nothing but names, ids, counts and classes goes in.

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use super::names::*;
use crate::canonical::{ErrorClass, Operation, Usage};
use crate::config::BackendKind;

/// The server span of one request. Clones share the span; it ends at [`RequestSpan::end`] (the
/// API ends it when the answer's body is done) or when the last clone is gone.
#[derive(Clone)]
pub struct RequestSpan {
    cx: Context,
    tracer: SdkTracer,
}

/// Where one call goes (or where the request was served), as the spans describe it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub backend: &'a str,
    pub kind: BackendKind,
    pub node: &'a str,
    /// The model the backend is asked for.
    pub model: &'a str,
    /// Which call of the request this is (1 for the first); on the server span, how many
    /// calls were made.
    pub attempt: u32,
    /// Why the fleet did not serve it, when a hosted backend is called instead.
    pub spill: Option<&'static str>,
}

impl Target<'_> {
    /// Where it went: provider, backend, node, attempt, and the spill reason when there is one.
    fn attributes(&self) -> Vec<KeyValue> {
        let mut attributes = vec![
            KeyValue::new(PROVIDER, crate::adapter::provider::of(self.kind).system()),
            KeyValue::new(BACKEND, self.backend.to_string()),
            KeyValue::new(NODE, self.node.to_string()),
            KeyValue::new(ATTEMPT, i64::from(self.attempt)),
        ];
        attributes.extend(self.spill.map(|reason| KeyValue::new(SPILL_REASON, reason)));
        attributes
    }
}

impl RequestSpan {
    pub(super) fn start(
        tracer: &SdkTracer,
        parent: Option<Context>,
        method: &str,
        route: &str,
    ) -> RequestSpan {
        let parent = parent.unwrap_or_default();
        let span = tracer
            .span_builder(format!("{method} {route}"))
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new(HTTP_METHOD, method.to_string()),
                KeyValue::new(HTTP_ROUTE, route.to_string()),
            ])
            .start_with_context(tracer, &parent);
        RequestSpan { cx: parent.with_span(span), tracer: tracer.clone() }
    }

    /// The trace's id, as 32 hex digits.
    pub fn trace_id(&self) -> String {
        self.cx.span().span_context().trace_id().to_string()
    }

    /// The request's id (`x-request-id`), to find its log lines from the trace.
    pub fn request_id(&self, id: &str) {
        self.cx.span().set_attribute(KeyValue::new(REQUEST_ID, id.to_string()));
    }

    /// The request names `model`, which is task `task`, for `operation`: the span is named
    /// `{operation} {task}`, as the GenAI conventions name a span `{operation} {model}`.
    pub fn routed(&self, operation: &Operation, model: &str, task: &str) {
        let op = super::names::operation(operation);
        let span = self.cx.span();
        span.update_name(format!("{op} {task}"));
        span.set_attribute(KeyValue::new(OPERATION, op));
        span.set_attribute(KeyValue::new(REQUEST_MODEL, model.to_string()));
        span.set_attribute(KeyValue::new(TASK, task.to_string()));
    }

    /// The request was committed to `target` (its `attempt`: the calls made).
    pub fn served(&self, target: &Target<'_>) {
        let span = self.cx.span();
        // The request's own model stays what the client named; the served one is the answer's.
        for kv in target.attributes() {
            span.set_attribute(kv);
        }
        span.set_attribute(KeyValue::new(RESPONSE_MODEL, target.model.to_string()));
    }

    /// A client span for one call to `target`, a child of this one, for task `task` doing
    /// `operation`.
    pub fn attempt(&self, target: &Target<'_>, task: &str, operation: &Operation) -> AttemptSpan {
        let op = super::names::operation(operation);
        let mut attributes = target.attributes();
        attributes.push(KeyValue::new(REQUEST_MODEL, target.model.to_string()));
        attributes.push(KeyValue::new(OPERATION, op));
        attributes.push(KeyValue::new(TASK, task.to_string()));
        let span = self
            .tracer
            .span_builder(format!("{op} {}", target.model))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.cx);
        AttemptSpan { cx: self.cx.with_span(span) }
    }

    /// The answer's HTTP status; a 5xx marks the span failed (`error.type`: the status).
    pub fn status(&self, status: u16) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(HTTP_STATUS, i64::from(status)));
        if status >= 500 {
            span.set_attribute(KeyValue::new(ERROR_TYPE, status.to_string()));
            span.set_status(Status::error(format!("answered {status}")));
        }
    }

    /// What the answer's stream told: usage, finish reasons, and the class of the error it
    /// ended with, if it broke.
    pub(super) fn answered(&self, usage: &Usage, finish_reasons: &[&'static str], error: Option<&str>) {
        answered(&self.cx, usage, finish_reasons, error);
    }

    pub fn end(&self) {
        self.cx.span().end();
    }
}

/// Equal when they are the same span.
impl PartialEq for RequestSpan {
    fn eq(&self, other: &Self) -> bool {
        self.cx.span().span_context() == other.cx.span().span_context()
    }
}

impl std::fmt::Debug for RequestSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let span = self.cx.span();
        let sc = span.span_context();
        write!(f, "RequestSpan({}/{})", sc.trace_id(), sc.span_id())
    }
}

/// The client span of one upstream call. It ends when dropped.
pub struct AttemptSpan {
    cx: Context,
}

impl AttemptSpan {
    /// The headers that carry this span to the upstream (`traceparent`, `tracestate`).
    pub fn headers(&self) -> Vec<(http::HeaderName, String)> {
        super::propagation::headers(&self.cx)
    }

    /// The call failed before its first token, with an error of `class` (and `status`, when
    /// the upstream answered one).
    pub fn failed(&self, class: ErrorClass, status: Option<u16>) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(ERROR_TYPE, class.as_str()));
        if let Some(status) = status {
            span.set_attribute(KeyValue::new(HTTP_STATUS, i64::from(status)));
        }
        span.set_status(Status::error(class.as_str()));
    }

    /// The call's first token came: the request is this call's.
    pub fn served(&self, model: &str) {
        self.cx.span().set_attribute(KeyValue::new(RESPONSE_MODEL, model.to_string()));
    }

    pub(super) fn answered(&self, usage: &Usage, finish_reasons: &[&'static str], error: Option<&str>) {
        answered(&self.cx, usage, finish_reasons, error);
    }
}

impl Drop for AttemptSpan {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

fn answered(cx: &Context, usage: &Usage, finish_reasons: &[&'static str], error: Option<&str>) {
    let span = cx.span();
    if usage.input_tokens > 0 || usage.output_tokens > 0 {
        span.set_attribute(KeyValue::new(INPUT_TOKENS, i64::from(usage.input_tokens)));
        span.set_attribute(KeyValue::new(OUTPUT_TOKENS, i64::from(usage.output_tokens)));
        span.set_attribute(KeyValue::new(CACHE_READ_TOKENS, i64::from(usage.cached_input_tokens)));
    }
    if !finish_reasons.is_empty() {
        let reasons = finish_reasons.iter().map(|r| opentelemetry::StringValue::from(*r)).collect();
        let reasons = opentelemetry::Value::Array(opentelemetry::Array::String(reasons));
        span.set_attribute(KeyValue::new(FINISH_REASONS, reasons));
    }
    if let Some(error) = error {
        span.set_attribute(KeyValue::new(ERROR_TYPE, error.to_string()));
        if error != CANCELLED {
            span.set_status(Status::error(error.to_string()));
        }
    }
}
