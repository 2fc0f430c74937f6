//! Ranges beside their fields: each section lists the bounds of its numbers once, in a table
//! that its `check` reads and that the JSON schema turns into `minimum` and `maximum`, so the
//! check, the schema (an editor, the Helm chart) and the reference cannot disagree. Pure data
//! and arithmetic: no I/O, no knowledge of any one section.

use serde_json::Value;

use super::Problem;

/// One end of a range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// No bound at this end (beyond what the field's type allows).
    Open,
    /// The value may equal it.
    Incl(f64),
    /// The value must stay strictly beyond it.
    Excl(f64),
}

/// How a value out of range is reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Says {
    /// `must be at least 1`, `must be above 0 and at most 1`, …
    Must,
    /// `6000 is out of range: 100 to 5000`
    OutOfRange,
    /// `1000 is too small: at least 1048576`
    TooSmall,
    /// `at most 4 (why), not 5`: the note before the value.
    AtMostNot,
    /// `must be 0 to 1`
    To,
}

/// The bounds of one numeric key of a section, by its path within the section
/// (`breaker.error_rate`), with how a value outside them is reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub key: &'static str,
    pub min: Bound,
    pub max: Bound,
    pub says: Says,
    /// Said after the range: ` (5 minutes)`.
    pub note: &'static str,
}

impl Range {
    pub const fn new(key: &'static str, min: Bound, max: Bound) -> Range {
        Range { key, min, max, says: Says::Must, note: "" }
    }

    /// At least `min`, no upper bound.
    pub const fn at_least(key: &'static str, min: f64) -> Range {
        Range::new(key, Bound::Incl(min), Bound::Open)
    }

    /// From `min` to `max`, both included.
    pub const fn between(key: &'static str, min: f64, max: f64) -> Range {
        Range::new(key, Bound::Incl(min), Bound::Incl(max))
    }

    pub const fn says(self, says: Says) -> Range {
        Range { says, ..self }
    }

    pub const fn note(self, note: &'static str) -> Range {
        Range { note, ..self }
    }

    /// Whether `value` lies inside; a number that is not finite never does.
    pub fn admits(&self, value: f64) -> bool {
        let above = match self.min {
            Bound::Open => true,
            Bound::Incl(min) => value >= min,
            Bound::Excl(min) => value > min,
        };
        let below = match self.max {
            Bound::Open => true,
            Bound::Incl(max) => value <= max,
            Bound::Excl(max) => value < max,
        };
        value.is_finite() && above && below
    }

    /// What is wrong with `value` (outside the range).
    pub fn message(&self, value: f64) -> String {
        use Bound::*;
        if let (Says::AtMostNot, Incl(b)) = (self.says, self.max) {
            return format!("at most {b}{}, not {value}", self.note);
        }
        let range = match (self.says, self.min, self.max) {
            (Says::OutOfRange, Incl(a), Incl(b)) => format!("{value} is out of range: {a} to {b}"),
            (Says::TooSmall, Incl(a), _) => format!("{value} is too small: at least {a}"),
            (Says::To, Incl(a), Incl(b)) => format!("must be {a} to {b}"),
            (_, Incl(a), Open) => format!("must be at least {a}"),
            (_, Excl(a), Open) => format!("must be above {a}"),
            (_, Open, Incl(b)) => format!("must be at most {b}"),
            (_, Open, Excl(b)) => format!("must be below {b}"),
            (_, Incl(a), Incl(b)) => format!("must be between {a} and {b}"),
            (_, Excl(a), Incl(b)) => format!("must be above {a} and at most {b}"),
            (_, Incl(a), Excl(b)) => format!("must be at least {a} and below {b}"),
            (_, Excl(a), Excl(b)) => format!("must be above {a} and below {b}"),
            (_, Open, Open) => "must be a finite number".to_string(),
        };
        format!("{range}{}", self.note)
    }

    /// This range as JSON schema keywords (draft-07): `minimum` or `exclusiveMinimum`, and the
    /// same at the top.
    pub fn schema_keywords(&self) -> Vec<(&'static str, f64)> {
        let mut out = Vec::new();
        match self.min {
            Bound::Incl(v) => out.push(("minimum", v)),
            Bound::Excl(v) => out.push(("exclusiveMinimum", v)),
            Bound::Open => {}
        }
        match self.max {
            Bound::Incl(v) => out.push(("maximum", v)),
            Bound::Excl(v) => out.push(("exclusiveMaximum", v)),
            Bound::Open => {}
        }
        out
    }
}

/// Check each `(key, value)` against its range in `ranges`; a problem is at `prefix.key`.
/// Every value must have a range (a key without one is a bug in the section's table).
pub fn check(prefix: &str, ranges: &[Range], values: &[(&str, f64)]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for &(key, value) in values {
        let range = ranges.iter().find(|r| r.key == key);
        let range = range.unwrap_or_else(|| panic!("{prefix}.{key} has no range in its section's table"));
        if !range.admits(value) {
            problems.push(Problem::new(format!("{prefix}.{key}"), range.message(value)));
        }
    }
    problems
}

