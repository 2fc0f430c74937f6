//! JSON schemas a client sends (tool parameters, a response format): compiled to validate an
//! answer, or only checked at the door. An agent resends the same dozen tool schemas on every
//! turn, and compiling one costs more than relaying the rest of its request, so a check
//! remembers the schemas it has found valid (by a 64-bit hash of their JSON) and compiles each
//! one once. A schema found invalid is compiled again each time, so its error is always exact.

use std::collections::HashSet;
use std::sync::{LazyLock, RwLock};

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

/// Distinct valid schemas remembered; past it the memo starts over.
const REMEMBERED: usize = 4096;

static VALID: LazyLock<RwLock<HashSet<u64>>> = LazyLock::new(RwLock::default);

/// Compile a JSON schema (draft detected from `$schema`, 2020-12 by default).
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| format!("the JSON schema is not valid: {e}"))
}

/// Whether `schema` compiles, as [`compile_schema`] says; a schema seen valid before is not
/// compiled again.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    let hash = hash_of(schema);
    if VALID.read().is_ok_and(|valid| valid.contains(&hash)) {
        return Ok(());
    }
    compile_schema(schema)?;
    if let Ok(mut valid) = VALID.write() {
        if valid.len() >= REMEMBERED {
            valid.clear();
        }
        valid.insert(hash);
    }
    Ok(())
}

/// The xxh3-64 of the schema's JSON text, written straight into the hasher.
fn hash_of(schema: &Value) -> u64 {
    struct Hashing(Xxh3);
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(Xxh3::new());
    match serde_json::to_writer(&mut hashing, schema) {
        Ok(()) => hashing.0.digest(),
        // A `Value` always serialises; were it not to, nothing is remembered under 0.
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_valid_schema_is_remembered_and_an_invalid_one_always_says_why() {
        let schema =
            json!({"type": "object", "properties": {"path": {"type": "string", "pattern": "^src/"}}});
        assert_eq!(check_schema(&schema), Ok(()));
        assert!(VALID.read().unwrap().contains(&hash_of(&schema)));
        assert_eq!(check_schema(&schema), Ok(()));
        let bad = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}});
        for _ in 0..2 {
            let why = check_schema(&bad).unwrap_err();
            assert!(why.starts_with("the JSON schema is not valid"), "{why}");
        }
        assert!(!VALID.read().unwrap().contains(&hash_of(&bad)));
        assert_ne!(hash_of(&schema), hash_of(&bad));
    }
}
