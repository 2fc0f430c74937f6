//! The JSON behind `/dashboard/data`, built server-side from the router's own Prometheus
//! exposition (the same numbers `/metrics` exports, so the page and Prometheus never disagree)
//! and the configured task list (so every task shows, with or without traffic).
//!
//! Pure: the caller passes the exposition text, the config and the time, so the shape can be
//! tested on hand-written input. Numbers that are not finite (NaN percentiles without data, an
//! infinite telemetry age, an infinite burn rate) become `null`.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_parse::{Labels, Scrape, Value as Sample};
use serde_json::{json, Map, Value};

use crate::batch::job::Counts;
use crate::batch::store::JobRow;
use crate::config::{Config, Priority};

/// The SLO windows the page shows, in the order it shows them.
const WINDOWS: [&str; 4] = ["5m", "30m", "1h", "6h"];
/// The window the error budget left is computed over.
const BUDGET_WINDOW: &str = "6h";

/// A finite number (negative zero, as an empty sum gives, made plain zero), or `null`.
pub fn num(v: f64) -> Value {
    if v.is_finite() {
        json!(v + 0.0)
    } else {
        Value::Null
    }
}

/// Share of the error budget of `objective` left at `attainment`, in 0–1.
pub(crate) fn budget_left(attainment: f64, objective: f64) -> f64 {
    let budget = 1.0 - objective;
    if budget <= 0.0 {
        return if attainment >= 1.0 { 1.0 } else { 0.0 };
    }
    (1.0 - (1.0 - attainment) / budget).clamp(0.0, 1.0)
}

/// The samples of one family, as labels and value.
struct Families<'a> {
    scrape: &'a Scrape,
}

impl<'a> Families<'a> {
    fn of(&self, name: &'a str) -> impl Iterator<Item = (&'a Labels, f64)> + 'a {
        self.scrape.samples.iter().filter(move |s| s.metric == name).filter_map(|s| match s.value {
            Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => Some((&s.labels, v)),
            Sample::Histogram(_) | Sample::Summary(_) => None,
        })
    }

    /// The first sample of `name` whose labels include all of `want`.
    fn one(&self, name: &'a str, want: &[(&str, &str)]) -> Option<f64> {
        self.of(name).find(|(l, _)| want.iter().all(|(k, v)| l.get(k) == Some(*v))).map(|(_, v)| v)
    }

    /// Sums of `name` grouped by the value of `label`, over samples matching `want`.
    fn sum_by(&self, name: &'a str, label: &str, want: &[(&str, &str)]) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (l, v) in self.of(name).filter(|(l, _)| want.iter().all(|(k, w)| l.get(k) == Some(*w))) {
            *out.entry(l.get(label).unwrap_or("").to_string()).or_insert(0.0) += v;
        }
        out
    }

    /// One value per SLO window, `null` where the series is missing or not finite.
    fn windows(&self, name: &'a str, task: &str, slo: &str) -> Value {
        WINDOWS
            .iter()
            .map(|w| {
                let v = self.one(name, &[("task", task), ("slo", slo), ("window", w)]);
                (w.to_string(), v.map_or(Value::Null, num))
            })
            .collect::<Map<_, _>>()
            .into()
    }
}

fn to_json(m: &BTreeMap<String, f64>) -> Value {
    m.iter().map(|(k, v)| (k.clone(), num(*v))).collect::<Map<_, _>>().into()
}

/// A batch job as the page lists it: never its owner, its metadata or its lines.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BatchJob {
    pub id: String,
    pub endpoint: String,
    pub status: &'static str,
    pub created_ms: i64,
    pub expires_ms: i64,
    pub total: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub open: u64,
    /// Where its queued lines go now and why (`deadline::Plan` as kept), `null` before a plan.
    pub plan: Value,
}

impl BatchJob {
    pub fn new(job: &JobRow, counts: &Counts) -> BatchJob {
        BatchJob {
            id: job.id.clone(),
            endpoint: job.endpoint.clone(),
            status: job.status.as_str(),
            created_ms: job.created_ms,
            expires_ms: job.expires_ms(),
            total: counts.total(),
            succeeded: counts.succeeded,
            failed: counts.failed(),
            open: counts.open(),
            plan: job.plan.as_deref().and_then(|p| serde_json::from_str(p).ok()).unwrap_or(Value::Null),
        }
    }
}

