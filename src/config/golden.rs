//! Golden sets: a task's examples as JSONL, one item per line: the `messages` to send, an
//! optional `reference` answer, and the `grader` that decides pass or fail. Loading checks
//! every line and every grader and reports each problem with its line number; grading itself
//! is the gate's (`crate::gate::grade`).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::canonical::Message;

/// One example of a task.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenItem {
    pub messages: Vec<Message>,
    #[serde(default)]
    pub reference: Option<String>,
    pub grader: Grader,
}

/// Parse a golden set; every bad line is reported as `line N: why`.
pub fn parse(text: &str) -> Result<Vec<GoldenItem>, Vec<String>> {
    let mut items = Vec::new();
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let n = i + 1;
        match serde_json::from_str::<GoldenItem>(line) {
            Ok(item) if item.messages.is_empty() => problems.push(format!("line {n}: messages is empty")),
            Ok(item) => match item.grader.check(item.reference.as_deref()) {
                Ok(()) => items.push(item),
                Err(why) => problems.push(format!("line {n}: grader: {why}")),
            },
            Err(e) => problems.push(format!("line {n}: {e}")),
        }
    }
    if items.is_empty() && problems.is_empty() {
        problems.push("the golden set has no items".into());
    }
    if problems.is_empty() {
        Ok(items)
    } else {
        Err(problems)
    }
}

/// Read and parse a golden set file.
pub fn load(path: &std::path::Path) -> Result<Vec<GoldenItem>, Vec<String>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| vec![format!("cannot read {}: {e}", path.display())])?;
    parse(&text)
        .map_err(|problems| problems.into_iter().map(|p| format!("{}: {p}", path.display())).collect())
}

/// How an answer is graded.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Grader {
    /// The answer equals `expected` (else the item's `reference`), ignoring surrounding spaces
    /// and, unless `case_sensitive`, letter case.
    Exact {
        /// The expected answer; unset: the item's `reference`.
        #[serde(default)]
        expected: Option<String>,
        /// Compare letter case too.
        #[serde(default)]
        case_sensitive: bool,
    },
    /// The answer contains every one of `all` (case-insensitive).
    Contains {
        /// The strings the answer must contain.
        all: Vec<String>,
    },
    /// The answer matches the regular expression.
    Regex {
        /// The regular expression (Rust `regex` syntax).
        pattern: String,
    },
    /// The answer is JSON (a fenced ```json block is accepted) valid against the schema.
    JsonSchema {
        /// The JSON schema the answer must be valid against.
        schema: Value,
    },
    /// The first number in the answer is within `tolerance` of `value` (else the reference).
    Numeric {
        /// The expected number; unset: the first number of the item's `reference`.
        #[serde(default)]
        value: Option<f64>,
        /// Largest difference that still passes.
        #[serde(default)]
        tolerance: f64,
    },
    /// The answer shares words with the reference: the F1 of their word multisets (lower
    /// case, letters and digits) is at least `min`. For prose whose wording may vary.
    Similar {
        /// Least word F1 that passes (0 to 1).
        #[serde(default = "default_min_similarity")]
        min: f64,
    },
    /// A judge backend scores the answer 0–10 against the rubric; passing is `min_score` or more.
    Judge {
        /// What the judge scores the answer on.
        rubric: String,
        /// Least score (0–10) that passes.
        #[serde(default = "default_min_score")]
        min_score: f64,
    },
}

fn default_min_similarity() -> f64 {
    0.5
}

fn default_min_score() -> f64 {
    7.0
}

impl Grader {
    /// Check the grader itself (a regex that compiles, a schema that is a schema, a reference
    /// where one is needed), so that a bad golden set fails when loaded, not mid-run.
    pub fn check(&self, reference: Option<&str>) -> Result<(), String> {
        match self {
            Grader::Exact { expected: None, .. } if reference.is_none() => {
                Err("exact needs `expected` or the item's `reference`".into())
            }
            Grader::Regex { pattern } => {
                regex::Regex::new(pattern).map(|_| ()).map_err(|e| format!("regex: {e}"))
            }
            Grader::JsonSchema { schema } => {
                jsonschema::validator_for(schema).map(|_| ()).map_err(|e| format!("json_schema: {e}"))
            }
            Grader::Numeric { value: None, .. } if reference.and_then(first_number).is_none() => {
                Err("numeric needs `value` or a reference that holds a number".into())
            }
            Grader::Similar { .. } if reference.is_none() => {
                Err("similar needs the item's `reference`".into())
            }
            Grader::Similar { min } if !(0.0..=1.0).contains(min) => {
                Err("similar: min must be 0 to 1".into())
            }
            Grader::Numeric { tolerance, .. } if tolerance.is_nan() || *tolerance < 0.0 => {
                Err("numeric: tolerance must be ≥ 0".into())
            }
            _ => Ok(()),
        }
    }
}

/// The first decimal number in `text` (`-12`, `3.5`, `1,234.5` with thousands commas).
pub fn first_number(text: &str) -> Option<f64> {
    let re = regex::Regex::new(r"-?\d[\d,]*(?:\.\d+)?").expect("static pattern");
    re.find(text).and_then(|m| m.as_str().replace(',', "").parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Role;
    use crate::gate::grade::Verdict;

    const SET: &str = r#"
{"messages": [{"role": "user", "content": "Capital of France? One word."}], "reference": "Paris", "grader": {"type": "exact"}}
{"messages": [{"role": "system", "content": "Reply in JSON."}, {"role": "user", "content": "Priority of: server down"}], "grader": {"type": "json_schema", "schema": {"type": "object", "required": ["priority"]}}}

{"messages": [{"role": "user", "content": "2+2?"}], "grader": {"type": "numeric", "value": 4}}
"#;

    #[test]
    fn a_set_loads_and_grades() {
        let items = parse(SET).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[1].messages[0].role, Role::System);
        assert_eq!(items[0].grader.grade("paris", items[0].reference.as_deref()), Verdict::Pass);
        assert_eq!(items[2].grader.grade("It is 4.", None), Verdict::Pass);
    }

    #[test]
    fn every_bad_line_is_named() {
        let text = "{\"messages\": [], \"grader\": {\"type\": \"exact\", \"expected\": \"x\"}}\n\
                    not json\n\
                    {\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"grader\": {\"type\": \"regex\", \"pattern\": \"(\"}}\n\
                    {\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"grader\": {\"type\": \"exact\"}, \"extra\": 1}\n";
        let problems = parse(text).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert_eq!(problems[0], "line 1: messages is empty");
        assert!(problems[1].starts_with("line 2: "));
        assert!(problems[2].starts_with("line 3: grader: regex:"));
        assert!(problems[3].contains("unknown field `extra`"));
        assert_eq!(parse("\n\n").unwrap_err(), vec!["the golden set has no items".to_string()]);
    }
}
