//! A request id on every request: taken from the client's `x-request-id` when it is a sane
//! token, else made up; returned in the `x-request-id` response header, attached to a tracing
//! span so that every log line written while handling the request carries it, and passed to
//! dispatch so that the attempt and outcome lines written later carry it too. Logs never get
//! the prompt, the answer or a key: only ids, names, sizes and timings.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

pub const HEADER: &str = "x-request-id";

/// The id of the request being handled (a request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// A client-supplied id is kept when it is 1–128 characters of `[A-Za-z0-9._-]`.
fn acceptable(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The middleware: id, span, access log line, response header.
pub async fn layer(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map_or_else(|| format!("{:032x}", rand::random::<u128>()), str::to_string);
    request.extensions_mut().insert(RequestId(id.clone()));
    let span = tracing::info_span!("http", request_id = %id, method = %request.method(), path = %request.uri().path());
    let started = tokio::time::Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            ms = started.elapsed().as_millis() as u64,
            "http response"
        );
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_kept_only_when_sane() {
        assert!(acceptable("req-42.a_b"));
        assert!(acceptable(&"a".repeat(128)));
        assert!(!acceptable(&"a".repeat(129)));
        assert!(!acceptable(""));
        assert!(!acceptable("has space"));
        assert!(!acceptable("x\ny"));
    }
}
