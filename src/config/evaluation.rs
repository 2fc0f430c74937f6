//! The evaluation keys of a task (`gate`, `shadow`, `prompt_variants`): their checks, and the
//! files they name, resolved against the config file's folder and read when the config loads,
//! so a missing or broken file is a config problem, not a failure mid-run.

use std::path::{Path, PathBuf};

use super::validate::Undecoded;
use super::{BackendKind, Config, Problem};
use crate::config::golden::Grader;

/// Resolve and read every file the tasks name; check the keys. `base`: the config file's folder.
/// Checks against what did not decode (`undecoded`) are skipped: those are reported already.
pub fn prepare(config: &mut Config, base: Option<&Path>, undecoded: &Undecoded) -> Vec<Problem> {
    let mut problems = Vec::new();
    let backends: Vec<(String, BackendKind)> =
        config.backends.iter().map(|b| (b.name.clone(), b.kind())).collect();
    // With `ledger` undecoded its default stands in: the checks that need it say nothing.
    let ledger_on = config.ledger.enabled || undecoded.section("ledger");
    for (i, task) in config.tasks.iter_mut().enumerate() {
        let mut p =
            |key: &str, message: String| problems.push(Problem::new(format!("tasks[{i}].{key}"), message));
        if let Some(gate) = &mut task.gate {
            gate.golden = resolve(base, &gate.golden);
            match crate::config::golden::load(&gate.golden) {
                Ok(items) => {
                    let judged = items.iter().any(|i| matches!(i.grader, Grader::Judge { .. }));
                    if judged && gate.judge.is_none() {
                        p(
                            "gate.judge",
                            "the golden set has `judge` graders: name the backend that scores them".into(),
                        );
                    }
                }
                Err(lines) => {
                    for line in lines {
                        p("gate.golden", line);
                    }
                }
            }
            if let Some(judge) = &gate.judge {
                if !backends.iter().any(|(name, _)| name == judge) && !undecoded.may_be_backend(judge) {
                    p("gate.judge", format!("no backend is named `{judge}`"));
                }
            }
            if gate.required && !ledger_on {
                p("gate.required", "a required gate keeps its results in the ledger: enable `ledger`".into());
            }
        }
        if let Some(shadow) = &task.shadow {
            if !ledger_on {
                p("shadow", "shadow answers are kept in the ledger store: enable `ledger`".into());
            }
            for (j, name) in shadow.backends.iter().flatten().enumerate() {
                if !task.backends.contains(name) {
                    p(
                        &format!("shadow.backends[{j}]"),
                        format!("`{name}` is not one of this task's backends"),
                    );
                }
            }
            if let Some(grader) = &shadow.grader {
                if let Err(why) = grader.check(Some("the primary's answer")) {
                    p("shadow.grader", why);
                }
                let judge = task.gate.as_ref().and_then(|g| g.judge.as_ref());
                if matches!(grader, Grader::Judge { .. }) && judge.is_none() {
                    p("shadow.grader", "a `judge` grader needs `gate.judge`".into());
                }
            }
        }
        problems.extend(read_variants(task, &format!("tasks[{i}]"), base, &backends, undecoded));
    }
    problems
}

/// Resolve and read the task's prompt variants into `variant_texts`; each key must name a
/// backend or a kind. Problems at `at.prompt_variants.KEY`.
fn read_variants(
    task: &mut super::TaskConfig,
    at: &str,
    base: Option<&Path>,
    backends: &[(String, BackendKind)],
    undecoded: &Undecoded,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut p = |key: &str, message: String| problems.push(Problem::new(format!("{at}.{key}"), message));
    let mut texts = std::collections::BTreeMap::new();
    for (key, path) in task.prompt_variants.iter_mut() {
        let known =
            backends.iter().any(|(name, kind)| name == key || kind.is_named(key)) || undecoded.some_backend();
        if !known {
            p(
                &format!("prompt_variants.{key}"),
                "is neither a backend name nor a backend kind (local, openai, anthropic, gemini, openai_compatible)"
                    .into(),
            );
            continue;
        }
        *path = resolve(base, path);
        match std::fs::read_to_string(&*path) {
            Ok(text) if !text.trim().is_empty() => {
                texts.insert(key.clone(), text.trim().to_string());
            }
            Ok(_) => p(&format!("prompt_variants.{key}"), format!("{} is empty", path.display())),
            Err(e) => p(&format!("prompt_variants.{key}"), format!("cannot read {}: {e}", path.display())),
        }
    }
    task.variant_texts = texts;
    problems
}

