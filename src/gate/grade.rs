//! Graders: whether one answer passes one golden item. Pure and deterministic, except `judge`,
//! which needs a model call and is therefore only described here (the gate runner asks the
//! judge backend and parses its score with [`parse_judge_score`]).

use serde_json::Value;

use crate::config::golden::{first_number, Grader};

/// The outcome of grading one answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Pass,
    Fail(String),
    /// The grader is `judge`: a model must score it.
    NeedsJudge,
}

impl Grader {
    /// Grade `answer` (the model's text) against this grader and the item's `reference`.
    pub(crate) fn grade(&self, answer: &str, reference: Option<&str>) -> Verdict {
        let fail = |why: String| Verdict::Fail(why);
        match self {
            Grader::Exact { expected, case_sensitive } => {
                let want = expected.as_deref().or(reference).unwrap_or_default().trim();
                let got = answer.trim();
                let same =
                    if *case_sensitive { got == want } else { got.to_lowercase() == want.to_lowercase() };
                if same {
                    Verdict::Pass
                } else {
                    fail(format!("expected {want:?}, got {:?}", clip(got)))
                }
            }
            Grader::Contains { all } => {
                let lower = answer.to_lowercase();
                match all.iter().find(|s| !lower.contains(&s.to_lowercase())) {
                    None => Verdict::Pass,
                    Some(missing) => fail(format!("missing {missing:?}")),
                }
            }
            Grader::Regex { pattern } => match regex::Regex::new(pattern) {
                Ok(re) if re.is_match(answer) => Verdict::Pass,
                Ok(_) => fail(format!("does not match /{pattern}/")),
                Err(e) => fail(format!("regex: {e}")),
            },
            Grader::JsonSchema { schema } => {
                let Some(doc) = json_in(answer) else { return fail("not JSON".into()) };
                match jsonschema::validator_for(schema) {
                    Ok(v) => match v.iter_errors(&doc).next() {
                        None => Verdict::Pass,
                        Some(e) => fail(format!("schema: {e} at {}", e.instance_path())),
                    },
                    Err(e) => fail(format!("json_schema: {e}")),
                }
            }
            Grader::Numeric { value, tolerance } => {
                let Some(want) = value.or_else(|| reference.and_then(first_number)) else {
                    return fail("no expected number".into());
                };
                match first_number(answer) {
                    Some(got) if (got - want).abs() <= *tolerance => Verdict::Pass,
                    Some(got) => fail(format!("{got} is not within {tolerance} of {want}")),
                    None => fail("no number in the answer".into()),
                }
            }
            Grader::Similar { min } => {
                let score = word_f1(answer, reference.unwrap_or_default());
                if score >= *min {
                    Verdict::Pass
                } else {
                    fail(format!("word overlap {score:.2} is below {min}"))
                }
            }
            Grader::Judge { .. } => Verdict::NeedsJudge,
        }
    }
}

/// F1 of the two texts' word multisets (1 when both are empty).
pub(crate) fn word_f1(a: &str, b: &str) -> f64 {
    let words = |s: &str| -> std::collections::HashMap<String, usize> {
        let mut counts = std::collections::HashMap::new();
        for w in s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            *counts.entry(w.to_lowercase()).or_insert(0) += 1;
        }
        counts
    };
    let (a, b) = (words(a), words(b));
    let (na, nb): (usize, usize) = (a.values().sum(), b.values().sum());
    if na == 0 && nb == 0 {
        return 1.0;
    }
    let common: usize = a.iter().map(|(w, n)| (*n).min(b.get(w).copied().unwrap_or(0))).sum();
    if common == 0 {
        return 0.0;
    }
    let precision = common as f64 / na as f64;
    let recall = common as f64 / nb as f64;
    2.0 * precision * recall / (precision + recall)
}

fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The JSON document in an answer: the whole text, or the body of a fenced code block.
fn json_in(answer: &str) -> Option<Value> {
    let text = answer.trim();
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    let body = text.split("```").nth(1)?;
    let body = body.strip_prefix("json").unwrap_or(body);
    serde_json::from_str(body.trim()).ok()
}

