//! The client's tools as backends get them, and their calls back as the client wrote them.
//!
//! A Responses client may group its tools: a `namespace` tool holds function and `custom`
//! tools, and tools come in `tools` or in `additional_tools` input items (Codex sends all of
//! its own that way). OpenAI gets them as written (the client's body); any other backend gets
//! one flat list of function tools. Each keeps its own name
//! where that is unique across the groups, else it is `{namespace}__{name}`. A `custom` tool
//! (free-form text input, often with a grammar) becomes a function with one string argument,
//! `input`, its grammar in the description. Tools that run inside OpenAI (`web_search`,
//! `file_search`, …) are dropped for those backends (`api::dropped` names them in a header). On the
//! way out each call is written under the client's own name and namespace, as a
//! `function_call` or a `custom_tool_call` item. Pure: no I/O.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::refuse::{invalid, missing, type_name};
use crate::api::error::{ApiError, ErrorCode};
use crate::api::wire::{self, WireFunction, WireTool};
use crate::canonical::shallow::Part;
use crate::canonical::{Schema, Tool};

/// The tool types that run inside OpenAI (dated variants such as `web_search_2025_08_26`
/// included): dropped for other backends. Any other unknown type is refused.
const HOSTED: [&str; 10] = [
    "web_search",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use",
    "local_shell",
    "shell",
    "apply_patch",
    "mcp",
    "tool_search",
];

/// What a tool is to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Called with JSON arguments (`function_call`).
    Function,
    /// Called with free-form text (`custom_tool_call`), sent to backends as `{"input": …}`.
    Custom,
}

/// One client tool: where it lives and how it is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientTool {
    pub namespace: Option<String>,
    pub name: String,
    pub shape: Shape,
}

/// A request's tools, both ways.
#[derive(Debug, Default)]
pub(crate) struct Toolset {
    /// What backends get.
    pub tools: Vec<Tool>,
    /// The tools dropped (they run inside OpenAI): where each is, and its type.
    pub dropped: Vec<(String, String)>,
    /// The backends' name of each tool → the client's tool.
    client: HashMap<String, ClientTool>,
}

/// A tool as read, before its backend name is known.
struct Read<'a> {
    at: String,
    tool: ClientTool,
    description: Option<String>,
    /// As the client wrote it (absent: `None`).
    parameters: Option<Part<'a>>,
    format: Option<Value>,
}

impl Toolset {
    /// Read `tools` (each with the path a refusal names), namespaces opened.
    pub fn read<'a>(tools: impl IntoIterator<Item = (String, Part<'a>)>) -> Result<Toolset, ApiError> {
        let mut read = Vec::new();
        let mut dropped = Vec::new();
        for (at, tool) in tools {
            collect(&at, tool, None, &mut read, &mut dropped)?;
        }
        let mut count: HashMap<&str, usize> = HashMap::new();
        for r in &read {
            *count.entry(r.tool.name.as_str()).or_default() += 1;
        }
        let mut set = Toolset { dropped, ..Toolset::default() };
        for r in &read {
            let name = match (&r.tool.namespace, count[r.tool.name.as_str()]) {
                (Some(ns), n) if n > 1 => format!("{ns}__{}", r.tool.name),
                _ => r.tool.name.clone(),
            };
            if set.client.contains_key(&name) {
                return Err(invalid(
                    &format!("{}.name", r.at),
                    format!("`{name}` is the name of another tool"),
                ));
            }
            set.tools.push(function(r, &name)?);
            set.client.insert(name, r.tool.clone());
        }
        Ok(set)
    }

    /// The toolset of `tools`, a list written as a tree (a test's).
    #[cfg(test)]
    pub(crate) fn of_tree(tools: &Value) -> Result<Toolset, ApiError> {
        use crate::canonical::{shallow::Shallow, Dialect};
        let body = serde_json::to_vec(&json!({ "tools": tools })).unwrap();
        let body = Shallow::read(body.into(), Dialect::OpenAiResponses.depth()).unwrap();
        let tools = body.get("tools").unwrap().items().unwrap();
        Toolset::read(tools.enumerate().map(|(i, t)| (format!("tools[{i}]"), t)))
    }

    /// The backends' name of the client's tool `name` in `namespace`, as a call in the
    /// history names it (a name no tool has is kept: the model may have seen it earlier).
    pub fn backend_name(&self, namespace: Option<&str>, name: &str) -> String {
        let is = |t: &ClientTool| t.name == name && t.namespace.as_deref() == namespace;
        self.client.iter().find(|(_, t)| is(t)).map_or_else(|| name.to_string(), |(n, _)| n.clone())
    }

    /// The client's tool a backend's call of `name` is to.
    pub fn client_tool(&self, name: &str) -> Option<&ClientTool> {
        self.client.get(name)
    }
}

/// A `custom` tool's arguments toward a backend: `{"input": text}`.
pub(crate) fn custom_arguments(input: &str) -> String {
    json!({ "input": input }).to_string()
}

/// A `custom` tool call's text from a backend's arguments (the arguments as they are when they
/// are not `{"input": "…"}`).
pub(crate) fn custom_input(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| arguments.to_string())
}

