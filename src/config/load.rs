//! Reading a YAML config into [`Config`], collecting every problem with its key path.
//!
//! serde stops at the first error of a value, so the document is first read as a YAML tree and
//! each top-level key and each backend and task is decoded on its own: one bad backend does not
//! hide the problems of the next. Semantic checks then run on whatever decoded. Last, the files
//! a backend names (`tokenizer_file`) are read, relative paths from the config file's
//! directory (from the working directory for text parsed without a file).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use super::Config;

/// One thing wrong with a config, at a key path such as `backends[1].price.input_per_mtok`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

const TOP_KEYS: &[&str] = &[
    "listen",
    "client_keys_env",
    "backends",
    "tasks",
    "policy",
    "dispatch",
    "limits",
    "telemetry",
    "state",
    "balancing",
    "ledger",
    "admin_token_env",
    "canary",
];

/// Read and check a config file.
pub fn load_file(path: &Path) -> Result<Config, Vec<Problem>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![Problem::new("", format!("cannot read {}: {e}", path.display()))])?;
    let mut config = parse_in(&text, path.parent())?;
    config.source = Some(path.to_path_buf());
    Ok(config)
}

/// Parse and check config text; files it names are relative to the working directory.
pub fn parse(text: &str) -> Result<Config, Vec<Problem>> {
    parse_in(text, None)
}

/// Parse and check config text whose relative file paths start at `base`.
pub fn parse_in(text: &str, base: Option<&Path>) -> Result<Config, Vec<Problem>> {
    let root: Value =
        serde_yaml_ng::from_str(text).map_err(|e| vec![Problem::new("", format!("not valid YAML: {e}"))])?;
    let Value::Mapping(map) = root else {
        return Err(vec![Problem::new("", "the config must be a mapping of keys to values")]);
    };
    let mut problems = Vec::new();
    let mut clean = serde_yaml_ng::Mapping::new();
    for (key, value) in map {
        let Some(name) = key.as_str() else {
            problems.push(Problem::new("", format!("keys must be strings, found {key:?}")));
            continue;
        };
        if !TOP_KEYS.contains(&name) {
            problems
                .push(Problem::new(name, format!("unknown key; expected one of {}", TOP_KEYS.join(", "))));
            continue;
        }
        let ok = match name {
            "backends" => check_list::<super::BackendConfig>(name, &value, &mut problems),
            "tasks" => check_list::<super::TaskConfig>(name, &value, &mut problems),
            "listen" => check::<String>(name, &value, &mut problems),
            "client_keys_env" => check::<Vec<String>>(name, &value, &mut problems),
            "policy" => check::<super::PolicyConfig>(name, &value, &mut problems),
            "dispatch" => check::<super::DispatchConfig>(name, &value, &mut problems),
            "limits" => check::<super::LimitsConfig>(name, &value, &mut problems),
            "telemetry" => check::<super::TelemetryConfig>(name, &value, &mut problems),
            "state" => check::<super::StateConfig>(name, &value, &mut problems),
            "ledger" => check::<super::LedgerConfig>(name, &value, &mut problems),
            "canary" => check::<super::CanaryConfig>(name, &value, &mut problems),
            "admin_token_env" => check::<Option<String>>(name, &value, &mut problems),
            _ => check::<super::BalancingConfig>(name, &value, &mut problems),
        };
        if ok {
            clean.insert(Value::String(name.to_string()), value);
        }
    }
    for required in ["backends", "tasks"] {
        if !clean.contains_key(required) && !problems.iter().any(|p| p.path.starts_with(required)) {
            problems.push(Problem::new(required, "missing (required)"));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut config: Config = decode("", Value::Mapping(clean)).map_err(|p| vec![p])?;
    let mut problems = super::validate::validate(&config);
    problems.extend(super::evaluation::prepare(&mut config, base));
    problems.extend(load_tokenizers(&mut config, base));
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

/// Resolve each backend's `tokenizer_file` against `base` and load it.
fn load_tokenizers(config: &mut Config, base: Option<&Path>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, backend) in config.backends.iter_mut().enumerate() {
        let Some(file) = &backend.tokenizer_file else { continue };
        let path = match base {
            Some(base) if file.is_relative() => base.join(file),
            _ => file.clone(),
        };
        match crate::tokens::FileTokenizer::load(&path) {
            Ok(loaded) => {
                backend.tokenizer_file = Some(path);
                backend.tokenizer_loaded = Some(Arc::new(loaded));
            }
            Err(why) => problems.push(Problem::new(format!("backends[{i}].tokenizer_file"), why)),
        }
    }
    problems
}

fn check<T: DeserializeOwned>(path: &str, value: &Value, problems: &mut Vec<Problem>) -> bool {
    match decode::<T>(path, value.clone()) {
        Ok(_) => true,
        Err(p) => {
            problems.push(p);
            false
        }
    }
}

fn check_list<T: DeserializeOwned>(path: &str, value: &Value, problems: &mut Vec<Problem>) -> bool {
    let Value::Sequence(items) = value else {
        problems.push(Problem::new(path, "expected a list"));
        return false;
    };
    let before = problems.len();
    for (i, item) in items.iter().enumerate() {
        check::<T>(&format!("{path}[{i}]"), item, problems);
    }
    problems.len() == before
}

fn decode<T: DeserializeOwned>(prefix: &str, value: Value) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.path().to_string();
        let path = match (prefix.is_empty(), inner.as_str()) {
            (_, ".") => prefix.to_string(),
            (true, _) => inner,
            (false, _) if inner.starts_with('[') => format!("{prefix}{inner}"),
            (false, _) => format!("{prefix}.{inner}"),
        };
        let mut message = err.into_inner().to_string();
        if message.contains("unknown field `api_key`") {
            message.push_str("; secrets are never written in the config: name the environment variable that holds it with api_key_env");
        }
        Problem::new(path, message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../spillway.example.yaml");

    #[test]
    fn the_example_config_loads() {
        let config = parse(EXAMPLE).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(config.backends.len(), 3);
        assert_eq!(config.tasks[0].backends, ["local-llama", "anthropic", "openai"]);
        assert_eq!(config.listen, "127.0.0.1:8080");
    }

    #[test]
    fn every_structural_problem_is_reported_with_its_path() {
        let text = r#"
listen: 127.0.0.1:8080
colour: blue
backends:
  - name: a
    kind: vllm
    endpoints: [http://127.0.0.1:1]
    model: m
    price: {input_per_mtok: cheap, output_per_mtok: 1}
  - name: b
    kind: martian
    model: m
  - name: c
    kind: openai
    model: m
    api_key: sk-inline-secret
tasks:
  - name: t
    backends: [a]
    slo: {ttft_ms: 800}
"#;
        let problems = parse(text).unwrap_err();
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"colour"), "{problems:?}");
        assert!(paths.contains(&"backends[0].price.input_per_mtok"), "{problems:?}");
        assert!(paths.contains(&"backends[1].kind"), "{problems:?}");
        let secret = problems.iter().find(|p| p.path == "backends[2].api_key").unwrap();
        assert!(secret.message.contains("api_key_env"), "{secret}");
    }

    #[test]
    fn bad_yaml_and_missing_sections_are_problems_not_panics() {
        assert!(parse("listen: [unclosed").unwrap_err()[0].message.contains("YAML"));
        let problems = parse("listen: 127.0.0.1:1").unwrap_err();
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].to_string(), "backends: missing (required)");
        assert!(parse("- a\n- b").is_err());
    }
}
