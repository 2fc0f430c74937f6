//! Checks on a scenario that types alone cannot make: names that must refer to backends of the
//! right kind, node references in range, rates and shares in range. Every problem carries its
//! key path. It also fills in the default model of any backend the scenario does not describe,
//! so that the engine never has to guess. It must not touch the router config, which
//! `config::parse` has already checked.

use super::{Dist, Rate, Scenario};
use crate::config::{BackendKind, Problem};

fn dist(path: &str, d: &Dist, problems: &mut Vec<Problem>) {
    if !(d.mean.is_finite() && d.mean >= 1.0) {
        problems.push(Problem::new(format!("{path}.mean"), "must be at least 1"));
    }
    if !(d.sd.is_finite() && d.sd >= 0.0) {
        problems.push(Problem::new(format!("{path}.sd"), "must be ≥ 0"));
    }
    if !(d.min >= 1.0 && d.max >= d.min) {
        problems.push(Problem::new(path, "needs 1 ≤ min ≤ max"));
    }
}

fn share(path: String, v: f64, problems: &mut Vec<Problem>) {
    if !(0.0..=1.0).contains(&v) {
        problems.push(Problem::new(path, "must be between 0 and 1"));
    }
}

/// Every problem of `s`; fills default node and provider models.
pub fn check(s: &mut Scenario) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut p = |path: String, message: String| problems.push(Problem::new(path, message));
    let config = s.config.clone();
    let kind_of = |name: &str| config.backend(name).map(|b| b.kind());
    if s.duration.is_zero() {
        p("duration".into(), "must be above 0".into());
    }
    if s.strategies.is_empty() {
        p("strategies".into(), "name at least one of priority, weighted, pid-chains, spillway".into());
    }
    for (name, w) in &s.weights {
        if kind_of(name).is_none() {
            p(format!("weights.{name}"), "not a backend of the router config".into());
        } else if !(w.is_finite() && *w >= 0.0) {
            p(format!("weights.{name}"), "must be a number ≥ 0".into());
        }
    }
    for (name, node) in &s.nodes {
        match kind_of(name) {
            Some(BackendKind::Local) => {}
            Some(_) => p(format!("nodes.{name}"), "is a hosted backend: describe it under providers".into()),
            None => p(format!("nodes.{name}"), "not a backend of the router config".into()),
        }
        for (key, v) in [("prefill_tps", node.prefill_tps), ("step_ms", node.step_ms)] {
            if !(v.is_finite() && v > 0.0) {
                p(format!("nodes.{name}.{key}"), "must be above 0".into());
            }
        }
        if !(node.prefill_setup_ms.is_finite() && node.prefill_setup_ms >= 0.0) {
            p(format!("nodes.{name}.prefill_setup_ms"), "must be ≥ 0".into());
        }
    }
    for (name, m) in &s.providers {
        match kind_of(name) {
            Some(BackendKind::Local) => {
                p(format!("providers.{name}"), "is a vLLM pool: describe it under nodes".into())
            }
            Some(_) => {}
            None => p(format!("providers.{name}"), "not a backend of the router config".into()),
        }
        if !(m.tokens_per_sec.is_finite() && m.tokens_per_sec > 0.0) {
            p(format!("providers.{name}.tokens_per_sec"), "must be above 0".into());
        }
        if !(m.ttft_ms.is_finite() && m.ttft_ms > 0.0) {
            p(format!("providers.{name}.ttft_ms"), "must be above 0".into());
        }
    }
    for (i, w) in s.workload.iter().enumerate() {
        let at = |k: &str| format!("workload[{i}].{k}");
        if config.task(&w.task).is_none() {
            p(at("task"), format!("`{}` is not a task of the router config", w.task));
        }
        match &w.rps {
            Rate::Constant(r) if !(r.is_finite() && *r >= 0.0) => p(at("rps"), "must be ≥ 0".into()),
            Rate::Points(points) if points.is_empty() => p(at("rps"), "needs at least one point".into()),
            Rate::Points(points) => {
                if points.iter().any(|(_, r)| !(r.is_finite() && *r >= 0.0)) {
                    p(at("rps"), "every rate must be ≥ 0".into());
                }
                if points.windows(2).any(|w| w[1].0 < w[0].0) {
                    p(at("rps"), "points must be in time order".into());
                }
            }
            _ => {}
        }
        if w.projects == 0 {
            p(at("projects"), "must be at least 1".into());
        }
        if !(w.zipf.is_finite() && w.zipf >= 0.0) {
            p(at("zipf"), "must be ≥ 0".into());
        }
    }
    for (i, w) in s.workload.iter().enumerate() {
        dist(&format!("workload[{i}].prompt_tokens"), &w.prompt_tokens, &mut problems);
        dist(&format!("workload[{i}].output_tokens"), &w.output_tokens, &mut problems);
        share(format!("workload[{i}].prefix_share"), w.prefix_share, &mut problems);
        share(format!("workload[{i}].client_error_rate"), w.client_error_rate, &mut problems);
    }
    if s.workload.is_empty() && s.sessions.is_empty() {
        problems.push(Problem::new("workload", "give at least one stream under workload or sessions"));
    }
    for (i, w) in s.sessions.iter().enumerate() {
        let at = |k: &str| format!("sessions[{i}].{k}");
        if config.task(&w.task).is_none() {
            problems
                .push(Problem::new(at("task"), format!("`{}` is not a task of the router config", w.task)));
        }
        for (key, n) in [("count", w.count), ("turns", w.turns), ("concurrency", w.concurrency.unwrap_or(1))]
        {
            if n == 0 {
                problems.push(Problem::new(at(key), "must be at least 1"));
            }
        }
        dist(&at("turn_tokens"), &w.turn_tokens, &mut problems);
        dist(&at("output_tokens"), &w.output_tokens, &mut problems);
    }
    for (i, e) in s.timeline.iter().enumerate() {
        let at = |k: &str| format!("timeline[{i}].{k}");
        let set = [
            e.outage.is_some(),
            e.node_down.is_some(),
            e.quota.is_some(),
            e.errors.is_some(),
            e.slowdown.is_some(),
        ];
        if set.iter().filter(|x| **x).count() != 1 {
            problems.push(Problem::new(
                format!("timeline[{i}]"),
                "set exactly one of outage, node_down, quota, errors, slowdown",
            ));
        }
        if e.until.is_some_and(|u| u <= e.at) {
            problems.push(Problem::new(at("until"), "must be after `at`"));
        }
        let hosted = |name: &str| kind_of(name).is_some_and(|k| k != BackendKind::Local);
        let named = [
            ("outage", e.outage.as_deref()),
            ("quota.backend", e.quota.as_ref().map(|q| q.backend.as_str())),
            ("errors.backend", e.errors.as_ref().map(|q| q.backend.as_str())),
            ("slowdown.backend", e.slowdown.as_ref().map(|q| q.backend.as_str())),
        ];
        for (key, name) in named {
            if let Some(name) = name.filter(|n| !hosted(n)) {
                problems.push(Problem::new(at(key), format!("`{name}` is not a hosted backend")));
            }
        }
        if let Some(r) = e.node_down.as_deref().filter(|r| s.node_ref(r).is_none()) {
            problems.push(Problem::new(
                at("node_down"),
                format!("`{r}` is not a node like local#0 of a vllm backend"),
            ));
        }
        if let Some(rate) = e.errors.as_ref().map(|e| e.rate) {
            share(at("errors.rate"), rate, &mut problems);
        }
        if let Some(slow) = &e.slowdown {
            for (key, f) in [("ttft_factor", slow.ttft_factor), ("tps_factor", slow.tps_factor)] {
                if !(f.is_finite() && f > 0.0) {
                    problems.push(Problem::new(at(&format!("slowdown.{key}")), "must be a number above 0"));
                }
            }
        }
    }
    for (i, b) in s.batches.iter().enumerate() {
        let at = |k: &str| format!("batches[{i}].{k}");
        let Some(task) = config.task(&b.task) else {
            problems
                .push(Problem::new(at("task"), format!("`{}` is not a task of the router config", b.task)));
            continue;
        };
        if !(1..=10_000_000).contains(&b.lines) {
            problems.push(Problem::new(at("lines"), "must be between 1 and 10000000"));
        }
        if b.window.0 <= 0.0 {
            problems.push(Problem::new(at("window"), "must be above 0"));
        }
        dist(&at("prompt_tokens"), &b.prompt_tokens, &mut problems);
        dist(&at("output_tokens"), &b.output_tokens, &mut problems);
        let batch_api = task.backends.iter().filter_map(|name| kind_of(name)).any(|kind| {
            crate::adapter::provider::of(kind).batch().is_some_and(|api| api.serves(&b.endpoint))
        });
        if s.batching.contains(&super::Batching::Provider) && !batch_api {
            problems.push(Problem::new(
                at("task"),
                format!(
                    "`{}` has no hosted backend whose batch API takes {} lines, which batching `provider` needs",
                    b.task, b.endpoint
                ),
            ));
        }
    }
    if !s.batches.is_empty() && s.batching.is_empty() {
        problems.push(Problem::new("batching", "name at least one of fleet, provider"));
    }
    for b in &config.backends {
        if b.kind() == BackendKind::Local {
            s.nodes.entry(b.name.clone()).or_default();
        } else {
            s.providers.entry(b.name.clone()).or_default();
        }
    }
    problems
}
