//! Reading a YAML config into [`Config`], collecting every problem with its key path.
//!
//! serde stops at the first error of a value, so the document is first read as a YAML tree and
//! each top-level key and each backend and task is decoded on its own (`structure`): one bad
//! backend does not hide the problems of the next, and within one item every unknown key,
//! wrong type and missing required key is found. Semantic
//! checks then run on whatever decoded, in the same report: nothing is held back until the
//! structural problems are fixed, and nothing is reported twice (a task naming a backend that
//! did not decode, a check of a default standing in for a bad key). Last, the files a backend
//! names (`tokenizer_file`) are read, relative paths from the config file's directory (from the
//! working directory for text parsed without a file).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use super::structure::{problem, Structure};
use super::tree::{join, steps};
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

    /// Problems one per line, indented (under a line that names the file).
    pub fn indented(problems: &[Problem]) -> String {
        problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n")
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
    let (mut s, clean) = Structure::read(map);
    let mut config: Config = match decode("", Value::Mapping(clean)) {
        Ok(config) => config,
        Err(problem) => {
            s.problems.push(problem);
            return Err(s.problems);
        }
    };
    // Semantic checks run on what decoded: their paths are turned back into the file's list
    // positions, and what they say about a key already reported (or about its stand-in
    // default) is left out.
    let mut semantic = super::validate::validate(&config, &s.undecoded);
    semantic.extend(super::evaluation::prepare(&mut config, base, &s.undecoded));
    semantic.extend(load_tokenizers(&mut config, base));
    semantic.extend(resolve_credentials_files(&mut config, base));
    semantic.extend(super::tls::prepare(&mut config, base));
    let mut problems = s.problems;
    for mut problem in semantic {
        problem.path = renumber(&problem.path, "backends", &s.backend_at);
        problem.path = renumber(&problem.path, "tasks", &s.task_at);
        if !s.peeled.iter().any(|peeled| is_under(&problem.path, peeled)) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

/// `path` is `prefix` or a key below it.
fn is_under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// `list[k]…` → `list[at[k]]…`: a position among the decoded items back to the file's.
fn renumber(path: &str, list: &str, at: &[usize]) -> String {
    let renumbered = path
        .strip_prefix(list)
        .and_then(|rest| rest.strip_prefix('['))
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(k, rest)| Some((at.get(k.parse::<usize>().ok()?)?, rest)));
    match renumbered {
        Some((i, rest)) => format!("{list}[{i}]{rest}"),
        None => path.to_string(),
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

/// Resolve each Vertex backend's `credentials_file` against `base`, and check that it is a
/// service-account file (the file is read again, for its key, when the first token is fetched).
fn resolve_credentials_files(config: &mut Config, base: Option<&Path>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, backend) in config.backends.iter_mut().enumerate() {
        let crate::config::BackendSpec::Vertex(vertex) = &mut backend.spec else { continue };
        let Some(file) = &vertex.credentials_file else { continue };
        let path = match base {
            Some(base) if file.is_relative() => base.join(file),
            _ => file.clone(),
        };
        let kind = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|text| {
                serde_json::from_str::<serde_json::Value>(&text)
                    .map_err(|e| format!("{}: not JSON: {e}", path.display()))
            })
            .map(|json| json.get("type").and_then(serde_json::Value::as_str).unwrap_or_default().to_string());
        match kind {
            Ok(kind) if kind == "service_account" => vertex.credentials_file = Some(path),
            Ok(kind) => problems.push(Problem::new(
                format!("backends[{i}].credentials_file"),
                format!("{}: type {kind:?} is not a service account (\"service_account\"); other credentials come from Application Default Credentials", path.display()),
            )),
            Err(why) => problems.push(Problem::new(format!("backends[{i}].credentials_file"), why)),
        }
    }
    problems
}

fn decode<T: DeserializeOwned>(prefix: &str, value: Value) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = join(prefix, &steps(err.path()));
        problem(path, err.into_inner().to_string())
    })
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
