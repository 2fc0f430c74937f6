//! The server span of each API request (`/v1/*`; probes, metrics, the dashboard and the admin
//! API make none): started before the request is read, with the client's `traceparent` as
//! its parent when valid, handed to the front door as a request extension, and ended when
//! the answer's body is done, so a streamed answer's span covers the whole stream, not only
//! the time to its headers. Nothing here runs when tracing is off.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};

use super::request_id::RequestId;
use super::Ops;
use crate::trace::RequestSpan;

/// The middleware: a span per API request, ended with the answer's body.
pub(crate) async fn layer(State(state): State<Arc<Ops>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let span = path
        .starts_with("/v1/")
        .then(|| state.tracing.request(request.headers(), request.method().as_str(), path))
        .flatten();
    let Some(span) = span else {
        return next.run(request).await;
    };
    if let Some(RequestId(id)) = request.extensions().get::<RequestId>() {
        span.request_id(id);
    }
    request.extensions_mut().insert(span.clone());
    let response = next.run(request).await;
    span.status(response.status().as_u16());
    response.map(|body| Body::new(Traced { body, end: EndSpan(span) }))
}

/// An answer's body that ends the request's span when it is done.
struct Traced {
    // Dropped first: what the body's stream holds records the answer on the span (a dropped
    // stream, its cancellation) before the span ends.
    body: Body,
    end: EndSpan,
}

/// Ends the span when dropped (at the latest).
struct EndSpan(RequestSpan);

impl Drop for EndSpan {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl HttpBody for Traced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.end.0.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
