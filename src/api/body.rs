//! Reading a request body: a JSON content type, at most `limits.max_body_bytes`, within
//! `limits.body_read_timeout_ms`. Each way it can go wrong has its own status and code, so a
//! client that sends too much, too slowly, or a body that breaks off knows which it was.
//!
//! The body is read before the request takes an admission permit, so a slow sender holds a
//! connection (bounded by the timeout) but never a share of the router's concurrency.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::{ApiError, ErrorCode};

/// The whole body of a JSON request, or the error the client gets.
pub(crate) async fn read_json(
    headers: &HeaderMap,
    body: Body,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    check_content_type(headers)?;
    let read = Limited::new(body, max_bytes).collect();
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(max_bytes)),
        Ok(Err(e)) => {
            Err(ApiError::new(ErrorCode::InvalidBody, format!("the request body could not be read: {e}")))
        }
        Err(_) => Err(ApiError::new(
            ErrorCode::BodyTimeout,
            format!("the request body did not arrive within {} ms", timeout.as_millis()),
        )),
    }
}

/// The refusal of a body larger than `max_bytes`.
pub(crate) fn too_large(max_bytes: usize) -> ApiError {
    ApiError::new(ErrorCode::RequestTooLarge, format!("the request body is larger than {max_bytes} bytes"))
}

/// A body must be JSON: `application/json` or `application/…+json`, any parameters; no
/// content type at all is taken as JSON.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let essence = value.to_str().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let json =
        essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        Ok(())
    } else {
        let shown = value.to_str().unwrap_or("(not text)");
        Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!("content-type `{shown}` is not JSON; send application/json"),
        )
        .param("content-type"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_type(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn json_content_types_pass_and_others_get_415() {
        assert!(check_content_type(&HeaderMap::new()).is_ok());
        assert!(check_content_type(&with_type("application/json")).is_ok());
        assert!(check_content_type(&with_type("Application/JSON; charset=utf-8")).is_ok());
        assert!(check_content_type(&with_type("application/vnd.api+json")).is_ok());
        let refused = check_content_type(&with_type("text/plain")).unwrap_err();
        assert_eq!(refused.status, 415);
        assert_eq!(refused.param.as_deref(), Some("content-type"));
        assert!(check_content_type(&with_type("application/x-www-form-urlencoded")).is_err());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_and_one_that_breaks_off_is_400() {
        let big = Body::from(vec![b'x'; 2048]);
        let too_large = read_json(&HeaderMap::new(), big, 1024, Duration::from_secs(1)).await.unwrap_err();
        assert_eq!(too_large.status, 413);
        let broken = Body::from_stream(futures::stream::iter([
            Ok(Bytes::from_static(b"{\"model\":")),
            Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before message completed",
            )),
        ]));
        let error = read_json(&HeaderMap::new(), broken, 1024, Duration::from_secs(1)).await.unwrap_err();
        assert_eq!((error.status, error.code.as_str()), (400, Some("invalid_body")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_is_408_after_the_timeout() {
        let stalled = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let error = read_json(&HeaderMap::new(), stalled, 1024, Duration::from_secs(30)).await.unwrap_err();
        assert_eq!((error.status, error.code.as_str()), (408, Some("body_timeout")));
    }
}
