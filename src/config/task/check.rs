//! What types cannot say about the tasks on their own: names and aliases used once, weights,
//! the ranges of the SLO and the output cap, the gate's and the shadow's numbers. Pure: reads
//! the config only. What a task names in another section (backends, data classes, client keys)
//! is checked where the sections meet (`validate`).

use std::collections::HashSet;

use super::super::range::{self, Bound, Range, Says};
use super::{Strategy, TaskConfig};
use crate::config::Problem;

/// Above 0 and below 1 (`0.99`).
const fn share(key: &'static str) -> Range {
    Range::new(key, Bound::Excl(0.0), Bound::Excl(1.0)).note(" (e.g. 0.99)")
}

impl TaskConfig {
    /// The ranges of a task's numbers (keys below `tasks[]`).
    pub const RANGES: &'static [Range] = &[
        Range::new("slo.margin", Bound::Incl(0.0), Bound::Excl(1.0)),
        share("slo.objective"),
        share("slo.availability"),
        Range::new("slo.ttft_ms", Bound::Excl(0.0), Bound::Open),
        Range::at_least("max_output_tokens", 1.0),
        Range::between("gate.min_pass", 0.0, 1.0).says(Says::To),
        Range::at_least("gate.concurrency", 1.0),
        Range::between("shadow.rate", 0.0, 1.0).says(Says::To),
    ];

    /// The task's values that have a range (the gate's and the shadow's where they are set).
    fn ranged(&self) -> Vec<(&'static str, f64)> {
        let mut values = vec![
            ("slo.margin", self.slo.margin),
            ("slo.objective", self.slo.objective),
            ("slo.availability", self.slo.availability),
            ("slo.ttft_ms", self.slo.ttft_ms as f64),
        ];
        values.extend(self.max_output_tokens.map(|n| ("max_output_tokens", n as f64)));
        if let Some(gate) = &self.gate {
            values.push(("gate.min_pass", gate.min_pass));
            values.push(("gate.concurrency", gate.concurrency as f64));
        }
        values.extend(self.shadow.as_ref().map(|s| ("shadow.rate", s.rate)));
        values
    }
}

/// Every task's own problems, and names or aliases used twice.
pub fn all(tasks: &[TaskConfig]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    for (i, t) in tasks.iter().enumerate() {
        let at = format!("tasks[{i}]");
        let mut p = |key: &str, message: String| problems.push(Problem::new(format!("{at}.{key}"), message));
        if t.name.is_empty() {
            p("name", "must not be empty".into());
        } else if !names.insert(t.name.as_str()) {
            p("name", format!("`{}` is used by another task", t.name));
        }
        for (j, alias) in t.aliases.iter().enumerate() {
            if alias.is_empty() {
                p(&format!("aliases[{j}]"), "must not be empty".into());
            } else if !names.insert(alias.as_str()) {
                p(&format!("aliases[{j}]"), format!("`{alias}` already names a task or an alias"));
            }
        }
        if t.backends.is_empty() {
            p("backends", "must name at least one backend".into());
        }
        for (name, weight) in &t.weights {
            if !t.backends.contains(name) {
                p(&format!("weights.{name}"), "is not one of this task's backends".into());
            }
            if !(weight.is_finite() && *weight >= 0.0) {
                p(&format!("weights.{name}"), "must be a number ≥ 0".into());
            }
        }
        if !t.weights.is_empty() && t.strategy != Strategy::Weighted {
            p("weights", "only used with strategy: weighted".into());
        }
        problems.extend(range::check(&at, TaskConfig::RANGES, &t.ranged()));
    }
    problems
}
