//! The report as a readable table or as CSV (one row per line, then the idle, unallocated and
//! total rows, so that a spreadsheet sum of the cost column equals the total). Formatting only.

use std::fmt::Write;

use rust_decimal::Decimal;

use super::build::{Line, Report};
use super::error::ReportError;

fn usd(d: Decimal) -> String {
    format!("${:.4}", d)
}

fn opt_usd(d: Option<Decimal>) -> String {
    d.map_or_else(|| "-".into(), usd)
}

fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v > 1.0 => format!("never ({:.0}%)", v * 100.0),
        Some(v) => format!("{:.1}%", v * 100.0),
        None => "-".into(),
    }
}

/// Left-align the first `keys` columns and right-align the rest.
fn table_text(header: &[String], rows: &[Vec<String>], keys: usize) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter().map(|r| r[c].chars().count()).chain([header[c].chars().count()]).max().unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| if c < keys { format!("{cell:<w$}") } else { format!("{cell:>w$}") })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

fn line_cells(l: &Line) -> Vec<String> {
    vec![
        l.requests.to_string(),
        l.failed.to_string(),
        l.tokens.input.to_string(),
        l.tokens.cached_input.to_string(),
        l.tokens.cache_write.to_string(),
        l.tokens.output.to_string(),
        usd(l.hosted_usd),
        usd(l.gpu_busy_usd),
        usd(l.gpu_idle_usd),
        usd(l.total_usd),
        opt_usd(l.per_request_usd),
        opt_usd(l.per_mtok_output_usd),
    ]
}

const LINE_COLUMNS: [&str; 12] = [
    "requests",
    "failed",
    "input_tok",
    "cached_tok",
    "cache_write_tok",
    "output_tok",
    "hosted",
    "gpu_busy",
    "gpu_idle",
    "total",
    "per_request",
    "per_Mtok_out",
];

pub fn table(r: &Report) -> String {
    let mut out = format!("Spillway cost report, {} to {}\n\n", r.from, r.to);
    let keys: Vec<String> = r.group_by.iter().map(|g| g.as_str().to_string()).collect();
    let header: Vec<String> =
        keys.iter().cloned().chain(LINE_COLUMNS.iter().map(|c| c.to_string())).collect();
    let mut rows: Vec<Vec<String>> =
        r.lines.iter().map(|l| l.group.iter().cloned().chain(line_cells(l)).collect()).collect();
    let pad = |label: &str| {
        let mut v = vec![label.to_string()];
        v.resize(keys.len(), String::new());
        v
    };
    let t = &r.totals;
    let blank = |n: usize| vec![String::new(); n];
    let mut idle = pad("(idle GPU, in the lines above)");
    idle.extend(blank(8));
    idle.extend([usd(t.gpu_idle_usd), String::new(), String::new(), String::new()]);
    let mut unallocated = pad("(GPU no task used)");
    unallocated.extend(blank(9));
    unallocated.extend([usd(t.gpu_unallocated_usd), String::new(), String::new()]);
    let mut total = pad("TOTAL");
    total.extend([t.requests.to_string()]);
    total.extend(blank(5));
    total.extend([usd(t.hosted_usd), usd(t.gpu_busy_usd), usd(t.gpu_idle_usd), usd(t.total_usd)]);
    total.extend(blank(2));
    rows.extend([idle, unallocated, total]);
    out.push_str(&table_text(&header, &rows, keys.len()));

    out.push_str("\nSelf-hosted against hosted, per million tokens (input + output):\n");
    let header: Vec<String> = [
        "task",
        "pool",
        "tokens",
        "marginal",
        "loaded",
        "cheapest_hosted",
        "hosted",
        "utilisation",
        "break_even",
    ]
    .map(String::from)
    .to_vec();
    let rows: Vec<Vec<String>> = r
        .tasks
        .iter()
        .flat_map(|t| t.self_hosted.iter().map(move |s| (t, s)))
        .map(|(t, s)| {
            vec![
                t.task.clone(),
                s.pool.clone(),
                s.tokens.total().to_string(),
                opt_usd(s.marginal_per_mtok),
                opt_usd(s.loaded_per_mtok),
                s.cheapest_hosted.clone().unwrap_or_else(|| "-".into()),
                opt_usd(s.hosted_per_mtok),
                pct(Some(s.utilisation)),
                pct(s.break_even_utilisation),
            ]
        })
        .collect();
    out.push_str(&table_text(&header, &rows, 2));

    out.push_str("\nBy backend:\n");
    let header: Vec<String> =
        ["task", "backend", "where", "requests", "tokens", "cost"].map(String::from).to_vec();
    let rows: Vec<Vec<String>> = r
        .tasks
        .iter()
        .flat_map(|t| t.by_backend.iter().map(move |b| (t, b)))
        .map(|(t, b)| {
            vec![
                t.task.clone(),
                b.backend.clone(),
                match (b.local, b.backend == super::build::NO_BACKEND) {
                    (_, true) => "-".into(),
                    (true, false) => "self-hosted".into(),
                    (false, false) => "hosted".into(),
                },
                b.requests.to_string(),
                b.tokens.total().to_string(),
                usd(b.cost_usd),
            ]
        })
        .collect();
    out.push_str(&table_text(&header, &rows, 3));

    out.push_str("\nGPU pools:\n");
    let header: Vec<String> =
        ["pool", "nodes", "gpu_h_busy", "gpu_h_idle", "busy", "idle", "unallocated", "utilisation"]
            .map(String::from)
            .to_vec();
    let rows: Vec<Vec<String>> = r
        .pools
        .iter()
        .map(|p| {
            vec![
                p.pool.clone(),
                p.nodes.to_string(),
                format!("{:.2}", p.gpu_hours_busy),
                format!("{:.2}", p.gpu_hours_idle),
                usd(p.busy_usd),
                usd(p.idle_usd),
                usd(p.unallocated_usd),
                pct(Some(p.utilisation)),
            ]
        })
        .collect();
    out.push_str(&table_text(&header, &rows, 1));
    if let Some(p) = r.pools.iter().find(|p| p.unpriced_node_minutes > 0) {
        let _ = writeln!(
            out,
            "note: pool {} has {} unpriced node-minutes (set gpu_hourly_usd or the \
             spillway.dev/gpu-hourly-usd annotation)",
            p.pool, p.unpriced_node_minutes
        );
    }
    out
}