/// The judge's score (0–10): the first number in its reply, or `None` when there is none or
/// it is out of range.
pub(crate) fn parse_judge_score(reply: &str) -> Option<f64> {
    first_number(reply).filter(|s| (0.0..=10.0).contains(s))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn grader(v: Value) -> Grader {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn similar_scores_word_overlap() {
        assert_eq!(word_f1("The cat sat", "the CAT sat"), 1.0);
        assert_eq!(word_f1("dog", "cat"), 0.0);
        let half = word_f1("a b", "a c");
        assert!((half - 0.5).abs() < 1e-9, "{half}");
        let g = grader(serde_json::json!({"type": "similar"}));
        assert_eq!(
            g.grade("Reset the router, then call support.", Some("reset the router and call support")),
            Verdict::Pass
        );
        assert!(matches!(g.grade("No idea.", Some("reset the router and call support")), Verdict::Fail(_)));
        assert!(g.check(None).is_err());
    }

    #[test]
    fn exact_contains_regex() {
        let exact = grader(json!({"type": "exact"}));
        assert_eq!(exact.grade("  Paris\n", Some("paris")), Verdict::Pass);
        assert!(matches!(exact.grade("Lyon", Some("Paris")), Verdict::Fail(w) if w.contains("\"Paris\"")));
        let strict = grader(json!({"type": "exact", "expected": "OK", "case_sensitive": true}));
        assert!(matches!(strict.grade("ok", None), Verdict::Fail(_)));
        assert_eq!(exact.check(None).unwrap_err(), "exact needs `expected` or the item's `reference`");
        let contains = grader(json!({"type": "contains", "all": ["refund", "7 days"]}));
        assert_eq!(contains.grade("A REFUND within 7 days.", None), Verdict::Pass);
        assert_eq!(contains.grade("A refund.", None), Verdict::Fail("missing \"7 days\"".into()));
        let re = grader(json!({"type": "regex", "pattern": "^TICKET-\\d{4}$"}));
        assert_eq!(re.grade("TICKET-1234", None), Verdict::Pass);
        assert!(matches!(re.grade("TICKET-12", None), Verdict::Fail(_)));
        assert!(grader(json!({"type": "regex", "pattern": "("}))
            .check(None)
            .unwrap_err()
            .starts_with("regex:"));
    }

    #[test]
    fn json_schema_and_numbers() {
        let schema = grader(json!({"type": "json_schema", "schema": {
            "type": "object", "required": ["priority"],
            "properties": {"priority": {"enum": ["low", "high"]}}, "additionalProperties": false}}));
        assert_eq!(schema.grade(r#"{"priority": "high"}"#, None), Verdict::Pass);
        assert_eq!(schema.grade("```json\n{\"priority\": \"low\"}\n```", None), Verdict::Pass);
        assert!(
            matches!(schema.grade(r#"{"priority": "urgent"}"#, None), Verdict::Fail(w) if w.contains("/priority"))
        );
        assert_eq!(schema.grade("high priority", None), Verdict::Fail("not JSON".into()));
        let bad_schema = grader(json!({"type": "json_schema", "schema": {"type": 12}}));
        assert!(bad_schema.check(None).is_err());

        let numeric = grader(json!({"type": "numeric", "tolerance": 0.5}));
        assert_eq!(numeric.grade("The total is 1,234.4 EUR", Some("1234")), Verdict::Pass);
        assert!(matches!(numeric.grade("about 1240", Some("1234")), Verdict::Fail(_)));
        assert_eq!(numeric.grade("none", Some("3")), Verdict::Fail("no number in the answer".into()));
        assert!(numeric.check(Some("no digits")).is_err());
        assert_eq!(first_number("minus -3.25 then 4"), Some(-3.25));
    }

    #[test]
    fn judge_is_left_to_a_model() {
        let judge = grader(json!({"type": "judge", "rubric": "Is it polite?"}));
        assert_eq!(judge.grade("anything", None), Verdict::NeedsJudge);
        assert_eq!(parse_judge_score("Score: 8/10 — polite."), Some(8.0));
        assert_eq!(parse_judge_score("I refuse"), None);
        assert_eq!(parse_judge_score("42"), None);
        assert!(serde_json::from_value::<Grader>(json!({"type": "exact", "expectd": "x"})).is_err());
    }
}
