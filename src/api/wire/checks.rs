//! What the wire types cannot say about a request, checked once at decode: tools and their
//! schemas, the tool choice, image parts and the response format. Adapters only ever see shapes
//! they can map faithfully.

use std::collections::HashSet;

use serde_json::Value;

use super::{WireImageUrl, WireTool};
use crate::api::error::ApiError;
use crate::canonical::{check_schema, Image, ResponseFormat, Schema, SchemaKind, Tool, ToolChoice};

/// The tools, each a `function` with a name used once and a parameter schema that is a JSON
/// schema object (or absent), so every adapter can map it as it is.
pub(crate) fn tools(wire: &mut [WireTool]) -> Result<Vec<Tool>, ApiError> {
    let mut names = HashSet::new();
    let mut tools = Vec::new();
    for (i, t) in wire.iter_mut().enumerate() {
        let bad = |key: &str, why: String| Err(ApiError::bad_request(why).param(format!("tools[{i}].{key}")));
        if let Some(kind) = t.kind.as_deref().filter(|k| *k != "function") {
            return bad("type", format!("tool type `{kind}` is not supported; only `function` tools are"));
        }
        let f = &mut t.function;
        if f.name.is_empty() {
            return bad("function.name", "must not be empty".into());
        }
        if !names.insert(f.name.clone()) {
            return bad("function.name", format!("`{}` is the name of another tool", f.name));
        }
        if f.parameters.is_object() {
            if let Err(why) = check_schema(&f.parameters, SchemaKind::Parameters) {
                return bad("function.parameters", why);
            }
        } else if !f.parameters.is_null() {
            return bad(
                "function.parameters",
                "`parameters` must be a JSON schema object (or left out for none)".into(),
            );
        }
        tools.push(Tool {
            name: std::mem::take(&mut f.name),
            description: f.description.take(),
            parameters: std::mem::take(&mut f.parameters),
        });
    }
    Ok(tools)
}

/// OpenAI's `tool_choice`: `"none"`, `"auto"`, `"required"`, or `{"type": "function",
/// "function": {"name"}}` naming one of `tools`. Like OpenAI, it needs `tools`.
pub(crate) fn tool_choice(value: &Value, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let bad = |param: &str, why: String| Err(ApiError::bad_request(why).param(param));
    const SHAPES: &str = r#""none", "auto", "required" or {"type": "function", "function": {"name": …}}"#;
    if tools.is_empty() {
        return bad("tool_choice", "`tool_choice` is only allowed with `tools`".into());
    }
    match value {
        Value::String(s) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => bad("tool_choice", format!("`tool_choice` `{other}` is not one of {SHAPES}")),
        },
        Value::Object(choice) => {
            match choice.get("type") {
                Some(Value::String(t)) if t == "function" => {}
                Some(Value::String(t)) => {
                    return bad(
                        "tool_choice.type",
                        format!("tool_choice type `{t}` is not supported; only `function` is"),
                    )
                }
                _ => {
                    return bad(
                        "tool_choice.type",
                        format!("`type` must be \"function\": `tool_choice` is one of {SHAPES}"),
                    )
                }
            }
            let Some(Value::String(name)) = choice.get("function").and_then(|f| f.get("name")) else {
                return bad(
                    "tool_choice.function.name",
                    "`tool_choice.function.name` must name one of `tools`".into(),
                );
            };
            if !tools.iter().any(|t| &t.name == name) {
                return bad("tool_choice.function.name", format!("no tool in `tools` is named `{name}`"));
            }
            Ok(ToolChoice::Function(name.clone()))
        }
        _ => bad("tool_choice", format!("`tool_choice` must be one of {SHAPES}")),
    }
}

pub(crate) fn image_of(image: &WireImageUrl) -> Result<Image, String> {
    let (url, detail) = match image {
        WireImageUrl::Object { url, detail } => (url, detail.clone()),
        WireImageUrl::Url(url) => (url, None),
    };
    let image = Image { url: url.clone(), detail };
    if url.starts_with("data:") {
        if image.inline_data().is_none() {
            return Err("a data URL must look like data:image/png;base64,…".into());
        }
    } else if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err("`url` must be an http(s) address or a base64 data URL".into());
    }
    Ok(image)
}

/// OpenAI's `response_format`: `{"type": "text" | "json_object"}` or `{"type": "json_schema",
/// "json_schema": {"name", "schema", "strict"}}`. The schema must compile: a request whose
/// answer could never be checked is refused here, not after a backend has answered.
pub(crate) fn response_format(value: &Value) -> Result<ResponseFormat, ApiError> {
    let bad = |param: &str, why: String| Err(ApiError::bad_request(why).param(param));
    let Some(kind) = value.get("type").and_then(Value::as_str) else {
        return bad(
            "response_format.type",
            "`response_format` must be an object with `type`: text, json_object or json_schema".into(),
        );
    };
    match kind {
        "text" => Ok(ResponseFormat::Text),
        "json_object" => Ok(ResponseFormat::JsonObject),
        "json_schema" => {
            let Some(spec) = value.get("json_schema").filter(|s| s.is_object()) else {
                return bad(
                    "response_format.json_schema",
                    "`json_schema` (an object with `name` and `schema`) is required for type json_schema"
                        .into(),
                );
            };
            let name = match spec.get("name") {
                Some(Value::String(n)) if !n.is_empty() => n.clone(),
                _ => {
                    return bad(
                        "response_format.json_schema.name",
                        "`name` must be a non-empty string".into(),
                    )
                }
            };
            let schema = match spec.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => Schema::from(s.clone()),
                None => return bad("response_format.json_schema.schema", "`schema` is required".into()),
                Some(_) => {
                    return bad(
                        "response_format.json_schema.schema",
                        "`schema` must be a JSON schema object".into(),
                    )
                }
            };
            if let Err(why) = check_schema(&schema, SchemaKind::Any) {
                return bad("response_format.json_schema.schema", why);
            }
            let strict = match spec.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return bad("response_format.json_schema.strict", "`strict` must be true or false".into())
                }
            };
            Ok(ResponseFormat::JsonSchema { name, schema: schema.into_tree(), strict })
        }
        other => bad(
            "response_format.type",
            format!("response_format type `{other}` is not one of text, json_object, json_schema"),
        ),
    }
}