/// One CSV row per line plus `idle` (already in the lines), `unallocated` and `total` rows:
/// summing `total_usd` over the `line` rows and the `unallocated` row gives the `total` row.
pub fn csv(r: &Report) -> Result<String, ReportError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let keys: Vec<&str> = r.group_by.iter().map(|g| g.as_str()).collect();
    let mut header = vec!["row"];
    header.extend(&keys);
    header.extend([
        "requests",
        "failed",
        "input_tokens",
        "cached_input_tokens",
        "cache_write_tokens",
        "output_tokens",
        "hosted_usd",
        "gpu_busy_usd",
        "gpu_idle_usd",
        "total_usd",
        "per_request_usd",
        "per_mtok_output_usd",
    ]);
    w.write_record(&header).map_err(ReportError::render("csv"))?;
    let opt = |d: Option<Decimal>| d.map(|d| d.to_string()).unwrap_or_default();
    for l in &r.lines {
        let mut row = vec!["line".to_string()];
        row.extend(l.group.iter().cloned());
        row.extend([
            l.requests.to_string(),
            l.failed.to_string(),
            l.tokens.input.to_string(),
            l.tokens.cached_input.to_string(),
            l.tokens.cache_write.to_string(),
            l.tokens.output.to_string(),
            l.hosted_usd.to_string(),
            l.gpu_busy_usd.to_string(),
            l.gpu_idle_usd.to_string(),
            l.total_usd.to_string(),
            opt(l.per_request_usd),
            opt(l.per_mtok_output_usd),
        ]);
        w.write_record(&row).map_err(ReportError::render("csv"))?;
    }
    let t = &r.totals;
    let summary =
        |label: &str, requests: String, hosted: String, busy: String, idle: String, total: String| {
            let mut row = vec![label.to_string()];
            row.extend(keys.iter().map(|_| String::new()));
            row.extend([
                requests,
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                hosted,
                busy,
                idle,
                total,
            ]);
            row.extend([String::new(), String::new()]);
            row
        };
    let e = String::new;
    let rows = [
        summary("idle", e(), e(), e(), t.gpu_idle_usd.to_string(), e()),
        summary("unallocated", e(), e(), e(), e(), t.gpu_unallocated_usd.to_string()),
        summary(
            "total",
            t.requests.to_string(),
            t.hosted_usd.to_string(),
            t.gpu_busy_usd.to_string(),
            t.gpu_idle_usd.to_string(),
            t.total_usd.to_string(),
        ),
    ];
    for row in rows {
        w.write_record(&row).map_err(ReportError::render("csv"))?;
    }
    let bytes = w.into_inner().map_err(|e| ReportError::render("csv")(e.into_error()))?;
    String::from_utf8(bytes).map_err(ReportError::render("csv"))
}
