//! Transport failures from reqwest turned into [`UpstreamError`]s without the URL (a query
//! string may carry a key), and the `Retry-After` header read as a duration.

use std::time::Duration;

use crate::canonical::{ErrorClass, UpstreamError};

impl UpstreamError {
    /// Classify a transport error from reqwest. The message never names the URL (a query
    /// string may carry a key): it is reqwest's own text without it, then the root cause.
    pub fn from_reqwest(err: &reqwest::Error) -> Self {
        let class = if err.is_timeout() {
            ErrorClass::Timeout
        } else if err.is_connect() || err.is_request() {
            ErrorClass::Connect
        } else {
            ErrorClass::StreamBroken
        };
        UpstreamError::new(class, err.status().map(|s| s.as_u16()), transport_message(err))
    }
}

/// reqwest's text for `err` without the ` for url (…)` it appends, then the innermost cause
/// (e.g. "Connection refused") when there is one; the URL is taken out of both.
fn transport_message(err: &reqwest::Error) -> String {
    let mut message = err.to_string();
    let mut cause = std::error::Error::source(err);
    let mut root = None;
    while let Some(c) = cause {
        root = Some(c.to_string());
        cause = c.source();
    }
    if let Some(url) = err.url() {
        let suffix = format!(" for url ({url})");
        if let Some(bare) = message.strip_suffix(suffix.as_str()) {
            message = bare.to_string();
        }
    }
    if let Some(root) = root.filter(|r| !r.is_empty() && !message.contains(r.as_str())) {
        message = format!("{message}: {root}");
    }
    match err.url() {
        Some(url) => message.replace(url.as_str(), "<url>"),
        None => message,
    }
}

/// Parse a `Retry-After` header given in seconds (the form providers use).
pub fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<f64>().ok().filter(|s| *s >= 0.0).map(Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn transport_errors_never_carry_the_url() {
        // A port nothing listens on: the connection is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/v1beta/models/m:generateContent?key=AIzaPLANTEDkey0123");
        let err = reqwest::Client::new().post(&url).send().await.unwrap_err();
        assert!(err.to_string().contains("AIzaPLANTEDkey0123"), "reqwest itself names the URL: {err}");
        let e = UpstreamError::from_reqwest(&err);
        assert_eq!(e.class, ErrorClass::Connect);
        assert!(!e.message.contains("AIzaPLANTEDkey0123") && !e.message.contains("generateContent"), "{e}");
        assert!(e.message.starts_with("error sending request"), "{e}");
    }
}
