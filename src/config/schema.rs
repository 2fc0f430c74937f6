//! The config file's JSON schema, derived from the config types themselves (schemars), so that
//! what an editor, the Helm chart (`values.schema.json`) and `spillway config-schema` check is
//! what serde accepts, with the field docs as descriptions and each section's ranges (`range`)
//! as `minimum` and `maximum`. Checks that need more than one key (references, URLs) stay in
//! the sections' checks and `validate`.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use super::range::{self, Range};
use super::{
    AccessLogConfig, BackendConfig, BalancingConfig, BatchConfig, BudgetsConfig, CanaryConfig, Config,
    DispatchConfig, IssuedKeysConfig, LedgerConfig, LimitsConfig, QueueConfig, StateConfig, TaskConfig,
    TelemetryConfig,
};

/// A decimal (price) written as a string; YAML numbers are decimals too. Looser spellings that
/// rust_decimal also reads (`1_000`) are left out.
const DECIMAL_PATTERN: &str = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$";

/// The JSON schema of a config file: draft-07 (what Helm and most editors read), with every
/// subschema inlined, so it has no `$ref` and can stand as one property of another schema.
pub fn schema() -> Value {
    let settings = SchemaSettings::draft07().with(|s| s.inline_subschemas = true);
    let mut schema = settings.into_generator().into_root_schema_for::<Config>().to_value();
    join_description_lines(&mut schema);
    for (section, ranges) in ranges() {
        for r in ranges {
            let path = format!("{section}.{}", r.key);
            let steps = key_steps(&path);
            assert!(range::apply(&mut schema, &steps, r) > 0, "{path}: no such key in the schema");
        }
    }
    schema
}

/// Every section's ranges, by the key path of the section (`tasks[]`: each task).
pub fn ranges() -> Vec<(&'static str, &'static [Range])> {
    vec![
        ("issued_keys", IssuedKeysConfig::RANGES),
        ("backends[]", BackendConfig::RANGES),
        ("tasks[]", TaskConfig::RANGES),
        ("dispatch", DispatchConfig::RANGES),
        ("limits", LimitsConfig::RANGES),
        ("telemetry", TelemetryConfig::RANGES),
        ("queue", QueueConfig::RANGES),
        ("state", StateConfig::RANGES),
        ("balancing", BalancingConfig::RANGES),
        ("ledger", LedgerConfig::RANGES),
        ("batch", BatchConfig::RANGES),
        ("canary", CanaryConfig::RANGES),
        ("access_log", AccessLogConfig::RANGES),
        ("budgets", BudgetsConfig::RANGES),
    ]
}

/// `tasks[].slo.margin` → `tasks`, `[]`, `slo`, `margin`.
fn key_steps(path: &str) -> Vec<&str> {
    let mut steps = Vec::new();
    for key in path.split('.') {
        match key.strip_suffix("[]") {
            Some(list) => steps.extend([list, "[]"]),
            None => steps.push(key),
        }
    }
    steps
}

/// The schema of the Helm chart's `config` value (`helm/spillway/values.schema.json`): the
/// file's schema as a subschema (no `$schema`), where the keys the chart fills in may be left
/// out (`discovery.kubernetes.namespace`). The chart's rules about the keys it sets itself are
/// the chart's own, outside this property.
pub fn chart_schema() -> Value {
    let mut schema = schema();
    let root = schema.as_object_mut().expect("the root schema is an object");
    root.remove("$schema");
    root.insert(
        "description".into(),
        "The Spillway config (docs/reference.md \"Config reference\"; `spillway config-schema --chart`). The chart \
         sets listen, client_keys_env, admin_token_env, state, ledger.url(_env) and each backend's \
         api_key_env, and fills in discovery.kubernetes.namespace"
            .into(),
    );
    // Only the vllm branch of a backend has discovery.
    let kubernetes = schema
        .pointer_mut("/properties/backends/items/oneOf")
        .and_then(Value::as_array_mut)
        .and_then(|kinds| {
            kinds.iter_mut().find_map(|kind| kind.pointer_mut("/properties/discovery/properties/kubernetes"))
        })
        .and_then(Value::as_object_mut)
        .expect("backends[].discovery.kubernetes is in the schema, inlined");
    if let Some(Value::Array(required)) = kubernetes.get_mut("required") {
        required.retain(|key| key != "namespace");
    }
    if let Some(namespace) = kubernetes.get_mut("properties").and_then(|p| p.get_mut("namespace")) {
        namespace["description"] = "The namespace watched; unset: the chart's discovery.namespace, else the \
             release namespace"
            .into();
    }
    schema
}

/// Doc comments come with their line breaks; a description is one line.
fn join_description_lines(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    Value::String(text) if key == "description" => {
                        *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                    }
                    _ => join_description_lines(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(join_description_lines),
        _ => {}
    }
}

/// The schema of a `rust_decimal::Decimal` as the config reads it (`deserialize_any`): a
/// number, or a string holding one, such as `"0.15"`. Used with `#[schemars(with = ...)]`.
pub(crate) struct DecimalSchema;

impl JsonSchema for DecimalSchema {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Decimal".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": ["number", "string"], "pattern": DECIMAL_PATTERN })
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
