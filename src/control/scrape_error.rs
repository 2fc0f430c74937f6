//! Why one scrape of a node (its `/metrics`, its agent's, or `/version`) gave no sample, as
//! data: the HTTP call, its answer, or the page it brought (a [`ParseError`]). The telemetry
//! board keeps the message text, which the admin API shows per node.

use crate::fleet::metrics::ParseError;

/// A failed scrape.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The request failed (connect, timeout, reading the body); the message holds the whole
    /// chain of causes, as the node's last error must say why without a log at hand.
    #[error("{}", chain(.source))]
    Request { source: reqwest::Error },
    /// The scrape loop's own connection failed (connect, write, read, a malformed answer).
    #[error("{url}: {source}")]
    Io { url: String, source: std::io::Error },
    #[error("{url}: no answer within {ms} ms")]
    Timeout { url: String, ms: u64 },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: reqwest::StatusCode },
    #[error("{url}: body larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error("{url}: body is not UTF-8")]
    NotUtf8 { url: String, source: std::str::Utf8Error },
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A page with no known engine's metric names (`engine: auto`).
    #[error("{url}: no metrics of a known engine ({}); set the pool's `engine`", known_engines())]
    NoEngine { url: String },
}

/// The engines whose pages can be read, by name.
fn known_engines() -> String {
    crate::canonical::Engine::ALL.map(|e| e.name()).join(", ")
}

/// `e: its cause: its cause's cause…`.
fn chain(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn messages_name_the_url_and_keep_the_source() {
        let status = ScrapeError::Status {
            url: "http://n:8000/metrics".into(),
            status: reqwest::StatusCode::BAD_GATEWAY,
        };
        assert_eq!(status.to_string(), "http://n:8000/metrics: HTTP 502 Bad Gateway");
        let big = ScrapeError::TooLarge { url: "http://n:8000/metrics".into(), limit: 8 };
        assert_eq!(big.to_string(), "http://n:8000/metrics: body larger than 8 bytes");
        let none = ScrapeError::NoEngine { url: "http://n:8000/metrics".into() };
        assert_eq!(
            none.to_string(),
            "http://n:8000/metrics: no metrics of a known engine (vllm, sglang, llamacpp, trtllm, tgi); \
             set the pool's `engine`"
        );
        let utf8 = ScrapeError::NotUtf8 {
            url: "http://n:8000/metrics".into(),
            source: String::from_utf8(vec![0xff]).unwrap_err().utf8_error(),
        };
        assert_eq!(utf8.to_string(), "http://n:8000/metrics: body is not UTF-8");
        assert!(utf8.source().is_some());
        let parse = ScrapeError::from(ParseError::NotVllm);
        assert_eq!(parse.to_string(), "no vllm: series in the page");
    }

    #[tokio::test]
    async fn a_failed_request_says_every_cause() {
        // Port 1 on loopback: nothing listens, the connection is refused.
        let source = reqwest::Client::new().get("http://127.0.0.1:1/metrics").send().await.unwrap_err();
        let innermost = {
            let mut s: &dyn Error = &source;
            while let Some(next) = s.source() {
                s = next;
            }
            s.to_string()
        };
        let e = ScrapeError::Request { source };
        let text = e.to_string();
        assert!(text.contains("127.0.0.1:1") && text.ends_with(&innermost), "{text}");
        assert!(e.source().is_some());
    }
}
