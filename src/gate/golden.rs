//! Golden sets: a task's examples as JSONL, one item per line: the `messages` to send, an
//! optional `reference` answer, and the `grader` that decides pass or fail. Loading checks
//! every line and every grader and reports each problem with its line number.

use serde::Deserialize;

use super::grade::Grader;
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
