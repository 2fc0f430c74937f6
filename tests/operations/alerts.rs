//! The Prometheus alerting rules of the Helm chart (`helm/spillway/files/alerts.yaml`):
//! `promtool check rules` accepts them, their unit tests (`alerts_test.yaml`, run by
//! `promtool test rules`) pass and cover every alert, and every `spillway_*` metric the rules
//! name is one Spillway really exports (the names registered in `src/metrics/`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const RULES: &str = "helm/spillway/files/alerts.yaml";
const RULE_TESTS: &str = "helm/spillway/files/alerts_test.yaml";
/// Where every family is registered.
const METRICS: [&str; 5] = [
    "src/metrics/families.rs",
    "src/metrics/mod.rs",
    "src/metrics/edge.rs",
    "src/metrics/spool.rs",
    "src/metrics/opstate.rs",
];

fn path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Runs promtool, panicking with its output unless it succeeds; returns that output.
fn promtool(args: &[&str], file: &str) -> String {
    let out = Command::new("promtool")
        .args(args)
        .arg(path(file))
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {} {file}: {}\n{text}", args.join(" "), out.status);
    text
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let check = promtool(&["check", "rules"], RULES);
    assert!(check.contains("SUCCESS"), "promtool check rules:\n{check}");
    let test = promtool(&["test", "rules"], RULE_TESTS);
    assert!(test.contains("SUCCESS"), "promtool test rules:\n{test}");
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

/// Every `spillway_…` metric name in `text` (not preceded by another name character).
fn names_used(text: &str) -> BTreeSet<String> {
    text.match_indices("spillway_")
        .filter(|&(at, _)| !text[..at].ends_with(|c: char| is_name_char(c) || c.is_ascii_uppercase()))
        .map(|(at, _)| text[at..].split(|c: char| !is_name_char(c)).next().unwrap_or_default().to_string())
        .collect()
}

/// The names `src/metrics/` registers: its `"spillway_…"` string literals, plus the
/// `_bucket`, `_count` and `_sum` series of those registered with `histogram(`.
fn names_exported(src: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in src.match_indices("\"spillway_") {
        let literal = &src[at + 1..];
        let name = &literal[..literal.find('"').expect("a closed string literal")];
        assert!(name.chars().all(is_name_char), "odd metric name in {METRICS:?}: {name:?}");
        names.insert(name.to_string());
        let call = src[..at].trim_end().trim_end_matches("r,").trim_end_matches('&').trim_end();
        if call.ends_with("histogram(") {
            for suffix in ["_bucket", "_count", "_sum"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names
}

#[test]
fn rules_use_only_metrics_spillway_exports() {
    let exported = names_exported(&METRICS.map(read).concat());
    for known in ["spillway_slo_burn_rate", "spillway_breaker_state", "spillway_ttft_seconds_bucket"] {
        assert!(exported.contains(known), "the scan of {METRICS:?} missed {known}: {exported:?}");
    }
    let used = names_used(&read(RULES));
    assert!(used.contains("spillway_slo_burn_rate"), "the scan of {RULES} found only {used:?}");
    let unknown: Vec<&String> = used.difference(&exported).collect();
    assert!(unknown.is_empty(), "{RULES} uses metrics Spillway does not export: {unknown:?}");
}

#[test]
fn every_alert_has_unit_tests() {
    let rules = read(RULES);
    let tests = read(RULE_TESTS);
    let alerts: Vec<&str> =
        rules.lines().filter_map(|l| l.trim().strip_prefix("- alert:")).map(str::trim).collect();
    assert!(alerts.len() >= 6, "{RULES}: {alerts:?}");
    for alert in alerts {
        assert!(
            tests.lines().any(|l| l.trim().strip_prefix("- alertname:").map(str::trim) == Some(alert)),
            "{RULE_TESTS} has no alert_rule_test for {alert}"
        );
    }
}
