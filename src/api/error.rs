//! Every error a client sees, as an OpenAI error envelope with the right status.
//!
//! `{"error": {"message", "type", "param", "code"}}` is what the official SDKs parse; nothing
//! leaves the API in any other shape.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::canonical::{ErrorClass, UpstreamError};

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: Option<String>,
    pub param: Option<String>,
    pub message: String,
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, kind, code: None, param: None, message: message.into(), retry_after_secs: None }
    }

    pub fn code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// The error body alone, as sent in-band on a stream that already started.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }

    /// An upstream failure the client must see: not failed over (its own request is at
    /// fault), or broken after the first token.
    pub fn from_upstream(backend: &str, e: &UpstreamError) -> Self {
        let reason = format!("backend `{backend}`: {}", e.message);
        match e.class {
            ErrorClass::InvalidRequest => {
                let status = e
                    .status
                    .filter(|s| (400..500).contains(s) && *s != 429)
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .unwrap_or(StatusCode::BAD_REQUEST);
                Self::new(status, "invalid_request_error", reason)
            }
            ErrorClass::ContextLength => Self::bad_request(reason).code("context_length_exceeded"),
            ErrorClass::ContentPolicy => Self::bad_request(reason).code("content_policy_violation"),
            ErrorClass::Auth => Self::new(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                format!("{reason} (the upstream refused Spillway's credentials)"),
            )
            .code("upstream_auth"),
            ErrorClass::Timeout => Self::new(StatusCode::GATEWAY_TIMEOUT, "timeout", reason).code("timeout"),
            class => Self::new(StatusCode::BAD_GATEWAY, "upstream_error", reason).code(class.as_str()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
