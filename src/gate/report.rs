//! `spillway gate report`: the latest gate result of every (task, backend, fingerprint) side
//! by side, which of them is the fingerprint in effect, and how each backend's shadow answers
//! graded against the primary's. Table, CSV or JSON. Pure: rows in, text out.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde_json::json;

use super::store::{GateResult, ShadowResult};

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GateFormat {
    Table,
    Csv,
    Json,
}

/// One gate line: a result, and whether its fingerprint is the backend's current one.
pub struct Line<'a> {
    pub result: &'a GateResult,
    pub current: bool,
}

/// Shadow answers of one (task, backend).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ShadowLine {
    pub sent: u64,
    pub errors: u64,
    pub graded: u64,
    pub passed: u64,
    pub cost: Decimal,
}

/// Sum shadows per (task, backend).
pub(crate) fn shadow_lines(rows: &[ShadowResult]) -> BTreeMap<(String, String), ShadowLine> {
    let mut out: BTreeMap<(String, String), ShadowLine> = BTreeMap::new();
    for r in rows {
        let line = out.entry((r.task.clone(), r.backend.clone())).or_default();
        line.sent += 1;
        line.errors += u64::from(r.error_class.is_some());
        line.graded += u64::from(r.verdict.is_some());
        line.passed += u64::from(r.verdict.as_deref() == Some("pass"));
        line.cost += r.cost.unwrap_or_default();
    }
    out
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

fn ms(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn money(v: Option<Decimal>) -> String {
    v.map_or("-".into(), |v| format!("${}", v.round_dp(6)))
}

fn when(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map_or(ms.to_string(), |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// Render the lines (latest first within a task and backend) and the shadow summary.
pub fn render(
    lines: &[Line<'_>],
    shadows: &BTreeMap<(String, String), ShadowLine>,
    format: GateFormat,
) -> String {
    match format {
        GateFormat::Json => {
            let gate: Vec<_> = lines
                .iter()
                .map(|l| {
                    let r = l.result;
                    let s = &r.summary;
                    json!({
                        "task": r.task, "backend": r.backend, "fingerprint": r.fingerprint, "current": l.current,
                        "node": r.node, "trigger": r.trigger, "finished_at": when(r.finished_ms),
                        "items": s.items, "passed_items": s.passed_items, "errors": s.errors,
                        "pass_rate": s.pass_rate(), "p50_ms": s.p50_ms, "p95_ms": s.p95_ms,
                        "cost_per_item_usd": s.cost_per_item().map(|c| c.to_string()),
                        "passed": s.passed, "why": s.why,
                    })
                })
                .collect();
            let shadow: Vec<_> = shadows
                .iter()
                .map(|((task, backend), s)| {
                    json!({
                        "task": task, "backend": backend, "sent": s.sent, "errors": s.errors,
                        "graded": s.graded, "passed": s.passed,
                        "agreement": (s.graded > 0).then(|| s.passed as f64 / s.graded as f64),
                        "cost_usd": s.cost.to_string(),
                    })
                })
                .collect();
            format!("{:#}\n", json!({"gate": gate, "shadow": shadow}))
        }
        GateFormat::Csv => {
            let mut w = csv::Writer::from_writer(Vec::new());
            let header = [
                "task",
                "backend",
                "fingerprint",
                "current",
                "trigger",
                "finished_at",
                "items",
                "passed_items",
                "errors",
                "pass_rate",
                "p50_ms",
                "p95_ms",
                "cost_per_item_usd",
                "verdict",
                "why",
            ];
            let _ = w.write_record(header);
            for l in lines {
                let (r, s) = (l.result, &l.result.summary);
                let _ = w.write_record([
                    r.task.clone(),
                    r.backend.clone(),
                    r.fingerprint.clone(),
                    l.current.to_string(),
                    r.trigger.clone(),
                    when(r.finished_ms),
                    s.items.to_string(),
                    s.passed_items.to_string(),
                    s.errors.to_string(),
                    format!("{:.4}", s.pass_rate()),
                    s.p50_ms.map_or(String::new(), |v| v.to_string()),
                    s.p95_ms.map_or(String::new(), |v| v.to_string()),
                    s.cost_per_item().map_or(String::new(), |c| c.to_string()),
                    if s.passed { "pass" } else { "fail" }.into(),
                    s.why.clone(),
                ]);
            }
            String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
        }
        GateFormat::Table => {
            let mut rows = vec![[
                "task",
                "backend",
                "fingerprint",
                "now",
                "trigger",
                "items",
                "pass",
                "p50_ms",
                "p95_ms",
                "$/item",
                "verdict",
            ]
            .map(String::from)
            .to_vec()];
            for l in lines {
                let (r, s) = (l.result, &l.result.summary);
                rows.push(vec![
                    r.task.clone(),
                    r.backend.clone(),
                    r.fingerprint.clone(),
                    if l.current { "*" } else { "" }.into(),
                    r.trigger.clone(),
                    s.items.to_string(),
                    pct(s.passed_items, s.items),
                    ms(s.p50_ms),
                    ms(s.p95_ms),
                    money(s.cost_per_item()),
                    if s.passed { "PASS".into() } else { format!("FAIL: {}", s.why) },
                ]);
            }
            let mut out =
                String::from("Gate results (latest per fingerprint; * = the fingerprint in effect)\n\n");
            out.push_str(&table(&rows));
            if !shadows.is_empty() {
                let mut rows = vec![["task", "backend", "shadows", "errors", "graded", "agree", "cost"]
                    .map(String::from)
                    .to_vec()];
                for ((task, backend), s) in shadows {
                    rows.push(vec![
                        task.clone(),
                        backend.clone(),
                        s.sent.to_string(),
                        s.errors.to_string(),
                        s.graded.to_string(),
                        pct(s.passed, s.graded),
                        money(Some(s.cost)),
                    ]);
                }
                out.push_str("\nShadow traffic (graded against the primary's answer)\n\n");
                out.push_str(&table(&rows));
            }
            out
        }
    }
}

fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::summary::Summary;

    fn result(backend: &str, passed: bool) -> GateResult {
        GateResult {
            id: backend.into(),
            task: "triage".into(),
            backend: backend.into(),
            fingerprint: format!("{backend}-fp"),
            node: None,
            trigger: "cli".into(),
            started_ms: 0,
            finished_ms: 1_764_400_000_000,
            summary: Summary {
                items: 20,
                passed_items: if passed { 19 } else { 8 },
                errors: 0,
                p50_ms: Some(120),
                p95_ms: Some(480),
                cost: Some(Decimal::new(2, 2)),
                passed,
                why: if passed {
                    "19/20 passed".into()
                } else {
                    "8/20 passed; pass rate 40.0 % is below 90.0 %".into()
                },
            },
        }
    }

    #[test]
    fn every_format_carries_the_figures() {
        let (a, b) = (result("openai", true), result("gemini", false));
        let lines = [Line { result: &a, current: true }, Line { result: &b, current: false }];
        let mut shadows = BTreeMap::new();
        shadows.insert(
            ("triage".to_string(), "gemini".to_string()),
            ShadowLine { sent: 4, errors: 1, graded: 3, passed: 2, cost: Decimal::new(3, 3) },
        );
        let table = render(&lines, &shadows, GateFormat::Table);
        assert!(
            table.contains("openai-fp") && table.contains("95.0%") && table.contains("$0.001"),
            "{table}"
        );
        assert!(table.contains("FAIL: 8/20 passed; pass rate 40.0 % is below 90.0 %"), "{table}");
        assert!(table.contains("66.7%"), "{table}");
        let csv = render(&lines, &shadows, GateFormat::Csv);
        assert_eq!(csv.lines().count(), 3);
        assert!(
            csv.lines().nth(1).unwrap().starts_with("triage,openai,openai-fp,true,cli,2025-11-29T"),
            "{csv}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&lines, &shadows, GateFormat::Json)).unwrap();
        assert_eq!(json["gate"][0]["pass_rate"], 0.95);
        assert_eq!(json["gate"][1]["passed"], false);
        assert_eq!(json["shadow"][0]["graded"], 3);
    }
}
