//! Operating it with outside tools: the admin API, three replicas sharing Redis and PostgreSQL, a rolling restart behind a balancer, issued client keys, key limits and budgets, the evaluation gate, the dashboard in a real browser, Grafana, Prometheus alerts, the Helm chart and the vLLM manifests.
//!
//! One test binary per area (each links the whole crate); each module is one file beside this.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod alerts;
mod budgets;
mod dashboard;
mod gate;
mod grafana;
mod helm;
mod keys;
mod opstate;
mod replicas;
mod rollout;
mod synthetic;
mod terms;
mod vllm_manifests;
