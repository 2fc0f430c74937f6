//! The comparison as text: one table per scenario with a row per strategy, or the same
//! figures as JSON. Pure formatting of `Summary` values; it computes nothing new and must stay
//! deterministic (no times, no paths that differ between runs).

use serde::Serialize;

use super::stats::{Stats, Summary};

/// One scenario's runs.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    pub scenario: String,
    pub description: String,
    pub seed: u64,
    pub duration_secs: f64,
    /// The SLO of the first workload stream's task, ms (the line on the TTFT chart).
    pub slo_ms: u64,
    pub runs: Vec<Stats>,
}

#[derive(Serialize)]
struct Json<'a> {
    scenario: &'a str,
    description: &'a str,
    seed: u64,
    duration_secs: f64,
    results: Vec<Summary>,
}

/// Every scenario as a JSON array.
pub fn json(reports: &[ScenarioReport]) -> String {
    let all: Vec<Json<'_>> = reports
        .iter()
        .map(|r| Json {
            scenario: &r.scenario,
            description: &r.description,
            seed: r.seed,
            duration_secs: r.duration_secs,
            results: r.runs.iter().map(Stats::summary).collect(),
        })
        .collect();
    serde_json::to_string_pretty(&all).expect("summaries serialise")
}

fn human_tokens(n: u64) -> String {
    match n {
        n if n >= 1_000_000 => format!("{:.2}M", n as f64 / 1e6),
        n if n >= 1000 => format!("{:.1}k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn human_duration(secs: f64) -> String {
    if secs >= 3600.0 && secs % 3600.0 == 0.0 {
        format!("{}h", secs / 3600.0)
    } else if secs >= 60.0 && secs % 60.0 == 0.0 {
        format!("{}m", secs / 60.0)
    } else {
        format!("{secs}s")
    }
}

/// Every scenario as a table.
pub fn table(reports: &[ScenarioReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let requests = r.runs.first().map_or(0, |s| s.requests);
        out.push_str(&format!(
            "{} ({}, seed {}, {} requests, TTFT SLO {} ms)\n",
            r.scenario,
            human_duration(r.duration_secs),
            r.seed,
            requests,
            r.slo_ms
        ));
        if !r.description.is_empty() {
            out.push_str(&format!("  {}\n", r.description.trim()));
        }
        let width = r.runs.iter().map(|s| s.label().len()).max().unwrap_or(8).max(11);
        out.push_str(&format!(
            "  {:<width$} {:>7} {:>9} {:>7} {:>6} {:>6} {:>10} {:>9} {:>6} {:>9} {:>6}\n",
            "strategy",
            "SLO",
            "p95 TTFT",
            "errors",
            "broken",
            "local",
            "hosted tok",
            "hosted $",
            "cache",
            "switch/ph",
            "calls"
        ));
        for s in r.runs.iter().map(Stats::summary) {
            out.push_str(&format!(
                "  {:<width$} {:>6.1}% {:>6.0} ms {:>7} {:>6} {:>5.1}% {:>10} {:>9.2} {:>5.1}% {:>9.2} {:>6.2}\n",
                s.strategy,
                s.slo_attainment * 100.0,
                s.ttft_p95_ms,
                s.errors,
                s.broken_streams,
                s.local_share * 100.0,
                human_tokens(s.hosted_tokens),
                s.hosted_cost_usd,
                s.cache_hit_rate * 100.0,
                s.switches_per_project_hour,
                s.attempts_per_request,
            ));
        }
        if r.runs.iter().any(|s| s.batch.is_some()) {
            out.push_str(&batch_table(r, width));
        }
        out.push('\n');
    }
    out.push_str(
        "SLO: share of requests with a first token within the SLO and no error; errors: client-visible,\n\
         before or without a first token; broken: streams broken after their first token (a node lost);\n\
         local: share served by the fleet; cache: prompt tokens served from a prefix/prompt cache;\n\
         switch/ph: backend changes per project per hour; calls: upstream calls per request.\n",
    );
    if reports.iter().any(|r| r.runs.iter().any(|s| s.batch.is_some())) {
        out.push_str(
            "Batch runs: /fleet runs batch jobs on the fleet's free slots first (the router's batch runner),\n\
             /provider sends each whole job to a provider's batch API (batching off). idle GPU h: GPU hours\n\
             × the share of sequence slots unused; batch $: the lines' hosted spend (batch price at a batch\n\
             API, list price in realtime); done in: hours from submission to the job's last line; lines:\n\
             answered by the fleet / a provider's batch API / hosted realtime, failed, expired.\n",
        );
    }
    out
}

/// The fleet's hours and what became of the batch jobs, a row per run.
fn batch_table(r: &ScenarioReport, width: usize) -> String {
    let mut out = format!(
        "  {:<width$} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9}  {}\n",
        "batching", "GPU h", "idle GPU h", "fleet $", "hosted $", "batch $", "done in", "lines"
    );
    for s in r.runs.iter().map(Stats::summary) {
        let Some(b) = &s.batch else { continue };
        let done = match b.completion_hours.iter().copied().collect::<Option<Vec<f64>>>() {
            Some(hours) => format!("{:.2} h", hours.into_iter().fold(0.0, f64::max)),
            None => "not done".to_string(),
        };
        out.push_str(&format!(
            "  {:<width$} {:>8.1} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9}  {} / {} / {}, {} failed, {} expired\n",
            s.strategy,
            s.gpu_hours,
            s.idle_gpu_hours,
            s.fleet_cost_usd,
            s.hosted_cost_usd,
            b.cost_usd,
            done,
            b.fleet,
            b.hosted_batch,
            b.realtime,
            b.failed,
            b.expired,
        ));
    }
    out
}