/// The dashboard's data: tasks, nodes, backends and counters, from `exposition`; the batch
/// jobs as read from the store.
pub fn build(exposition: &str, config: &Config, now_ms: i64, jobs: &[BatchJob]) -> Value {
    let scrape = Scrape::parse(exposition.lines().map(|l| Ok(l.to_string())))
        .unwrap_or(Scrape { docs: Default::default(), samples: Vec::new() });
    let f = Families { scrape: &scrape };
    json!({
        "now_ms": now_ms,
        "telemetry_stale_after_s": config.telemetry.stale_after_ms as f64 / 1000.0,
        "tasks": tasks(&f, config),
        "nodes": nodes(&f),
        "backends": backends(&f, config),
        "counters": counters(&f, config),
        "batch": batch(&f, config, jobs),
    })
}

/// Batch work beside interactive traffic: each pool's occupancy by priority, the lines waiting
/// and running, and the newest jobs with their plans.
fn batch(f: &Families<'_>, config: &Config, jobs: &[BatchJob]) -> Value {
    let pools: Map<String, Value> = config
        .backends
        .iter()
        .filter(|b| b.kind().is_local())
        .map(|b| {
            let by_priority: Map<String, Value> = Priority::ALL
                .iter()
                .map(|p| {
                    let want = [("backend", b.name.as_str()), ("priority", p.as_str())];
                    (
                        p.as_str().to_string(),
                        f.one("spillway_pool_occupancy_ratio", &want).map_or(Value::Null, num),
                    )
                })
                .collect();
            (b.name.clone(), by_priority.into())
        })
        .collect();
    let lines = |state: &str| f.one("spillway_batch_lines", &[("state", state)]).map_or(Value::Null, num);
    json!({
        "occupancy": pools,
        "lines": {"queued": lines("queued"), "running": lines("running")},
        "ended": to_json(&f.sum_by("spillway_batch_lines_ended_total", "state", &[])),
        "jobs": jobs,
    })
}

fn tasks(f: &Families<'_>, config: &Config) -> Vec<Value> {
    let mut out = Vec::new();
    for t in &config.tasks {
        let name = t.name.as_str();
        let pct = |p: &str| f.one("spillway_ttft_percentile_seconds", &[("task", name), ("percentile", p)]);
        let attained = |slo: &str| {
            f.one("spillway_slo_attainment_ratio", &[("task", name), ("slo", slo), ("window", BUDGET_WINDOW)])
        };
        let budget =
            |slo: &str, objective: f64| attained(slo).map_or(Value::Null, |a| num(budget_left(a, objective)));
        let by_outcome = f.sum_by("spillway_requests_total", "outcome", &[("task", name)]);
        out.push(json!({
            "name": name,
            "ttft_target_s": t.slo.ttft_ms as f64 / 1000.0,
            "objective": t.slo.objective,
            "availability_objective": t.slo.availability,
            "p50_s": pct("p50").map_or(Value::Null, num),
            "p95_s": pct("p95").map_or(Value::Null, num),
            "p99_s": pct("p99").map_or(Value::Null, num),
            "attainment": {
                "ttft": f.windows("spillway_slo_attainment_ratio", name, "ttft"),
                "availability": f.windows("spillway_slo_attainment_ratio", name, "availability"),
            },
            "burn": {
                "ttft": f.windows("spillway_slo_burn_rate", name, "ttft"),
                "availability": f.windows("spillway_slo_burn_rate", name, "availability"),
            },
            "budget_left": {
                "ttft": budget("ttft", t.slo.objective),
                "availability": budget("availability", t.slo.availability),
            },
            "requests": num(by_outcome.values().sum()),
            "requests_by_outcome": to_json(&by_outcome),
            "spills": num(f.sum_by("spillway_spills_total", "task", &[("task", name)]).values().sum()),
            "shed": num(f.sum_by("spillway_shed_total", "task", &[("task", name)]).values().sum()),
        }));
    }
    out
}

const NODE_GAUGES: [(&str, &str); 6] = [
    ("running", "spillway_node_running"),
    ("waiting", "spillway_node_waiting"),
    ("kv_usage", "spillway_node_kv_usage_ratio"),
    ("headroom", "spillway_node_headroom"),
    ("telemetry_age_s", "spillway_node_telemetry_age_seconds"),
    ("quarantined", "spillway_node_quarantined"),
];

fn key(l: &Labels) -> (String, String) {
    (l.get("backend").unwrap_or("").to_string(), l.get("node").unwrap_or("").to_string())
}

