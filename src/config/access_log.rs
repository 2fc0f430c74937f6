//! The `access_log:` section: how much the router writes about each HTTP request it answers
//! (the access line). Only what the operator writes, its defaults and its range.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::range::{self, Range};
use super::Problem;

/// How much the router writes about each HTTP request it answers (the access line).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogConfig {
    /// The level of the per-request line (`info`, `debug`, or `off`: none). It is written only
    /// where `RUST_LOG` lets that level through.
    pub level: AccessLogLevel,
    /// The share of answered requests that get a line, from 0 to 1. Answers with a 5xx status
    /// always get one.
    pub sample: f64,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig { level: AccessLogLevel::Info, sample: 1.0 }
    }
}

/// The level of the access line.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogLevel {
    /// Logged at `info`.
    Info,
    /// Logged at `debug`.
    Debug,
    /// No access line.
    Off,
}

impl AccessLogConfig {
    /// The ranges of the section's numbers (keys below `access_log`).
    pub const RANGES: &'static [Range] = &[Range::between("sample", 0.0, 1.0)];

    pub fn check(&self) -> Vec<Problem> {
        range::check("access_log", Self::RANGES, &[("sample", self.sample)])
    }
}
