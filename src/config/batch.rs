//! The `batch:` section: the batch APIs' limits, how long files are kept, and how batch lines
//! share the fleet with interactive traffic. Only what the operator writes, its defaults and
//! its checks; `batch` runs the jobs.

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Range, Says};
use super::{yes, Problem};

/// Batch jobs: the OpenAI and Anthropic batch APIs, run on the fleet's free slots.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Serve the batch APIs and run their jobs (default true; they need the ledger store).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Largest input file, in bytes (default 200 MiB, OpenAI's limit).
    pub max_file_bytes: u64,
    /// Most requests in one job (default 50,000, OpenAI's limit).
    pub max_lines: u64,
    /// Days an uploaded file is kept (default 30).
    pub file_retention_days: u64,
    /// A pool takes batch lines only while each node holds less than this share of what it may
    /// hold outside its failover reserve (default 0.8).
    pub occupancy_bar: f64,
    /// Most batch lines on one node at once (default 4).
    pub max_per_node: u32,
    /// How often a replica renews its claims on the lines it runs, in seconds (default 5, 1 to
    /// 10). A claim not renewed for three heartbeats has lapsed: its replica is gone, and
    /// another takes the line over.
    pub heartbeat_secs: u64,
    /// How often the runner looks for lines to start, in milliseconds (default 200).
    pub poll_ms: u64,
    /// Send the lines of a job at risk of missing its window to a hosted provider's batch API
    /// (or, with too little time left for one, to hosted realtime) where the task has such a
    /// backend its policy allows (default true).
    pub spill: bool,
    /// The least time left for which a provider's batch API is tried; with less, hosted
    /// realtime (default 3600 s).
    pub hosted_batch_lead_secs: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            enabled: true,
            max_file_bytes: 200 << 20,
            max_lines: 50_000,
            file_retention_days: 30,
            occupancy_bar: 0.8,
            max_per_node: 4,
            heartbeat_secs: 5,
            poll_ms: 200,
            spill: true,
            hosted_batch_lead_secs: 3600,
        }
    }
}

impl BatchConfig {
    /// The ranges of the section's numbers (keys below `batch`).
    pub const RANGES: &'static [Range] = &[
        Range::at_least("max_file_bytes", 1024.0).says(Says::TooSmall),
        Range::between("max_lines", 1.0, 1_000_000.0).says(Says::OutOfRange),
        Range::between("file_retention_days", 1.0, 3650.0).says(Says::OutOfRange),
        Range::between("occupancy_bar", 0.0, 1.0).says(Says::OutOfRange),
        Range::between("max_per_node", 1.0, 4096.0).says(Says::OutOfRange),
        Range::between("heartbeat_secs", 1.0, 10.0).says(Says::OutOfRange),
        Range::between("poll_ms", 10.0, 60_000.0).says(Says::OutOfRange),
        Range::between("hosted_batch_lead_secs", 0.0, 86_400.0).says(Says::OutOfRange),
    ];

    pub fn check(&self) -> Vec<Problem> {
        let values = [
            ("max_file_bytes", self.max_file_bytes as f64),
            ("max_lines", self.max_lines as f64),
            ("file_retention_days", self.file_retention_days as f64),
            ("occupancy_bar", self.occupancy_bar),
            ("max_per_node", f64::from(self.max_per_node)),
            ("heartbeat_secs", self.heartbeat_secs as f64),
            ("poll_ms", self.poll_ms as f64),
            ("hosted_batch_lead_secs", self.hosted_batch_lead_secs as f64),
        ];
        range::check("batch", Self::RANGES, &values)
    }
}
