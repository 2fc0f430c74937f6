//! The `policy:` section: the hard rules of each data class (regions, hosted or not, data
//! terms). Only what the operator writes and its defaults; `policy` applies it, and a task's
//! `data_class` is checked against it where sections meet (`validate`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::yes;

/// Data classes that exist without being listed under `policy.data_classes`.
pub const BUILTIN_DATA_CLASSES: &[&str] = &["public", "internal"];

/// Hard rules per data class.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// What each data class allows, by its name.
    #[serde(default)]
    pub data_classes: BTreeMap<String, DataClassPolicy>,
}

/// What a data class allows. `public` and `internal` exist without being listed and allow
/// everything unless listed otherwise.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataClassPolicy {
    /// Regions a backend must be in; unset: any region.
    #[serde(default)]
    pub regions: Option<Vec<String>>,
    /// May hosted (non-vLLM) backends see this data?
    #[serde(default = "yes")]
    pub allow_hosted: bool,
    /// Longest a backend may keep the data (its `terms.retention_days`; zero data retention
    /// counts as 0). Unset: any.
    #[serde(default)]
    pub max_retention_days: Option<u32>,
    /// Only backends whose terms say `trains_on_data: false`.
    #[serde(default)]
    pub no_training: bool,
    /// Only backends whose terms say `zero_data_retention: true`.
    #[serde(default)]
    pub zero_data_retention: bool,
}
