//! W3C trace context on the wire: the parent a client's `traceparent` (and `tracestate`)
//! names, and the headers that carry an attempt's span to its upstream. A missing or
//! malformed `traceparent` is no error: the request starts a trace of its own.
//!
//! Parsing and formatting are the SDK's `TraceContextPropagator`; this file only adapts it
//! to the header types the router uses.

use http::{HeaderMap, HeaderName};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The remote parent named by the request's headers, if they name a valid one.
pub fn parent(headers: &HeaderMap) -> Option<Context> {
    let traceparent = headers.get("traceparent")?.to_str().ok()?;
    if !well_formed(traceparent.trim()) {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Field widths and lowercase hex as the W3C grammar has them (the SDK's parser takes a short
/// id as one with leading zeros, and a `+` sign).
fn well_formed(traceparent: &str) -> bool {
    let hex = |field: &str, len: usize| {
        field.len() == len && field.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut fields = traceparent.split('-');
    let widths = [2, 32, 16, 2];
    widths.iter().all(|&len| fields.next().is_some_and(|f| hex(f, len)))
}

/// The headers that make the span in `cx` the parent of what the receiver does:
/// `traceparent`, and `tracestate` when there is one.
pub fn headers(cx: &Context) -> Vec<(HeaderName, String)> {
    let mut map = HeaderMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut opentelemetry_http::HeaderInjector(&mut map));
    map.iter().filter_map(|(name, value)| Some((name.clone(), value.to_str().ok()?.to_string()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn with(traceparent: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", traceparent.parse().unwrap());
        headers
    }

    #[test]
    fn a_valid_traceparent_is_the_parent() {
        let mut headers = with(GOOD);
        headers.insert("tracestate", "vendor=abc".parse().unwrap());
        let cx = parent(&headers).expect("a valid traceparent");
        let span = cx.span().span_context().clone();
        assert_eq!(span.trace_id(), TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap());
        assert_eq!(span.span_id(), SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(span.is_remote() && span.is_sampled());
        assert_eq!(span.trace_state().get("vendor"), Some("abc"));
    }

    #[test]
    fn bad_traceparents_are_no_parent() {
        assert!(parent(&HeaderMap::new()).is_none());
        for bad in [
            "",
            "garbage",
            // All-zero trace id, all-zero span id.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Version ff is forbidden; a short trace id; not hex; a missing field.
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parent(&with(bad)).is_none(), "`{bad}` was taken as a parent");
        }
    }

    #[test]
    fn a_span_is_carried_as_traceparent_and_tracestate() {
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            TraceFlags::SAMPLED,
            false,
            TraceState::from_key_value([("vendor", "abc")]).unwrap(),
        );
        let sent = headers(&Context::new().with_remote_span_context(span));
        assert!(sent.contains(&(
            HeaderName::from_static("traceparent"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01".into()
        )));
        assert!(sent.contains(&(HeaderName::from_static("tracestate"), "vendor=abc".into())));
        assert!(headers(&Context::new()).is_empty(), "no span, no headers");
    }
}
