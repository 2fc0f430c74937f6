//! The report as a readable table or as CSV (one row per line, then the idle, unallocated and
//! total rows, so that a spreadsheet sum of the cost column equals the total, then utilisation
//! rows per pool and per task and pool, which carry no cost). Formatting only.

use std::fmt::Write;

use rust_decimal::Decimal;

use super::build::{Line, PoolUsage, Report, UtilisationBasis};
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
        "busy_share",
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
                pct(Some(s.busy_share)),
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
    let header: Vec<String> = [
        "pool",
        "nodes",
        "gpu_h_busy",
        "gpu_h_idle",
        "gpu_h_batch",
        "busy",
        "idle",
        "unallocated",
        "utilisation",
        "busy_share",
    ]
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
                format!("{:.2}", p.gpu_hours_batch),
                usd(p.busy_usd),
                usd(p.idle_usd),
                usd(p.unallocated_usd),
                pct(Some(p.utilisation)),
                pct(Some(p.busy_share)),
            ]
        })
        .collect();
    out.push_str(&table_text(&header, &rows, 1));
    out.push_str(
        "gpu_h_batch: busy GPU hours batch-priority requests used (idle hours the batches filled); \
         utilisation: running sequences x time over slots x time; busy_share: node-minutes in which \
         anything ran\n",
    );
    for p in &r.pools {
        if let Some(note) = basis_note(p) {
            let _ = writeln!(out, "note: {note}");
        }
    }
    if let Some(p) = r.pools.iter().find(|p| p.unpriced_node_minutes > 0) {
        let _ = writeln!(
            out,
            "note: pool {} has {} unpriced node-minutes (set gpu_hourly_usd or the \
             spillway.dev/gpu-hourly-usd annotation)",
            p.pool, p.unpriced_node_minutes
        );
    }
    if !r.budgets.is_empty() {
        out.push_str("\nBudgets (spend in the period against the budget that covers it):\n");
        let header: Vec<String> = ["scope", "name", "spend", "budget", "used"].map(String::from).to_vec();
        let rows: Vec<Vec<String>> = r
            .budgets
            .iter()
            .map(|b| {
                vec![
                    b.scope.as_str().to_string(),
                    b.name.clone(),
                    usd(b.spend_usd),
                    format!("{} a {}", usd(b.limit_usd), b.period.as_str()),
                    b.used.map_or_else(|| "-".into(), |u| format!("{:.1}%", u * 100.0)),
                ]
            })
            .collect();
        out.push_str(&table_text(&header, &rows, 2));
    }
    out
}

/// Why a pool's utilisation is not (all) the capacity figure, when it is not.
pub(super) fn basis_note(p: &PoolUsage) -> Option<String> {
    match (p.utilisation_basis, p.unmeasured_node_minutes) {
        (UtilisationBasis::BusyShare, _) => Some(format!(
            "pool {} has no running x time samples in this period (rows written before they were \
             recorded): its utilisation and break-even use the busy share",
            p.pool
        )),
        (UtilisationBasis::Capacity, 0) => None,
        (UtilisationBasis::Capacity, n) => Some(format!(
            "pool {}: {n} node-minutes were written before running x time was recorded; its \
             utilisation covers the others",
            p.pool
        )),
    }
}

/// Columns after the lines' in CSV: filled on `pool` and `self_hosted` rows only.
const UTILISATION_COLUMNS: [&str; 5] =
    ["pool", "utilisation", "busy_share", "utilisation_basis", "break_even_utilisation"];
const BUDGET_COLUMNS: [&str; 6] =
    ["budget_scope", "budget_name", "budget_spend_usd", "budget_period", "budget_usd", "budget_used"];

/// One CSV row per line plus `idle` (already in the lines), `unallocated` and `total` rows:
/// summing `total_usd` over the `line` rows and the `unallocated` row gives the `total` row.
/// Then one `pool` row per pool and one `self_hosted` row per task and pool, with the
/// utilisation columns and no cost (their cost is already in the lines), and one `budget` row
/// per key or team with a budget, in budget columns that only such a report has (its spend is
/// in the lines too). A
/// grouping without `task` gets a `task` column of its own for the `self_hosted` rows.
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
    // The task of `self_hosted` rows goes in the `task` column: the lines' when they are
    // grouped by task, else one of its own before the utilisation columns.
    if !keys.contains(&"task") {
        header.push("task");
    }
    let task_column = header.iter().position(|c| *c == "task").unwrap_or(1);
    header.extend(UTILISATION_COLUMNS);
    // The budget columns only where there are budget rows.
    let budget_columns = if r.budgets.is_empty() { 0 } else { BUDGET_COLUMNS.len() };
    header.extend(&BUDGET_COLUMNS[..budget_columns]);
    let width = header.len();
    let blank_to = |mut row: Vec<String>| {
        row.resize(width, String::new());
        row
    };
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
        w.write_record(blank_to(row)).map_err(ReportError::render("csv"))?;
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
    let share = |v: f64| v.to_string();
    let utilisation_row =
        |label: &str, task: &str, pool: &str, u: f64, busy: f64, basis: UtilisationBasis| {
            let mut row = vec![String::new(); width - UTILISATION_COLUMNS.len() - budget_columns];
            (row[0], row[task_column]) = (label.to_string(), task.to_string());
            row.extend([pool.to_string(), share(u), share(busy), basis.as_str().to_string()]);
            row
        };
    let pools = r.pools.iter().map(|p| {
        blank_to(utilisation_row("pool", "", &p.pool, p.utilisation, p.busy_share, p.utilisation_basis))
    });
    let self_hosted = r.tasks.iter().flat_map(|t| t.self_hosted.iter().map(move |s| (t, s))).map(|(t, s)| {
        let mut row = utilisation_row(
            "self_hosted",
            &t.task,
            &s.pool,
            s.utilisation,
            s.busy_share,
            s.utilisation_basis,
        );
        row.push(s.break_even_utilisation.map(share).unwrap_or_default());
        row
    });
    let budgets = r.budgets.iter().map(|b| {
        let mut row = vec![String::new(); width - budget_columns];
        row[0] = "budget".to_string();
        row.extend([
            b.scope.as_str().to_string(),
            b.name.clone(),
            b.spend_usd.to_string(),
            b.period.as_str().to_string(),
            b.limit_usd.to_string(),
            b.used.map(share).unwrap_or_default(),
        ]);
        row
    });
    for row in rows.into_iter().map(blank_to).chain(pools).chain(self_hosted.map(blank_to)).chain(budgets) {
        w.write_record(&row).map_err(ReportError::render("csv"))?;
    }
    let bytes = w.into_inner().map_err(|e| ReportError::render("csv")(e.into_error()))?;
    String::from_utf8(bytes).map_err(ReportError::render("csv"))
}
