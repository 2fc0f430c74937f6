//! The text-or-tokens value OpenAI takes in two places, a legacy completion's `prompt` and an
//! embeddings `input`: a string, an array of strings, an array of token ids, or an array of
//! arrays of token ids. [`decode`] reads one JSON value into the canonical [`Input`], keeping
//! the shape the client wrote; anything else is a 400 whose `param` names the exact place
//! (`input`, `input[2]`, `prompt[1][0]`). Nothing here panics on input.

use serde_json::Value;

use super::error::{ApiError, ErrorCode};
use crate::canonical::Input;

/// What the value may be, for the client's error.
const SHAPES: &str =
    "a string, an array of strings, an array of token ids, or an array of arrays of token ids";

/// Whether an empty string is a valid input (it is a prompt; it is no text to embed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EmptyText {
    Allowed,
    Refused,
}

/// Decode `value`, the request's member `param`.
pub fn decode(value: &Value, param: &str, empty: EmptyText) -> Result<Input, ApiError> {
    let items = match value {
        Value::String(text) => return text_item(text, param.to_string(), empty).map(Input::Text),
        Value::Array(items) => items,
        _ => return Err(wrong_type(param, SHAPES)),
    };
    let at = |i: usize| format!("{param}[{i}]");
    match items.first() {
        None => Err(invalid(param.to_string(), format!("`{param}` must not be an empty array"))),
        Some(Value::String(_)) => {
            let mut texts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let Value::String(text) = item else {
                    return Err(wrong_type(&at(i), "a string, like the array's first item"));
                };
                texts.push(text_item(text, at(i), empty)?);
            }
            Ok(Input::Texts(texts))
        }
        Some(Value::Number(_)) => token_ids(items, param).map(Input::Tokens),
        Some(Value::Array(_)) => {
            let mut lists = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::Array(ids) if ids.is_empty() => {
                        return Err(invalid(at(i), format!("`{}` must not be an empty array", at(i))))
                    }
                    Value::Array(ids) => lists.push(token_ids(ids, &at(i))?),
                    _ => {
                        return Err(wrong_type(&at(i), "an array of token ids, like the array's first item"))
                    }
                }
            }
            Ok(Input::TokenLists(lists))
        }
        Some(_) => Err(wrong_type(&at(0), "a string, a token id or an array of token ids")),
    }
}

fn text_item(text: &str, at: String, empty: EmptyText) -> Result<String, ApiError> {
    if text.is_empty() && empty == EmptyText::Refused {
        return Err(invalid(at.clone(), format!("`{at}` must not be an empty string")));
    }
    Ok(text.to_string())
}

fn token_ids(items: &[Value], at: &str) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_u64().and_then(|id| u32::try_from(id).ok()).ok_or_else(|| {
                let at = format!("{at}[{i}]");
                let why = format!("`{at}` must be a token id (an integer from 0 to {})", u32::MAX);
                match item {
                    Value::Number(_) => invalid(at, why),
                    _ => ApiError::new(ErrorCode::InvalidType, why).param(at),
                }
            })
        })
        .collect()
}

fn wrong_type(at: &str, what: &str) -> ApiError {
    ApiError::new(ErrorCode::InvalidType, format!("`{at}` must be {what}")).param(at)
}

fn invalid(at: String, why: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidValue, why).param(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn embed(value: Value) -> Result<Input, ApiError> {
        decode(&value, "input", EmptyText::Refused)
    }

    #[test]
    fn every_shape_is_kept_as_written() {
        assert_eq!(embed(json!("hello")).unwrap(), Input::Text("hello".into()));
        assert_eq!(embed(json!(["a", "b"])).unwrap(), Input::Texts(vec!["a".into(), "b".into()]));
        assert_eq!(embed(json!([1, 2, 4294967295u32])).unwrap(), Input::Tokens(vec![1, 2, u32::MAX]));
        assert_eq!(embed(json!([[1], [2, 3]])).unwrap(), Input::TokenLists(vec![vec![1], vec![2, 3]]));
        assert_eq!(decode(&json!(""), "prompt", EmptyText::Allowed).unwrap(), Input::Text(String::new()));
    }

    #[test]
    fn each_bad_input_names_its_place() {
        let cases = [
            (json!(null), "input", ErrorCode::InvalidType),
            (json!(7), "input", ErrorCode::InvalidType),
            (json!({"text": "hi"}), "input", ErrorCode::InvalidType),
            (json!([]), "input", ErrorCode::InvalidValue),
            (json!(""), "input", ErrorCode::InvalidValue),
            (json!(["a", ""]), "input[1]", ErrorCode::InvalidValue),
            (json!(["a", 1]), "input[1]", ErrorCode::InvalidType),
            (json!([1, "a"]), "input[1]", ErrorCode::InvalidType),
            (json!([1, -2]), "input[1]", ErrorCode::InvalidValue),
            (json!([1, 2.5]), "input[1]", ErrorCode::InvalidValue),
            (json!([1, 4294967296u64]), "input[1]", ErrorCode::InvalidValue),
            (json!([[1], []]), "input[1]", ErrorCode::InvalidValue),
            (json!([[1], [2, "x"]]), "input[1][1]", ErrorCode::InvalidType),
            (json!([[1], 2]), "input[1]", ErrorCode::InvalidType),
            (json!([true]), "input[0]", ErrorCode::InvalidType),
            (json!([{"a": 1}]), "input[0]", ErrorCode::InvalidType),
        ];
        for (value, param, code) in cases {
            let error = embed(value.clone()).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{value}: {error:?}");
            assert_eq!(error.code, code, "{value}: {error:?}");
            assert_eq!(error.status, 400, "{value}");
        }
        let error = embed(json!(3)).unwrap_err();
        assert!(error.message.contains("a string, an array of strings, an array of token ids"), "{error:?}");
    }
}