/// Put `range`'s bounds into `schema` at the key path `path` (`tasks[].slo.margin`: `[]` is a
/// list's items), in every branch that has the key; how many places took them.
pub fn apply(schema: &mut Value, path: &[&str], range: &Range) -> usize {
    let Some((first, rest)) = path.split_first() else {
        let Value::Object(map) = schema else { return 0 };
        for (keyword, bound) in range.schema_keywords() {
            // A whole number is written as one (`100`, not `100.0`).
            let bound = if bound.fract() == 0.0 { Value::from(bound as i64) } else { bound.into() };
            map.insert(keyword.to_string(), bound);
        }
        return 1;
    };
    let mut applied = 0;
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(Value::Array(branches)) = schema.get_mut(key) {
            applied += branches.iter_mut().map(|b| apply(b, path, range)).sum::<usize>();
        }
    }
    let child = match *first {
        "[]" => schema.get_mut("items"),
        key => schema.get_mut("properties").and_then(|p| p.get_mut(key)),
    };
    if let Some(child) = child {
        applied += apply(child, rest, range);
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value just outside `range` (a whole number as an integer).
    fn outside(range: &Range) -> serde_yaml_ng::Value {
        let value = match (range.max, range.min) {
            (Bound::Incl(b), _) => b + 1.0,
            (Bound::Excl(b), _) => b,
            (Bound::Open, Bound::Incl(a)) => a - 1.0,
            (Bound::Open, Bound::Excl(a)) => a,
            (Bound::Open, Bound::Open) => f64::NAN,
        };
        if value.fract() == 0.0 {
            (value as i64).into()
        } else {
            value.into()
        }
    }

    /// Put `new` at the dotted `key` below `node`, making the mappings on the way.
    fn set(mut node: &mut serde_yaml_ng::Value, key: &str, new: serde_yaml_ng::Value) {
        for step in key.split('.') {
            if !node.is_mapping() {
                *node = serde_yaml_ng::Mapping::new().into();
            }
            let map = node.as_mapping_mut().unwrap();
            node = map.entry(step.into()).or_insert(serde_yaml_ng::Value::Null);
        }
        *node = new;
    }

    /// Each range of each section's table, one value just outside it at a time: the check
    /// reports it at its key, with the table's bounds.
    #[test]
    fn every_range_in_a_table_is_checked_with_its_bounds() {
        let base: serde_yaml_ng::Value = serde_yaml_ng::from_str(
            "backends:\n  - {name: p, kind: vllm, model: m, endpoints: [\"http://x:1\"]}\n  \
             - {name: a, kind: anthropic, model: m}\n  - {name: o, kind: openai, model: m}\n\
             tasks: [{name: t, backends: [o], slo: {ttft_ms: 500}}]\n",
        )
        .unwrap();
        let mut checked = 0;
        for (section, ranges) in crate::config::ranges() {
            for range in ranges {
                let bad = outside(range);
                let mut config = base.clone();
                match section {
                    // The pool and the Anthropic backend: one of them has the key.
                    "backends[]" => {
                        for i in 0..2 {
                            set(&mut config["backends"][i], range.key, bad.clone());
                        }
                    }
                    "tasks[]" => {
                        if range.key.starts_with("gate.") {
                            set(&mut config["tasks"][0], "gate.golden", "g.jsonl".into());
                        }
                        set(&mut config["tasks"][0], range.key, bad.clone());
                    }
                    section => set(&mut config, &format!("{section}.{}", range.key), bad.clone()),
                }
                let text = serde_yaml_ng::to_string(&config).unwrap();
                let problems = crate::config::parse(&text).expect_err(&text);
                let message = range.message(bad.as_f64().unwrap());
                let at = format!(".{}", range.key);
                let found = problems.iter().any(|p| p.path.ends_with(&at) && p.message == message);
                assert!(found, "{section}{at}: {bad:?} not reported as {message:?}: {problems:#?}");
                checked += 1;
            }
        }
        assert!(checked > 40, "only {checked} ranges");
    }

    #[test]
    fn a_range_reads_as_its_bounds_say() {
        let r = Range::new("x", Bound::Excl(0.0), Bound::Incl(1.0));
        assert!(r.admits(1.0) && !r.admits(0.0) && !r.admits(f64::NAN) && !r.admits(f64::INFINITY));
        assert_eq!(r.message(2.0), "must be above 0 and at most 1");
        let r = Range::between("ms", 100.0, 5000.0).says(Says::OutOfRange).note(" (5 s)");
        assert_eq!(r.message(6000.0), "6000 is out of range: 100 to 5000 (5 s)");
        assert_eq!(Range::at_least("n", 1.0).message(0.0), "must be at least 1");
        assert_eq!(r.schema_keywords(), [("minimum", 100.0), ("maximum", 5000.0)]);
    }
}
