//! The cost report as one self-contained HTML page (inline CSS and SVG, no scripts, nothing
//! fetched), so that it can be mailed, attached to a ticket or opened offline: the lines and
//! pools as tables, cost per task over time, self-hosted against hosted cost per million tokens,
//! and utilisation against break-even. Formatting only: every figure comes from [`Report`].

use std::fmt::Write;

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use super::build::{Line, Report, SelfHosted, UtilisationBasis};

const PALETTE: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
/// Chart width; bar charts keep `LABEL_W` on the left for row names and room right for values.
const W: f64 = 800.0;
const LABEL_W: f64 = 190.0;
const PLOT_W: f64 = W - LABEL_W - 220.0;
const DAY_MS: i64 = 86_400_000;
const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}th,td{padding:3px 8px;border-bottom:1px solid #ddd}
td{text-align:right}td.k,th{text-align:left}tr.sum td{font-style:italic;color:#555}tr.total td{font-weight:bold}
.cards span{display:inline-block;margin:0 1.5em .5em 0}.cards b{display:block;font-size:18px}
.legend span{margin-right:1em;font-size:12px}.legend i{display:inline-block;width:18px;border-top:3px solid;margin-right:4px;vertical-align:middle}
.note{color:#555;font-size:13px;max-width:60em}";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn usd(d: Decimal) -> String {
    format!("${d:.4}")
}

fn opt_usd(d: Option<Decimal>) -> String {
    d.map_or_else(|| "-".into(), usd)
}

/// A value safe to draw: anything not finite is drawn as 0.
fn finite(v: f64) -> f64 {
    Some(v).filter(|v| v.is_finite()).unwrap_or(0.0)
}

fn num(d: Decimal) -> f64 {
    finite(d.to_f64().unwrap_or(0.0))
}

/// A round number at least `v` (1, 2 or 5 times a power of ten).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|c| *c >= v).unwrap_or(10.0 * p)
}

/// Five dollar ticks from 0 to `max`, with enough decimals to tell them apart.
fn usd_ticks(max: f64) -> Vec<(f64, String)> {
    let decimals = (2.0 - max.log10().floor()).clamp(0.0, 6.0) as usize;
    (0..=4).map(|i| (f64::from(i) / 4.0, format!("${:.decimals$}", max * f64::from(i) / 4.0))).collect()
}

fn time_label(ms: i64, bucket_ms: i64, span_ms: i64) -> String {
    let format = match () {
        _ if bucket_ms >= DAY_MS => "%Y-%m-%d",
        _ if span_ms > DAY_MS => "%m-%d %H:%M",
        _ => "%H:%M",
    };
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.strftime(format).to_string())
}