fn resolve(base: Option<&Path>, path: &Path) -> PathBuf {
    match base {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::load::parse_in;

    fn dir(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("spillway-eval-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("golden.jsonl"), "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2\"}], \"grader\": {\"type\": \"numeric\", \"value\": 4}}\n").unwrap();
        std::fs::write(dir.join("bad.jsonl"), "{\"messages\": []}\n").unwrap();
        std::fs::write(dir.join("llama.txt"), "Answer in one line.\n").unwrap();
        dir
    }

    const BASE: &str = "backends:\n  - {name: pool, kind: vllm, endpoints: ['http://10.0.0.1:8000'], model: m}\n  - {name: oa, kind: openai, model: gpt}\n";

    #[test]
    fn files_resolve_against_the_config_folder_and_load() {
        let dir = dir("files");
        let yaml = format!(
            "{BASE}tasks:\n  - name: t\n    backends: [pool, oa]\n    slo: {{ttft_ms: 800}}\n    gate: {{golden: golden.jsonl, required: false}}\n    prompt_variants: {{vllm: llama.txt}}\n    shadow: {{rate: 0.1}}\n"
        );
        let config = parse_in(&yaml, Some(&dir)).unwrap();
        let task = &config.tasks[0];
        assert_eq!(task.gate.as_ref().unwrap().golden, dir.join("golden.jsonl"));
        assert_eq!(task.variant_texts["vllm"], "Answer in one line.");
        assert_eq!(task.gate.as_ref().unwrap().min_pass, 0.9);
    }

    #[test]
    fn every_bad_key_is_named() {
        let dir = dir("bad");
        let yaml = format!(
            "{BASE}ledger: {{enabled: false}}\ntasks:\n  - name: t\n    backends: [pool]\n    slo: {{ttft_ms: 800}}\n    gate: {{golden: bad.jsonl, min_pass: 2, judge: ghost}}\n    prompt_variants: {{ghost: llama.txt, openai: missing.txt}}\n    shadow: {{rate: 1.5, backends: [oa]}}\n"
        );
        let problems: Vec<String> =
            parse_in(&yaml, Some(&dir)).unwrap_err().iter().map(|p| p.to_string()).collect();
        let has = |s: &str| problems.iter().any(|p| p.contains(s));
        assert!(
            has("tasks[0].gate.golden: ") && has("bad.jsonl: line 1: missing field `grader`"),
            "{problems:?}"
        );
        assert!(has("tasks[0].gate.min_pass: must be 0 to 1"), "{problems:?}");
        assert!(has("tasks[0].gate.judge: no backend is named `ghost`"), "{problems:?}");
        assert!(has("tasks[0].gate.required: "), "{problems:?}");
        assert!(has("tasks[0].prompt_variants.ghost: is neither"), "{problems:?}");
        assert!(has("tasks[0].prompt_variants.openai: cannot read"), "{problems:?}");
        assert!(has("tasks[0].shadow.rate: must be 0 to 1"), "{problems:?}");
        assert!(has("tasks[0].shadow: shadow answers are kept in the ledger store"), "{problems:?}");
        assert!(has("tasks[0].shadow.backends[0]: `oa` is not one of this task's backends"), "{problems:?}");
    }
}
