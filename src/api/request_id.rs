//! A request id on every request: taken from the client's `x-request-id` when it is a sane
//! token, else made up; returned in the `x-request-id` response header, attached to a tracing
//! span so that every log line written while handling the request carries it, and passed to
//! dispatch so that the attempt and outcome lines written later carry it too. Logs never get
//! the prompt, the answer or a key: only ids, names, sizes and timings.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::Ops;
use crate::config::{AccessLogConfig, AccessLogLevel};
use crate::control::access::AccessLine;

pub(crate) const HEADER: &str = "x-request-id";

/// The id of the request being handled (a request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestId(pub String);

/// A client-supplied id is kept when it is 1–128 characters of `[A-Za-z0-9._-]`.
fn acceptable(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The middleware: id, span, response header, and the access line (as `access_log` says),
/// queued for the bookkeeping loop to write.
pub(crate) async fn layer(State(state): State<Arc<Ops>>, mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map_or_else(|| format!("{:032x}", rand::random::<u128>()), str::to_string);
    request.extensions_mut().insert(RequestId(id.clone()));
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let span = tracing::info_span!("http", request_id = %id, method = %method, path = %path);
    // A probe's 503 (not ready yet) is an answer, not a refusal.
    let probe = matches!(path.as_str(), "/healthz" | "/readyz");
    let started = tokio::time::Instant::now();
    let mut response = next.run(request).instrument(span).await;
    let status = response.status().as_u16();
    if status >= 400 && !probe {
        state.metrics.edge.refused(status);
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    let access = &state.snapshot.load().config.access_log;
    if let Some(level) = access_line(access, status, rand::random()) {
        let ms = started.elapsed().as_millis() as u64;
        state.access.send(AccessLine { request_id: id, method, path, status, ms, level });
    }
    response
}

/// The level of this answer's access line, if it gets one; `draw` is uniform in [0, 1).
fn access_line(access: &AccessLogConfig, status: u16, draw: f64) -> Option<tracing::Level> {
    let level = match access.level {
        AccessLogLevel::Off => return None,
        AccessLogLevel::Info => tracing::Level::INFO,
        AccessLogLevel::Debug => tracing::Level::DEBUG,
    };
    (status >= 500 || draw < access.sample).then_some(level)
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

    #[test]
    fn access_lines_follow_level_and_sample_and_5xx_always_get_one() {
        let sampled = AccessLogConfig { level: AccessLogLevel::Info, sample: 0.25 };
        assert_eq!(access_line(&sampled, 200, 0.1), Some(tracing::Level::INFO));
        assert_eq!(access_line(&sampled, 200, 0.5), None);
        assert_eq!(access_line(&sampled, 404, 0.5), None);
        assert_eq!(access_line(&sampled, 503, 0.99), Some(tracing::Level::INFO));
        let debug = AccessLogConfig { level: AccessLogLevel::Debug, sample: 1.0 };
        assert_eq!(access_line(&debug, 200, 0.99), Some(tracing::Level::DEBUG));
        let off = AccessLogConfig { level: AccessLogLevel::Off, sample: 1.0 };
        assert_eq!(access_line(&off, 500, 0.0), None);
    }
}