fn svg_open(h: f64) -> String {
    format!(r#"<svg width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="11">"#)
}

fn svg_no_data() -> String {
    svg_open(60.0) + r##"<text x="400" y="30" text-anchor="middle" fill="#888">no data</text></svg>"##
}

/// An HTML legend: (name, dashed), coloured in palette order.
fn legend(items: &[(&str, bool)]) -> String {
    let mut out = String::from(r#"<div class="legend">"#);
    for (c, (name, dashed)) in items.iter().enumerate() {
        let dash = if *dashed { ";border-top-style:dashed" } else { "" };
        let (colour, name) = (PALETTE[c % 8], esc(name));
        let _ = write!(out, r#"<span><i style="border-color:{colour}{dash}"></i>{name}</span>"#);
    }
    out + "</div>"
}

/// Chart 1: one line per task, and the unallocated GPU cost dashed when there is any.
fn cost_over_time(r: &Report) -> String {
    const H: f64 = 250.0;
    let (left, right, top, bottom) = (64.0, 32.0, 12.0, 28.0);
    let s = &r.series;
    let mut lines: Vec<(&str, &[Decimal], bool)> =
        s.by_task.iter().map(|(task, v)| (task.as_str(), v.as_slice(), false)).collect();
    if s.unallocated.iter().any(|d| !d.is_zero()) {
        lines.push(("unallocated GPU", &s.unallocated, true));
    }
    let n = s.buckets.len();
    if n == 0 || lines.is_empty() {
        return svg_no_data();
    }
    let y_max = nice_ceiling(lines.iter().flat_map(|l| l.1.iter().map(|d| num(*d))).fold(0.0, f64::max));
    let (pw, ph) = (W - left - right, H - top - bottom);
    let x = |i: usize| left + if n > 1 { i as f64 / (n - 1) as f64 * pw } else { pw / 2.0 };
    let y = |share: f64| top + ph - share * ph;
    let mut svg = svg_open(H);
    for (share, label) in usd_ticks(y_max) {
        let (yy, x2, tx) = (y(share), W - right, left - 4.0);
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{tx}" y="{:.1}" text-anchor="end">{label}</text>"##,
            yy + 4.0
        );
    }
    let span_ms = s.bucket_ms.saturating_mul(n as i64);
    for i in (0..n).step_by(n.div_ceil(6).max(1)) {
        let label = time_label(s.buckets[i], s.bucket_ms, span_ms);
        let _ = write!(svg, r#"<text x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#, x(i), H - 8.0);
    }
    for (c, (name, values, dashed)) in lines.iter().enumerate() {
        let points: Vec<String> = values
            .iter()
            .take(n)
            .enumerate()
            .map(|(i, d)| format!("{:.1},{:.1}", x(i), y(num(*d) / y_max)))
            .collect();
        let dash = if *dashed { r#" stroke-dasharray="6,3""# } else { "" };
        let (colour, points, name) = (PALETTE[c % 8], points.join(" "), esc(name));
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} points="{points}"><title>{name}</title></polyline>"#
        );
    }
    let items: Vec<(&str, bool)> = lines.iter().map(|(name, _, dashed)| (*name, *dashed)).collect();
    svg + "</svg>" + &legend(&items)
}

/// A horizontal bar chart with a row per (task, pool): the name on the left, `ticks` (share of
/// the plot width, label) as grid lines, and `bars` drawing a row's bars from its top edge.
fn bar_chart(
    r: &Report,
    row_h: f64,
    ticks: &[(f64, String)],
    bars: impl Fn(&mut String, f64, &SelfHosted),
) -> String {
    let rows: Vec<(String, &SelfHosted)> = r
        .tasks
        .iter()
        .flat_map(|t| t.self_hosted.iter().map(move |s| (format!("{} / {}", t.task, s.pool), s)))
        .collect();
    if rows.is_empty() {
        return svg_no_data();
    }
    let h = 24.0 + row_h * rows.len() as f64;
    let mut svg = svg_open(h);
    for (share, label) in ticks {
        let (x, y2, ty) = (LABEL_W + share * PLOT_W, h - 18.0, h - 6.0);
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="4" y2="{y2}" stroke="#ddd"/><text x="{x:.1}" y="{ty}" text-anchor="middle">{label}</text>"##
        );
    }
    for (i, (label, s)) in rows.iter().enumerate() {
        let top = 6.0 + row_h * i as f64;
        let (tx, ty, label) = (LABEL_W - 8.0, top + row_h / 2.0, esc(label));
        let _ = write!(svg, r#"<text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"#);
        bars(&mut svg, top, s);
    }
    svg + "</svg>"
}

/// Chart 2: marginal, fully loaded and cheapest hosted $ per million tokens, a group of bars per row.
fn cost_per_mtok(r: &Report) -> String {
    let values = |s: &SelfHosted| [s.marginal_per_mtok, s.loaded_per_mtok, s.hosted_per_mtok];
    let all = r.tasks.iter().flat_map(|t| t.self_hosted.iter().flat_map(values).flatten());
    let x_max = nice_ceiling(all.map(num).fold(0.0, f64::max));
    let chart = bar_chart(r, 52.0, &usd_ticks(x_max), |svg, top, s| {
        let hosted = format!("{} ", s.cheapest_hosted.as_deref().unwrap_or("hosted"));
        for (c, (value, prefix)) in values(s).iter().zip(["", "", &hosted]).enumerate() {
            let Some(value) = value else { continue };
            let (y, width, colour) = (top + 14.0 * c as f64, num(*value) / x_max * PLOT_W, PALETTE[c]);
            let (tx, ty, text) = (LABEL_W + width + 4.0, y + 10.0, esc(prefix) + &usd(*value));
            let _ = write!(
                svg,
                r#"<rect x="{LABEL_W}" y="{y:.1}" width="{width:.1}" height="12" fill="{colour}"/><text x="{tx:.1}" y="{ty:.1}">{text}</text>"#
            );
        }
    });
    chart
        + &legend(&[
            ("self-hosted marginal (busy GPU)", false),
            ("self-hosted fully loaded (busy + idle GPU)", false),
            ("cheapest hosted", false),
        ])
}

/// Chart 3: each pool's utilisation (share of its sequence capacity used) as a bar on 0–100 %,
/// with the task's break-even marked.
fn utilisation(r: &Report) -> String {
    let ticks: Vec<(f64, String)> = (0..=4).map(|i| (f64::from(i) / 4.0, format!("{} %", i * 25))).collect();
    let x = |share: f64| LABEL_W + finite(share).clamp(0.0, 1.0) * PLOT_W;
    let chart = bar_chart(r, 24.0, &ticks, |svg, top, s| {
        let (used, width, colour) = (finite(s.utilisation), x(s.utilisation) - LABEL_W, PALETTE[0]);
        let _ = write!(
            svg,
            r##"<rect x="{LABEL_W}" y="{y:.1}" width="{PLOT_W}" height="14" fill="#eee"/><rect x="{LABEL_W}" y="{y:.1}" width="{width:.1}" height="14" fill="{colour}"/>"##,
            y = top + 5.0
        );
        let break_even = match s.break_even_utilisation {
            None => "no hosted price".to_string(),
            Some(b) => {
                let (xx, y2, colour) = (x(if b.is_finite() { b } else { 1.0 }), top + 22.0, PALETTE[1]);
                let _ = write!(
                    svg,
                    r#"<line x1="{xx:.1}" x2="{xx:.1}" y1="{top:.1}" y2="{y2:.1}" stroke="{colour}" stroke-width="3"/>"#
                );
                match b {
                    _ if !b.is_finite() => "break-even never".to_string(),
                    _ if b > 1.0 => format!("break-even never ({:.0} %)", b * 100.0),
                    _ => format!("break-even {:.0} %", b * 100.0),
                }
            }
        };
        let (tx, ty) = (LABEL_W + PLOT_W + 8.0, top + 16.0);
        let basis = match s.utilisation_basis {
            UtilisationBasis::Capacity => "",
            UtilisationBasis::BusyShare => " (busy share: no capacity samples)",
        };
        let _ =
            write!(svg, r#"<text x="{tx}" y="{ty:.1}">{:.0} %{basis}, {break_even}</text>"#, used * 100.0);
    });
    chart + &legend(&[("utilisation of capacity", false), ("break-even utilisation", false)])
}

/// A table row: `keys` left-aligned and escaped, then `cells` as they are.
fn row(class: &str, keys: &[String], cells: &[String]) -> String {
    let keys: String = keys.iter().map(|k| format!(r#"<td class="k">{}</td>"#, esc(k))).collect();
    let cells: String = cells.iter().map(|c| format!("<td>{c}</td>")).collect();
    format!(r#"<tr class="{class}">{keys}{cells}</tr>"#)
}

fn line_cells(l: &Line) -> Vec<String> {
    let t = &l.tokens;
    let counts =
        [l.requests, l.failed, t.input, t.cached_input, t.cache_write, t.output].map(|n| n.to_string());
    let money = [l.hosted_usd, l.gpu_busy_usd, l.gpu_idle_usd, l.total_usd].map(usd);
    let per = [opt_usd(l.per_request_usd), opt_usd(l.per_mtok_output_usd)];
    counts.into_iter().chain(money).chain(per).collect()
}

/// The lines, then idle (already in them), unallocated and total rows.
fn lines_table(r: &Report) -> String {
    let columns =
        "requests,failed,tokens in,cache reads,cache writes,tokens out,hosted,GPU busy,GPU idle,total,per request,per M out";
    let keys = r.group_by.len().max(1);
    let names = r.group_by.iter().map(|g| g.as_str()).chain((r.group_by.is_empty()).then_some("task"));
    let header: String = names.chain(columns.split(',')).map(|c| format!("<th>{c}</th>")).collect();
    let lines: String = r.lines.iter().map(|l| row("line", &l.group, &line_cells(l))).collect();
    let t = &r.totals;
    let (idle, unallocated) = (usd(t.gpu_idle_usd), usd(t.gpu_unallocated_usd));
    let sums =
        [t.hosted_usd, t.gpu_busy_usd, t.gpu_idle_usd, t.total_usd].map(|d| format!("<td>{}</td>", usd(d)));
    format!(
        r#"<table><tr>{header}</tr>{lines}
<tr class="sum"><td class="k" colspan="{}">idle GPU (included above)</td><td>{idle}</td><td colspan="3"></td></tr>
<tr class="sum"><td class="k" colspan="{}">unallocated GPU</td><td>{unallocated}</td><td colspan="2"></td></tr>
<tr class="total"><td class="k" colspan="{keys}">TOTAL</td><td>{}</td><td colspan="5"></td>{}<td colspan="2"></td></tr>
</table>"#,
        keys + 8,
        keys + 9,
        t.requests,
        sums.concat()
    )
}

fn pools_table(r: &Report) -> String {
    let header = "pool,nodes,GPU h busy,GPU h idle,GPU h batch,busy,idle,unallocated,utilisation,busy share";
    let header: String = header.split(',').map(|c| format!("<th>{c}</th>")).collect();
    let rows: String = r
        .pools
        .iter()
        .map(|p| {
            let hours = [p.gpu_hours_busy, p.gpu_hours_idle, p.gpu_hours_batch].map(|h| format!("{h:.2}"));
            let money = [p.busy_usd, p.idle_usd, p.unallocated_usd].map(usd);
            let shares = [p.utilisation, p.busy_share].map(|u| format!("{:.1} %", finite(u) * 100.0));
            let cells: Vec<String> =
                [p.nodes.to_string()].into_iter().chain(hours).chain(money).chain(shares).collect();
            row("pool", std::slice::from_ref(&p.pool), &cells)
        })
        .collect();
    let notes: String = r
        .pools
        .iter()
        .filter_map(super::render::basis_note)
        .map(|n| format!(r#"<p class="note">{}</p>"#, esc(&n)))
        .collect();
    format!("<table><tr>{header}</tr>{rows}</table>{notes}")
}

/// Keys' and teams' spend against their budgets; nothing when the report has none.
fn budgets_table(r: &Report) -> String {
    if r.budgets.is_empty() {
        return String::new();
    }
    let header: String =
        ["scope", "name", "spend", "budget", "used"].iter().map(|c| format!("<th>{c}</th>")).collect();
    let rows: String = r
        .budgets
        .iter()
        .map(|b| {
            let used = b.used.map_or_else(|| "-".into(), |u| format!("{:.1} %", finite(u) * 100.0));
            let cells = [usd(b.spend_usd), format!("{} a {}", usd(b.limit_usd), b.period.as_str()), used];
            row("budget", &[b.scope.as_str().to_string(), b.name.clone()], &cells)
        })
        .collect();
    format!("<h2>Budgets</h2><p>Spend in the period against the budget that covers it.</p><table><tr>{header}</tr>{rows}</table>")
}

/// The whole page.
pub fn page(r: &Report) -> String {
    let t = &r.totals;
    let cards = [
        ("total cost", t.total_usd),
        ("hosted spend", t.hosted_usd),
        ("GPU busy", t.gpu_busy_usd),
        ("GPU idle", t.gpu_idle_usd),
        ("GPU unallocated", t.gpu_unallocated_usd),
    ];
    let cards: String =
        cards.iter().map(|(label, v)| format!("<span>{label}<b>{}</b></span>", usd(*v))).collect();
    let no_data = if r.lines.is_empty() {
        "<p><b>No data: the ledger has no requests in this period.</b></p>"
    } else {
        ""
    };
    format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Spillway cost report</title><style>{STYLE}</style></head><body>
<h1>Spillway cost report</h1><p>{} – {} (UTC)</p><div class="cards">{cards}</div>{no_data}{}
<h2>Cost per task over time</h2>{}
<h2>Self-hosted vs hosted, $ per million tokens</h2>{}
<h2>Utilisation and break-even</h2>{}
<h2>GPU pools</h2>{}{}
<p class="note">Allocation: busy GPU minutes are shared among the tasks whose requests arrived on that node in
that minute, by tokens (input + output); idle minutes by each task's tokens on that node over the period; the
cost of nodes that served nothing stays unallocated. Utilisation is the share of a pool's capacity used: running
sequences × time over slots × time; busy share is the share of node-minutes in which anything ran. Break-even
assumes a pool's throughput is proportional to its utilisation.</p></body></html>
"#,
        esc(&r.from),
        esc(&r.to),
        lines_table(r),
        cost_over_time(r),
        cost_per_mtok(r),
        utilisation(r),
        pools_table(r),
        budgets_table(r)
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rust_decimal::Decimal;

    use super::page;
    use crate::report::build::{
        CostSeries, Line, PoolUsage, Report, SelfHosted, TaskEconomics, Tokens, Totals,
    };
    use crate::report::query::{GroupKey, ReportFormat, ReportQuery};

    fn usd(cents: i64) -> Decimal {
        Decimal::new(cents, 2)
    }

    fn self_hosted(pool: &str, utilisation: f64, break_even: Option<f64>) -> SelfHosted {
        SelfHosted {
            pool: pool.into(),
            tokens: Tokens { input: 1_000, cached_input: 0, cache_write: 0, output: 500 },
            marginal_usd: usd(30),
            loaded_usd: usd(90),
            marginal_per_mtok: Some(usd(200)),
            loaded_per_mtok: Some(usd(600)),
            utilisation,
            utilisation_basis: crate::report::build::UtilisationBasis::Capacity,
            busy_share: 1.0,
            cheapest_hosted: break_even.map(|_| "openai".into()),
            hosted_per_mtok: break_even.map(|_| usd(400)),
            break_even_utilisation: break_even,
        }
    }

    fn report() -> Report {
        let line = |task: &str| Line {
            group: vec![task.into()],
            requests: 3,
            tokens: Tokens { input: 1_000, cached_input: 100, cache_write: 40, output: 500 },
            total_usd: usd(90),
            per_request_usd: Some(usd(30)),
            ..Line::default()
        };
        let economics = |task: &str, s: SelfHosted| TaskEconomics {
            task: task.into(),
            by_backend: Vec::new(),
            self_hosted: vec![s],
        };
        let series = |v: [i64; 3]| v.map(usd).to_vec();
        Report {
            from: "2026-11-29T10:00:00Z".into(),
            to: "2026-11-29T13:00:00Z".into(),
            group_by: vec![GroupKey::Task],
            lines: vec![line("summarise"), line("<b>&x")],
            tasks: vec![
                economics("summarise", self_hosted("vllm-a", 0.4, Some(1.5))),
                economics("<b>&x", self_hosted("vllm-a", f64::NAN, Some(f64::INFINITY))),
            ],
            pools: vec![PoolUsage {
                pool: "vllm-a".into(),
                nodes: 2,
                utilisation: 0.4,
                ..PoolUsage::default()
            }],
            totals: Totals { requests: 6, total_usd: usd(180), ..Totals::default() },
            series: CostSeries {
                bucket_ms: 3_600_000,
                buckets: vec![1_795_860_000_000, 1_795_863_600_000, 1_795_867_200_000],
                by_task: BTreeMap::from([
                    ("summarise".into(), series([10, 50, 30])),
                    ("<b>&x".into(), series([0, 20, 20])),
                ]),
                unallocated: series([5, 0, 5]),
            },
            budgets: Vec::new(),
        }
    }

    fn assert_drawable(html: &str) {
        assert!(html.starts_with("<!doctype html>"));
        assert!(!html.contains("http://") && !html.contains("https://"), "fetches nothing");
        assert!(!html.contains("NaN") && !html.contains("inf"), "every number is finite");
        assert_eq!(html.matches("<svg").count(), 3);
    }

    #[test]
    fn page_has_tables_three_charts_and_escaped_names() {
        let html = page(&report());
        assert_drawable(&html);
        assert!(html.contains("summarise") && html.contains("vllm-a"));
        assert!(html.contains("&lt;b&gt;&amp;x") && !html.contains("<b>&x"));
        assert!(html.contains("stroke-dasharray"), "unallocated cost is drawn dashed");
        assert!(html.contains("never (150 %)") && html.contains("openai $4.0000"));
        assert!(html.contains("TOTAL") && html.contains("$1.8000") && html.contains("11:00"));
    }

    #[test]
    fn empty_report_says_no_data() {
        let query = ReportQuery {
            from_ms: 1_795_860_000_000,
            to_ms: 1_795_867_200_000,
            group_by: vec![GroupKey::Task],
            format: ReportFormat::Html,
        };
        let html = page(&crate::report::build(&query, &[], &[], None));
        assert_drawable(&html);
        assert!(html.contains("No data") && html.contains("no data"));
    }
}