fn collect<'a>(
    at: &str,
    tool: Part<'a>,
    namespace: Option<&str>,
    read: &mut Vec<Read<'a>>,
    dropped: &mut Vec<(String, String)>,
) -> Result<(), ApiError> {
    if !tool.is_object() {
        return Err(invalid(at, format!("a tool must be an object, not {}", type_name(tool))));
    }
    let text = |key: &str| tool.get(key).and_then(|v| v.str());
    let kind = text("type").ok_or_else(|| missing(at, "type"))?;
    let name = || text("name").map(|n| n.into_owned()).ok_or_else(|| missing(at, "name"));
    let shape = match kind.as_ref() {
        "function" => Shape::Function,
        "custom" => Shape::Custom,
        "namespace" if namespace.is_none() => {
            let ns = name()?;
            let Some(inner) = tool.get("tools").and_then(|t| t.items()) else {
                return Err(missing(at, "tools"));
            };
            for (j, t) in inner.enumerate() {
                collect(&format!("{at}.tools[{j}]"), t, Some(&ns), read, dropped)?;
            }
            return Ok(());
        }
        "namespace" => return Err(invalid(&format!("{at}.type"), "a namespace holds no namespace".into())),
        hosted if HOSTED.iter().any(|h| hosted.starts_with(h)) => {
            dropped.push((at.to_string(), hosted.to_string()));
            return Ok(());
        }
        other => {
            return Err(invalid(
                &format!("{at}.type"),
                format!(
                    "tool type `{other}` is not one of function, custom, namespace or OpenAI's hosted tools"
                ),
            ))
        }
    };
    read.push(Read {
        at: at.to_string(),
        tool: ClientTool { namespace: namespace.map(str::to_string), name: name()?, shape },
        description: text("description").map(|d| d.into_owned()),
        parameters: tool.get("parameters"),
        // A grammar is read only for the description it writes.
        format: tool.get("format").and_then(|f| serde_json::from_str(f.json()).ok()),
    });
    Ok(())
}

/// The function a backend gets for `r`, checked as chat's tools are.
fn function(r: &Read, name: &str) -> Result<Tool, ApiError> {
    let (description, parameters) = match r.tool.shape {
        Shape::Function => (r.description.clone(), r.parameters.map(Schema::in_body).unwrap_or_default()),
        Shape::Custom => {
            let grammar = r.format.as_ref().and_then(|f| f.get("definition")).and_then(Value::as_str);
            let syntax =
                r.format.as_ref().and_then(|f| f.get("syntax")).and_then(Value::as_str).unwrap_or("");
            let mut about = r.description.clone().unwrap_or_default();
            if let Some(grammar) = grammar {
                about.push_str(&format!("\n\nThe input follows this {syntax} grammar:\n{grammar}"));
            }
            let input =
                json!({"type": "string", "description": "The tool's whole input, as free-form text."});
            let schema = json!({"type": "object", "properties": {"input": input}, "required": ["input"]});
            (Some(about), Schema::from(schema))
        }
    };
    let wire = WireTool {
        kind: Some("function".into()),
        function: WireFunction { name: name.to_string(), description, parameters },
    };
    // Chat's checks, their refusal in Responses' words: this tool's path, `invalid_value`.
    let mut tools = wire::tools(&mut [wire]).map_err(|mut e| {
        if let Some(param) = e.param.as_mut() {
            *param = param.replacen("tools[0].function", &r.at, 1);
        }
        match e.code {
            ErrorCode::InvalidRequest => e.code(ErrorCode::InvalidValue),
            _ => e,
        }
    })?;
    Ok(tools.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(tools: Value) -> Result<Toolset, ApiError> {
        Toolset::of_tree(&tools)
    }

    #[test]
    fn namespaces_are_flattened_with_unique_names_and_mapped_back() {
        let set = read(json!([
            {"type": "namespace", "name": "functions", "tools": [
                {"type": "custom", "name": "exec", "description": "Run code",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                {"type": "function", "name": "wait", "parameters": {"type": "object"}}]},
            {"type": "namespace", "name": "clock", "tools": [
                {"type": "function", "name": "sleep", "parameters": {"type": "object"}},
                {"type": "function", "name": "wait", "parameters": {"type": "object"}}]},
            {"type": "web_search"},
        ]))
        .unwrap();
        let names: Vec<&str> = set.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["exec", "functions__wait", "sleep", "clock__wait"]);
        assert_eq!(set.dropped, [("tools[2]".to_string(), "web_search".to_string())]);
        assert_eq!(
            set.client_tool("clock__wait"),
            Some(&ClientTool {
                namespace: Some("clock".into()),
                name: "wait".into(),
                shape: Shape::Function
            })
        );
        assert_eq!(set.backend_name(Some("clock"), "wait"), "clock__wait");
        assert_eq!(set.backend_name(Some("functions"), "exec"), "exec");
        let exec = &set.tools[0];
        assert_eq!(exec.parameters.tree()["required"], json!(["input"]));
        assert!(exec.description.as_deref().unwrap().contains("lark grammar:\nstart: /.+/"), "{exec:?}");
        assert_eq!(set.client_tool("exec").unwrap().shape, Shape::Custom);
        assert_eq!(custom_input(&custom_arguments("print(1)\n")), "print(1)\n");
    }

    #[test]
    fn each_refusal_names_the_tools_own_path() {
        let twice = json!([{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]);
        assert_eq!(read(twice).unwrap_err().param.as_deref(), Some("tools[1].name"));
        let bad = json!([{"type": "namespace", "name": "n", "tools": [
            {"type": "function", "name": "g", "parameters": {"type": "string"}}]}]);
        assert_eq!(read(bad).unwrap_err().param.as_deref(), Some("tools[0].tools[0].parameters"));
        let nameless = json!([{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}]);
        assert_eq!(read(nameless).unwrap_err().param.as_deref(), Some("tools[0].tools[0].name"));
        let unknown = json!([{"type": "functoin", "name": "f"}]);
        assert_eq!(read(unknown).unwrap_err().param.as_deref(), Some("tools[0].type"));
        let dated = read(json!([{"type": "web_search_preview_2025_03_11"}])).unwrap();
        assert_eq!(dated.dropped[0].1, "web_search_preview_2025_03_11");
    }
}
