//! The comparison as one self-contained HTML file: the summary table and, per scenario, line
//! charts over time drawn as inline SVG (no scripts, no CDN, no fonts to fetch), so the file
//! can be attached to an issue or opened offline.
//!
//! Charts: TTFT p95 of each strategy against the SLO, client-visible errors, requests served
//! per backend for each strategy, and PID availability and first-choice weights per backend
//! for the strategies that have them. Pure formatting; it must not compute new figures.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::report::ScenarioReport;
use super::stats::{Bucket, Stats};

const PALETTE: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const W: f64 = 640.0;
const H: f64 = 220.0;
const PAD_L: f64 = 56.0;
const PAD_R: f64 = 12.0;
const PAD_T: f64 = 26.0;
const PAD_B: f64 = 30.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One line of a chart: (minutes, value) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    pub colour: usize,
}

/// A round number at least `v` (1, 2 or 5 times a power of ten).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|c| *c >= v).unwrap_or(10.0 * p)
}

/// A line chart; `hline` draws a labelled horizontal reference line.
pub fn chart(title: &str, series: &[Series], x_max: f64, hline: Option<(&str, f64)>) -> String {
    let data_max = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let y_max = nice_ceiling(data_max.max(hline.map_or(0.0, |h| h.1 * 1.1)));
    let x_max = x_max.max(1e-9);
    let (pw, ph) = (W - PAD_L - PAD_R, H - PAD_T - PAD_B);
    let x = |v: f64| PAD_L + v / x_max * pw;
    let y = |v: f64| PAD_T + ph - v / y_max * ph;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
    );
    let _ =
        write!(svg, r#"<text x="{PAD_L}" y="15" font-size="13" font-weight="bold">{}</text>"#, esc(title));
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<line x1="{PAD_L}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - PAD_R,
            PAD_L - 4.0,
            y(v) + 4.0,
            if y_max >= 10.0 { format!("{v:.0}") } else { format!("{v:.2}") },
            y = y(v)
        );
        let t = x_max * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t:.0} min</text>"#,
            x(t),
            H - PAD_B + 16.0
        );
    }
    if let Some((label, v)) = hline {
        let _ = write!(
            svg,
            r##"<line x1="{PAD_L}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#000" stroke-dasharray="2,3"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - PAD_R,
            W - PAD_R,
            y(v) - 3.0,
            esc(label),
            yy = y(v)
        );
    }
    for s in series {
        if s.points.is_empty() {
            continue;
        }
        let path: Vec<String> = s.points.iter().map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b))).collect();
        let dash = if s.dashed { r#" stroke-dasharray="6,3""# } else { "" };
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.6"{dash} points="{}"><title>{}</title></polyline>"#,
            PALETTE[s.colour % PALETTE.len()],
            path.join(" "),
            esc(&s.name)
        );
    }
    svg.push_str("</svg>");
    let mut legend = String::from(r#"<div class="legend">"#);
    for s in series {
        let _ = write!(
            legend,
            r#"<span><i style="border-color:{}{}"></i>{}</span>"#,
            PALETTE[s.colour % PALETTE.len()],
            if s.dashed { ";border-top-style:dashed" } else { "" },
            esc(&s.name)
        );
    }
    legend.push_str("</div>");
    format!(r#"<figure>{svg}{legend}</figure>"#)
}

fn minutes(r: &ScenarioReport, stats: &Stats, i: usize) -> f64 {
    let width = r.duration_secs / stats.buckets.len().max(1) as f64;
    (i as f64 + 1.0) * width / 60.0
}

/// One chart line's points over a run: `(minute, f(bucket))` for each bucket where `f` has a value.
fn points(r: &ScenarioReport, s: &Stats, f: impl Fn(&Bucket) -> Option<f64>) -> Vec<(f64, f64)> {
    s.buckets.iter().enumerate().filter_map(|(i, b)| Some((minutes(r, s, i), f(b)?))).collect()
}

fn scenario_section(r: &ScenarioReport, out: &mut String) {
    let x_max = r.duration_secs / 60.0;
    let _ = write!(out, "<h2>{}</h2><p>{}</p>", esc(&r.scenario), esc(&r.description));
    out.push_str(
        &super::report::table(std::slice::from_ref(r))
            .lines()
            .next()
            .map_or(String::new(), |l| format!("<p class=\"sub\">{}</p>", esc(l))),
    );
    let bucket_secs = |s: &Stats| r.duration_secs / s.buckets.len().max(1) as f64;
    let ttft: Vec<Series> = r
        .runs
        .iter()
        .enumerate()
        .map(|(c, s)| Series {
            name: s.label(),
            points: points(r, s, |b| b.ttft_p95()),
            dashed: false,
            colour: c,
        })
        .collect();
    let slo = format!("SLO {} ms", r.slo_ms);
    out.push_str(&chart("TTFT p95 (ms), by arrival time", &ttft, x_max, Some((&slo, r.slo_ms as f64))));
    let errors: Vec<Series> = r
        .runs
        .iter()
        .enumerate()
        .map(|(c, s)| Series {
            name: s.label(),
            points: points(r, s, |b| Some(b.errors as f64 / bucket_secs(s))),
            dashed: false,
            colour: c,
        })
        .chain(r.runs.iter().enumerate().filter(|(_, s)| s.broken_streams > 0).map(|(c, s)| Series {
            name: format!("{}: broken after first token", s.label()),
            points: points(r, s, |b| Some(b.broken_streams as f64 / bucket_secs(s))),
            dashed: true,
            colour: c,
        }))
        .collect();
    let title = "Client-visible errors per second (dashed: streams broken after their first token)";
    out.push_str(&chart(title, &errors, x_max, None));
    for s in &r.runs {
        let backends: BTreeSet<&String> = s.buckets.iter().flat_map(|b| b.served.keys()).collect();
        let load: Vec<Series> = backends
            .iter()
            .enumerate()
            .map(|(c, name)| Series {
                name: (*name).clone(),
                points: points(r, s, |b| Some(*b.served.get(*name).unwrap_or(&0) as f64 / bucket_secs(s))),
                dashed: false,
                colour: c,
            })
            .collect();
        let title = format!("{}: requests served per second, by backend", s.label());
        out.push_str(&chart(&title, &load, x_max, None));
        let tracked: BTreeSet<&String> =
            s.buckets.iter().flat_map(|b| b.availability.keys().chain(b.weights.keys())).collect();
        if tracked.is_empty() {
            continue;
        }
        let mut lines = Vec::new();
        for (c, name) in tracked.iter().enumerate() {
            let weight = points(r, s, |b| b.weights.get(*name).copied());
            let avail = points(r, s, |b| b.availability.get(*name).copied());
            lines.push(Series { name: format!("weight {name}"), points: weight, dashed: false, colour: c });
            lines.push(Series {
                name: format!("availability {name}"),
                points: avail,
                dashed: true,
                colour: c,
            });
        }
        let title = format!("{}: first-choice weight (solid) and PID availability (dashed)", s.label());
        out.push_str(&chart(&title, &lines, x_max, None));
    }
}

/// The whole report page.
pub fn page(reports: &[ScenarioReport]) -> String {
    let mut out = String::from(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>spillway simulate</title><style>
body{font-family:sans-serif;max-width:1320px;margin:1em auto;padding:0 1em;color:#222}
pre{background:#f6f6f6;padding:.8em;overflow-x:auto}
figure{display:inline-block;margin:.4em;vertical-align:top}
.legend span{margin-right:1em;font-size:12px}.legend i{display:inline-block;width:18px;border-top:2px solid;margin-right:4px;vertical-align:middle}
.sub{color:#555}
</style></head><body><h1>spillway simulate</h1>"#,
    );
    let _ = write!(out, "<pre>{}</pre>", esc(&super::report::table(reports)));
    for r in reports {
        scenario_section(r, &mut out);
    }
    out.push_str("</body></html>\n");
    out
}
