//! The Responses door's refusals: a 400 naming the field, in the words the decoder and the
//! item reader share.

use crate::api::error::{ApiError, ErrorCode};
use crate::canonical::shallow::Part;

pub(super) fn invalid(param: &str, why: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidValue, why).param(param)
}

pub(super) fn missing(at: &str, key: &str) -> ApiError {
    missing_root(&format!("{at}.{key}"))
}

pub(super) fn missing_root(param: &str) -> ApiError {
    ApiError::new(ErrorCode::MissingField, format!("`{param}` is required")).param(param)
}

/// The JSON type of a value as written, in a refusal's words.
pub(super) fn type_name(v: Part<'_>) -> &'static str {
    match v.bytes().first() {
        Some(b'n') => "null",
        Some(b't' | b'f') => "a boolean",
        Some(b'"') => "a string",
        Some(b'[') => "an array",
        Some(b'{') => "an object",
        _ => "a number",
    }
}