/// Local nodes (those with node gauges), by backend then node.
fn nodes(f: &Families<'_>) -> Vec<Value> {
    let keys: BTreeSet<(String, String)> =
        NODE_GAUGES.iter().flat_map(|(_, metric)| f.of(metric).map(|(l, _)| key(l))).collect();
    keys.into_iter()
        .map(|(backend, node)| {
            let want = [("backend", backend.as_str()), ("node", node.as_str())];
            let mut o = Map::new();
            o.insert("backend".into(), json!(backend));
            o.insert("node".into(), json!(node));
            for (field, metric) in NODE_GAUGES {
                o.insert(field.into(), f.one(metric, &want).map_or(Value::Null, num));
            }
            o["quarantined"] = json!(f.one("spillway_node_quarantined", &want).is_some_and(|q| q > 0.0));
            o.insert("held".into(), json!(f.one("spillway_node_held", &want).is_some_and(|h| h > 0.0)));
            let gpus: Vec<f64> = f
                .of("spillway_gpu_utilization_ratio")
                .filter(|(l, v)| key(l) == (backend.clone(), node.clone()) && v.is_finite())
                .map(|(_, v)| v)
                .collect();
            let avg = (!gpus.is_empty()).then(|| gpus.iter().sum::<f64>() / gpus.len() as f64);
            o.insert("gpu_util".into(), avg.map_or(Value::Null, num));
            o.insert("gpus".into(), json!(gpus.len()));
            o.insert("breaker".into(), json!(breaker_name(f.one("spillway_breaker_state", &want))));
            o.into()
        })
        .collect()
}

fn breaker_name(state: Option<f64>) -> &'static str {
    match state {
        Some(s) if s >= 2.0 => "open",
        Some(s) if s >= 1.0 => "half_open",
        Some(_) => "closed",
        None => "unknown",
    }
}

/// Every configured backend, in config order.
fn backends(f: &Families<'_>, config: &Config) -> Vec<Value> {
    let requests = f.sum_by("spillway_requests_total", "backend", &[]);
    config
        .backends
        .iter()
        .map(|b| {
            let name = b.name.as_str();
            let mut breakers = BTreeMap::from([("closed", 0), ("half_open", 0), ("open", 0)]);
            for (_, v) in f.of("spillway_breaker_state").filter(|(l, _)| l.get("backend") == Some(name)) {
                *breakers.entry(breaker_name(Some(v))).or_insert(0) += 1;
            }
            let quarantined = f
                .of("spillway_node_quarantined")
                .filter(|(l, v)| l.get("backend") == Some(name) && *v > 0.0)
                .count();
            let availability = f.one("spillway_backend_availability", &[("backend", name)]);
            // The evaluation gate per task: pass (current fingerprint passed), fail (latest run
            // failed), else untested. Only gated tasks have series.
            let mut gate = Map::new();
            for (l, passing) in f.of("spillway_gate_passing").filter(|(l, _)| l.get("backend") == Some(name))
            {
                let task = l.get("task").unwrap_or_default();
                let failed = f.one("spillway_gate_failed", &[("backend", name), ("task", task)]) == Some(1.0);
                let state = if failed {
                    "fail"
                } else if passing > 0.0 {
                    "pass"
                } else {
                    "untested"
                };
                gate.insert(task.to_string(), json!(state));
            }
            json!({
                "backend": name,
                "kind": b.kind().as_str(),
                "engine": b.pool().map(|p| p.engine.as_str()),
                "local": b.kind().is_local(),
                "availability": availability.map_or(Value::Null, num),
                "breakers": breakers,
                "quarantined": quarantined,
                "weight": to_json(&f.sum_by("spillway_backend_weight", "task", &[("backend", name)])),
                "requests": num(requests.get(name).copied().unwrap_or(0.0)),
                "gate": gate,
            })
        })
        .collect()
}

fn counters(f: &Families<'_>, config: &Config) -> Value {
    let by_backend = f.sum_by("spillway_requests_total", "backend", &[]);
    let (mut local, mut hosted, mut unserved) = (0.0, 0.0, 0.0);
    for (backend, n) in &by_backend {
        match config.backends.iter().find(|b| &b.name == backend) {
            Some(b) if b.kind().is_local() => local += n,
            _ if backend.is_empty() => unserved += n,
            // A backend no longer in the config (reloaded away) counts as hosted.
            _ => hosted += n,
        }
    }
    let served: BTreeMap<String, f64> = by_backend.into_iter().filter(|(b, _)| !b.is_empty()).collect();
    json!({
        "requests_total": num(local + hosted + unserved),
        "requests_by_backend": to_json(&served),
        "local_requests": num(local),
        "hosted_requests": num(hosted),
        "unserved_requests": num(unserved),
        "spills_by_reason": to_json(&f.sum_by("spillway_spills_total", "reason", &[])),
        "shed_total": num(f.sum_by("spillway_shed_total", "task", &[]).values().sum()),
    })
}

#[cfg(test)]
#[path = "data_tests.rs"]
mod tests;
