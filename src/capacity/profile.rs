//! The load profile the capacity plan works from: per task, how many requests a minute and
//! how large they are, plus what the config cannot know (pool throughput, measured token
//! ratios). Unknown keys are rejected and every problem is reported with its key path, like
//! the config loader does; the profile is checked against the config it describes.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_yaml_ng::Value;

use crate::config::{Config, Priority, Problem};

/// A whole profile file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Profile {
    /// Load per task, by task name.
    pub tasks: BTreeMap<String, TaskProfile>,
    /// Throughput of vLLM pools, by backend name.
    pub pools: BTreeMap<String, PoolProfile>,
    /// Measured tokens per o200k token, by backend name, overriding the counter's built-in
    /// ratio (calibrate on your own traffic: the built-in estimates are for English prose).
    pub token_ratios: BTreeMap<String, f64>,
}

/// One task's load at the hour being planned for (peak, usually).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskProfile {
    pub requests_per_minute: f64,
    /// Average input tokens per request, in reference (o200k_base) tokens.
    pub input_tokens: f64,
    /// Average output tokens per request, in reference (o200k_base) tokens.
    pub output_tokens: f64,
    /// Default: the task's configured priority (standard unless set).
    #[serde(default)]
    pub priority: Option<Priority>,
    /// Shares by backend in normal operation, adding up to 1. Default: all to the first
    /// backend in the task's preference order.
    #[serde(default)]
    pub split: Option<BTreeMap<String, f64>>,
}

/// What a vLLM pool sustains.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolProfile {
    /// Tokens (input + output, the pool's own tokens) per minute the whole pool serves
    /// within its SLO, measured or from a load test.
    pub tokens_per_minute: f64,
}

const TOP_KEYS: &[&str] = &["tasks", "pools", "token_ratios"];

/// Read and check a profile file against `config`.
pub fn load_profile(path: &Path, config: &Config) -> Result<Profile, Vec<Problem>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![Problem::new("", format!("cannot read {}: {e}", path.display()))])?;
    parse_profile(&text, config)
}

/// Parse and check profile text against `config`.
pub fn parse_profile(text: &str, config: &Config) -> Result<Profile, Vec<Problem>> {
    let root: Value =
        serde_yaml_ng::from_str(text).map_err(|e| vec![Problem::new("", format!("not valid YAML: {e}"))])?;
    let map = match root {
        Value::Mapping(map) => map,
        Value::Null => serde_yaml_ng::Mapping::new(),
        _ => return Err(vec![Problem::new("", "the profile must be a mapping of keys to values")]),
    };
    let mut problems = Vec::new();
    let mut profile = Profile::default();
    for (key, value) in map {
        let Some(name) = key.as_str() else {
            problems.push(Problem::new("", format!("keys must be strings, found {key:?}")));
            continue;
        };
        match name {
            "tasks" => profile.tasks = entries::<TaskProfile>(name, value, &mut problems),
            "pools" => profile.pools = entries::<PoolProfile>(name, value, &mut problems),
            "token_ratios" => profile.token_ratios = entries::<f64>(name, value, &mut problems),
            _ => problems
                .push(Problem::new(name, format!("unknown key; expected one of {}", TOP_KEYS.join(", ")))),
        }
    }
    check(&profile, config, &mut problems);
    if problems.is_empty() {
        Ok(profile)
    } else {
        Err(problems)
    }
}

/// Decode a mapping of names to `T`, each entry on its own so that every bad entry is reported.
fn entries<T: DeserializeOwned>(
    path: &str,
    value: Value,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    let map = match value {
        Value::Mapping(map) => map,
        Value::Null => return out,
        _ => {
            problems.push(Problem::new(path, "expected a mapping of names to entries"));
            return out;
        }
    };
    for (key, item) in map {
        let Some(name) = key.as_str() else {
            problems.push(Problem::new(path, format!("names must be strings, found {key:?}")));
            continue;
        };
        let at = format!("{path}.{name}");
        match serde_path_to_error::deserialize::<_, T>(item) {
            Ok(v) => {
                out.insert(name.to_string(), v);
            }
            Err(err) => {
                let inner = err.path().to_string();
                let full = if inner == "." { at } else { format!("{at}.{inner}") };
                problems.push(Problem::new(full, err.into_inner().to_string()));
            }
        }
    }
    out
}

fn check(profile: &Profile, config: &Config, problems: &mut Vec<Problem>) {
    let mut p = |path: String, message: String| problems.push(Problem::new(path, message));
    let number = |v: f64| v.is_finite() && v >= 0.0;
    for (name, t) in &profile.tasks {
        let at = format!("tasks.{name}");
        let Some(task) = config.task(name) else {
            let known: Vec<&str> = config.tasks.iter().map(|t| t.name.as_str()).collect();
            p(at, format!("no task of that name in the config (tasks: {})", known.join(", ")));
            continue;
        };
        for (key, v) in [
            ("requests_per_minute", t.requests_per_minute),
            ("input_tokens", t.input_tokens),
            ("output_tokens", t.output_tokens),
        ] {
            if !number(v) {
                p(format!("{at}.{key}"), format!("{v} must be a number of at least 0"));
            }
        }
        if let Some(split) = &t.split {
            let mut sum = 0.0;
            for (backend, share) in split {
                if !task.backends.contains(backend) {
                    p(
                        format!("{at}.split.{backend}"),
                        format!("not one of the task's backends ({})", task.backends.join(", ")),
                    );
                }
                if !(share.is_finite() && (0.0..=1.0).contains(share)) {
                    p(format!("{at}.split.{backend}"), format!("share {share} must be between 0 and 1"));
                }
                sum += share;
            }
            if (sum - 1.0).abs() > 1e-6 {
                p(format!("{at}.split"), format!("shares add up to {sum}; they must add up to 1"));
            }
        }
    }
    for (name, pool) in &profile.pools {
        let at = format!("pools.{name}");
        match config.backend(name) {
            None => p(at, "no backend of that name in the config".into()),
            Some(b) if !b.kind().is_local() => {
                p(at, format!("`{name}` is a hosted backend; its capacity is its quota in the config"))
            }
            Some(_) if !(pool.tokens_per_minute.is_finite() && pool.tokens_per_minute > 0.0) => p(
                format!("{at}.tokens_per_minute"),
                format!("{} must be a number above 0", pool.tokens_per_minute),
            ),
            Some(_) => {}
        }
    }
    for (name, ratio) in &profile.token_ratios {
        let at = format!("token_ratios.{name}");
        if config.backend(name).is_none() {
            p(at, "no backend of that name in the config".into());
        } else if !(ratio.is_finite() && *ratio > 0.0) {
            p(at, format!("{ratio} must be a number above 0"));
        }
    }
}
