//! JSON schemas a client sends (tool parameters, a response format): kept as written, compiled
//! to validate an answer, or only checked at the door. An agent resends the same dozen tool
//! schemas on every turn: they reach an upstream of the client's own wire as the text the client
//! wrote (no tree built), and a check remembers the schemas it has found valid (by a 64-bit hash
//! of that text) and compiles each one once. A schema found invalid is compiled again each
//! time, so its error is always exact.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock, RwLock};

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

use super::shallow::{AsWritten, Part};

/// Distinct valid schemas remembered; past it the memo starts over.
const REMEMBERED: usize = 4096;

static VALID: LazyLock<RwLock<HashSet<u64>>> = LazyLock::new(RwLock::default);

/// A JSON schema as the client wrote it: its text, and its tree, built on first read (a
/// translation to another wire, a compile). `null` for a function that takes no parameters.
#[derive(Clone)]
pub struct Schema {
    /// JSON text, valid as the door's reading found it.
    text: Bytes,
    tree: OnceLock<Arc<Value>>,
}

/// What a check asks of a schema besides compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaKind {
    /// Any schema that compiles.
    Any,
    /// A function's parameters: a schema whose `type`, if it says one, is `object`.
    Parameters,
}

impl Schema {
    /// A schema as written (valid JSON, as the door's reading found it).
    pub fn written(text: Box<RawValue>) -> Schema {
        Schema { text: Bytes::from(String::from(Box::<str>::from(text))), tree: OnceLock::new() }
    }

    /// A schema where it lies in a client's body (a JSON value the door's reading found there).
    pub fn in_body(part: Part<'_>) -> Schema {
        Schema { text: part.shared(), tree: OnceLock::new() }
    }

    /// A schema read from a tree someone else holds: its text written, its tree built again
    /// only if read.
    pub fn of(tree: &Value) -> Schema {
        Schema { text: text_of(tree), tree: OnceLock::new() }
    }

    /// Its JSON text as written.
    pub fn text(&self) -> AsWritten<'_> {
        AsWritten(self.json())
    }

    fn json(&self) -> &str {
        std::str::from_utf8(&self.text).unwrap_or("null")
    }

    /// Its tree, built on first use.
    pub fn tree(&self) -> &Value {
        self.tree.get_or_init(|| Arc::new(serde_json::from_slice(&self.text).unwrap_or(Value::Null)))
    }

    /// The tree, taken out.
    pub fn into_tree(self) -> Value {
        self.tree();
        let tree = self.tree.into_inner().unwrap_or_default();
        Arc::try_unwrap(tree).unwrap_or_else(|shared| (*shared).clone())
    }

    fn first_byte(&self) -> Option<u8> {
        self.json().trim_start().bytes().next()
    }

    /// `null`: no schema (absent, or written as `null`).
    pub fn is_null(&self) -> bool {
        self.first_byte() == Some(b'n')
    }

    /// A JSON object (a schema a tool may have).
    pub fn is_object(&self) -> bool {
        self.first_byte() == Some(b'{')
    }
}

fn text_of(tree: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(tree).unwrap_or_else(|_| b"null".to_vec()))
}

impl Default for Schema {
    fn default() -> Schema {
        Schema::from(Value::Null)
    }
}

impl From<Value> for Schema {
    fn from(tree: Value) -> Schema {
        Schema { text: text_of(&tree), tree: OnceLock::from(Arc::new(tree)) }
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.text().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Schema::written)
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Schema) -> bool {
        self.text == other.text || self.tree() == other.tree()
    }
}

impl PartialEq<Value> for Schema {
    fn eq(&self, other: &Value) -> bool {
        self.tree() == other
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

/// Compile a JSON schema (draft detected from `$schema`, 2020-12 by default).
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| format!("the JSON schema is not valid: {e}"))
}

/// Whether `schema` is of `kind` and compiles, as [`compile_schema`] says; a schema seen valid
/// before, written the same, is neither read nor compiled again.
pub fn check_schema(schema: &Schema, kind: SchemaKind) -> Result<(), String> {
    let hash = hash_of(schema, kind);
    if VALID.read().is_ok_and(|valid| valid.contains(&hash)) {
        return Ok(());
    }
    let tree = schema.tree();
    if kind == SchemaKind::Parameters && tree.get("type").is_some_and(|t| t != "object") {
        return Err("a function's parameters must be a schema of `\"type\": \"object\"`".into());
    }
    compile_schema(tree)?;
    if let Ok(mut valid) = VALID.write() {
        if valid.len() >= REMEMBERED {
            valid.clear();
        }
        valid.insert(hash);
    }
    Ok(())
}

/// The xxh3-64 of the kind asked and the schema's text as written.
fn hash_of(schema: &Schema, kind: SchemaKind) -> u64 {
    let mut hasher = Xxh3::new();
    hasher.update(&[kind as u8]);
    hasher.update(&schema.text);
    hasher.digest()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn written(text: &str) -> Schema {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn a_valid_schema_is_remembered_and_an_invalid_one_always_says_why() {
        let schema =
            written(r#"{"type": "object", "properties": {"path": {"type": "string", "pattern": "^src/"}}}"#);
        assert_eq!(check_schema(&schema, SchemaKind::Any), Ok(()));
        assert!(VALID.read().unwrap().contains(&hash_of(&schema, SchemaKind::Any)));
        let again = written(schema.text().0);
        assert_eq!(check_schema(&again, SchemaKind::Any), Ok(()));
        assert!(again.tree.get().is_none(), "a schema seen valid is not read again");
        let bad =
            written(r#"{"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}"#);
        for _ in 0..2 {
            let why = check_schema(&bad, SchemaKind::Any).unwrap_err();
            assert!(why.starts_with("the JSON schema is not valid"), "{why}");
        }
        assert!(!VALID.read().unwrap().contains(&hash_of(&bad, SchemaKind::Any)));
        assert_ne!(hash_of(&schema, SchemaKind::Any), hash_of(&bad, SchemaKind::Any));
    }

    #[test]
    fn a_schema_valid_as_any_is_checked_again_as_parameters() {
        let string = written(r#"{"type": "string"}"#);
        assert_eq!(check_schema(&string, SchemaKind::Any), Ok(()));
        let why = check_schema(&string, SchemaKind::Parameters).unwrap_err();
        assert!(why.contains("\"type\": \"object\""), "{why}");
        assert_eq!(check_schema(&written(r#"{"properties": {}}"#), SchemaKind::Parameters), Ok(()));
    }

    #[test]
    fn a_schema_goes_out_as_written_and_reads_as_its_tree() {
        let text = r#"{ "type" : "object", "description": "caf\u00e9" }"#;
        let schema = written(text);
        assert_eq!(serde_json::to_string(&schema).unwrap(), text);
        assert!(schema.is_object() && !schema.is_null());
        assert_eq!(schema, json!({"type": "object", "description": "café"}));
        assert_eq!(schema, Schema::from(json!({"description": "café", "type": "object"})));
        assert!(Schema::default().is_null() && written("null").is_null());
        assert!(!written("[1]").is_object());
        assert_eq!(Schema::from(json!({"a": 1})).text().0, r#"{"a":1}"#);
        assert_eq!(schema.into_tree()["description"], "café");
    }
}
