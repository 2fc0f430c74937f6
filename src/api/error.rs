//! Every error a client of the OpenAI dialects sees, as OpenAI's error envelope with the
//! error's status: `{"error": {"message", "type", "param", "code"}}` is what the official SDKs
//! parse, and nothing leaves these routes in any other shape. What the error is comes typed
//! from the pipeline ([`ApiError`], [`ErrorCode`]); Anthropic's envelope is
//! `messages::error`'s.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub use crate::serve::error::{limit_code, ApiError, ErrorCode};

impl ApiError {
    /// The error body alone, as sent in-band on a stream that already started.
    pub fn body(&self) -> serde_json::Value {
        let (_, kind, code) = self.code.table();
        json!({"error": {
            "message": self.message,
            "type": kind,
            "param": self.param,
            "code": code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log();
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{ErrorClass, UpstreamError};

    #[test]
    fn the_envelope_says_the_type_message_and_code() {
        let e = UpstreamError::new(ErrorClass::InvalidRequest, Some(422), "bad schema");
        let error = ApiError::from_upstream("openai", &e);
        assert_eq!(error.body()["error"]["type"], "invalid_request_error");
        assert_eq!(error.body()["error"]["message"], "backend `openai`: bad schema");
        let response = ApiError::new(ErrorCode::Shed, "full").retry_after(3).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    }
}
