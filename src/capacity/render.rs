//! The capacity plan as a readable text table. Only formatting: every figure comes from the
//! report. Tokens are per minute, in each backend's own tokens unless marked "ref" (o200k).

use super::arith::{BackendLoad, ScenarioResult};
use super::{BackendInfo, Report};

/// The whole report as text.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    out.push_str("Backends (tokens per minute in each backend's own tokens)\n");
    out.push_str(&backends_table(&report.backends));
    for s in &report.scenarios {
        out.push('\n');
        out.push_str(&scenario_text(s));
    }
    if !report.notes.is_empty() {
        out.push_str("\nNotes\n");
        for n in &report.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out
}

fn backends_table(backends: &[BackendInfo]) -> String {
    let mut rows = vec![row(&[
        "backend",
        "kind",
        "tokenizer",
        "×o200k",
        "tok/min",
        "req/min",
        "reserve",
        "concurrency",
    ])];
    for b in backends {
        let tpm = b
            .tokens_per_minute
            .map_or_else(|| if b.local { "unknown".into() } else { "unlimited".into() }, num);
        let rpm = b.requests_per_minute.map_or_else(|| "-".into(), num);
        let reserve = b.reserve.map_or_else(|| "-".into(), |r| format!("{:.0}%", r * 100.0));
        let concurrency = match (b.concurrency, b.nodes) {
            (Some(c), Some(n)) => format!("{} ({n} nodes)", num(c as f64)),
            _ if b.local => "discovered".into(),
            _ => "-".into(),
        };
        let tokenizer = format!("{}{}", b.tokenizer, if b.exact { "" } else { " (est.)" });
        rows.push(vec![
            b.name.clone(),
            b.kind.to_string(),
            tokenizer,
            format!("{:.2}", b.ratio),
            tpm,
            rpm,
            reserve,
            concurrency,
        ]);
    }
    align(&rows)
}

fn scenario_text(s: &ScenarioResult) -> String {
    let mut out = format!("Scenario: {}", s.name);
    if s.reserve_released {
        out.push_str(" (pools' failover reserve released)");
    }
    out.push('\n');
    let mut rows = vec![row(&[
        "backend",
        "must carry tok/min",
        "limit tok/min",
        "req/min",
        "limit req/min",
        "load",
        "carried tok/min",
        "util",
    ])];
    for b in &s.backends {
        rows.push(vec![
            b.backend.clone(),
            num(b.required_tokens),
            b.limit_tokens.map_or_else(|| "-".into(), num),
            num(b.required_requests),
            b.limit_requests.map_or_else(|| "-".into(), num),
            b.load.map_or_else(|| "-".into(), load),
            num(b.carried_tokens),
            b.utilisation.map_or_else(|| "-".into(), |u| format!("{:.1}%", u * 100.0)),
        ]);
    }
    out.push_str(&align(&rows));
    let short: Vec<&BackendLoad> =
        s.backends.iter().filter(|b| b.short_tokens > 0.0 || b.short_requests > 0.0).collect();
    if short.is_empty() {
        out.push_str("  falls short: nothing\n");
    }
    for b in short {
        let factor = b.load.map_or_else(|| "more than".into(), |f| format!("{f:.2}×"));
        let mut over = Vec::new();
        if b.short_tokens > 0.0 {
            over.push(format!("{} tok/min", num(b.short_tokens)));
        }
        if b.short_requests > 0.0 {
            over.push(format!("{} req/min", num(b.short_requests)));
        }
        out.push_str(&format!(
            "  falls short: {} must carry {factor} its limit ({} over)\n",
            b.backend,
            over.join(", ")
        ));
    }
    if s.shed.is_empty() {
        out.push_str("  shed: nothing\n");
    }
    for c in &s.shed {
        out.push_str(&format!(
            "  shed: {} {:.1}% ({} of {} req/min, {} ref tok/min)\n",
            c.priority.as_str(),
            c.shed_share * 100.0,
            num(c.shed_requests),
            num(c.requests),
            num(c.shed_tokens)
        ));
    }
    for t in s.tasks.iter().filter(|t| t.shed_requests > 0.0) {
        let served: Vec<String> = t.served.iter().map(|(b, r)| format!("{b} {}", num(*r))).collect();
        out.push_str(&format!(
            "    {} ({}): {} req/min; served {}; shed {} req/min\n",
            t.task,
            t.priority.as_str(),
            num(t.requests),
            if served.is_empty() { "nowhere".to_string() } else { served.join(", ") },
            num(t.shed_requests)
        ));
    }
    out
}

/// A load factor: a percentage up to the limit, a multiple beyond it.
fn load(f: f64) -> String {
    if !f.is_finite() {
        "∞ (no room at all)".into()
    } else if f <= 1.0 {
        format!("{:.1}%", f * 100.0)
    } else {
        format!("{f:.2}× OVER")
    }
}

/// A whole number with thousands separators.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "∞".into();
    }
    let rounded = v.round() as i64;
    let digits = rounded.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0 {
        out.insert(0, '-');
    }
    out
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// Columns padded to their widest cell: the first left-aligned, the rest right-aligned.
fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        out.push_str("  ");
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}
