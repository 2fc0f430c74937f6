//! The Responses door's refusals: a 400 naming the field, in the words the decoder and the
//! item reader share.

use serde_json::Value;

use crate::api::error::{ApiError, ErrorCode};

pub(super) fn invalid(param: &str, why: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidValue, why).param(param)
}

pub(super) fn missing(at: &str, key: &str) -> ApiError {
    missing_root(&format!("{at}.{key}"))
}

pub(super) fn missing_root(param: &str) -> ApiError {
    ApiError::new(ErrorCode::MissingField, format!("`{param}` is required")).param(param)
}

pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
