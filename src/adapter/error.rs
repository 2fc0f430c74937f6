//! Transport failures from reqwest turned into [`UpstreamError`]s without the URL (a query
//! string may carry a key), and how long an upstream asks to be left alone, as a duration.

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

/// How long the upstream asks to be left alone: Azure's `retry-after-ms` or
/// `x-ms-retry-after-ms` (milliseconds), else `Retry-After` as seconds or as an HTTP date (from
/// now; a date gone by is no wait).
pub fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    parse_retry_after_at(headers, std::time::SystemTime::now())
}

fn parse_retry_after_at(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let number = |s: &str| s.parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0);
    for name in ["retry-after-ms", "x-ms-retry-after-ms"] {
        if let Some(ms) = text(name).and_then(number) {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = text("retry-after")?;
    match number(value) {
        Some(secs) => Some(Duration::from_secs_f64(secs)),
        None => httpdate::parse_http_date(value).ok().map(|at| at.duration_since(now).unwrap_or_default()),
    }
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

    #[test]
    fn a_wait_is_read_in_milliseconds_seconds_or_as_a_date() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let wait = |pairs: &[(&'static str, &str)]| {
            let mut h = reqwest::header::HeaderMap::new();
            for (name, value) in pairs {
                h.insert(*name, value.parse().unwrap());
            }
            parse_retry_after_at(&h, now)
        };
        assert_eq!(wait(&[("retry-after", "3")]), Some(Duration::from_secs(3)));
        assert_eq!(wait(&[("retry-after", "1.5")]), Some(Duration::from_millis(1500)));
        // Milliseconds win over seconds, as Azure's own clients read them.
        assert_eq!(
            wait(&[("retry-after-ms", "250"), ("retry-after", "1")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(wait(&[("x-ms-retry-after-ms", "40")]), Some(Duration::from_millis(40)));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(wait(&[("retry-after", date.as_str())]), Some(Duration::from_secs(90)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(wait(&[("retry-after", past.as_str())]), Some(Duration::ZERO));
        assert_eq!(wait(&[("retry-after", "soon")]), None);
        assert_eq!(wait(&[("retry-after-ms", "-5")]), None);
        assert_eq!(wait(&[]), None);
    }
}
