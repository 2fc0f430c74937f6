//! The hard eligibility filter: which backends a task's data may reach at all.
//!
//! Applied before any ordering, to every plan: normal routing, failover and spill all start
//! from this set, so a fallback can never widen it. When it leaves nothing, the reason names
//! each backend and why it was refused. A task's required evaluation gate refuses, the same
//! way, each backend without a passing result for its current fingerprint. A backend's data
//! terms (retention, training use, zero data retention, processing regions) are held to what
//! the data class requires ([`terms`]); every caller (planning, shadows, canaries, judges, gate
//! runs) comes through [`eligible`] or [`refuses`], so none can reach a backend they refuse.

pub mod terms;

use crate::config::{BackendConfig, BackendId, Config, DataClassPolicy, TaskConfig};
use crate::snapshot::Snapshot;

/// Nothing eligible: the message says why, backend by backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoEligibleBackend(pub String);

/// Ids of the task's backends that its data class allows, in the
/// task's preference order.
pub fn eligible(task: &TaskConfig, snap: &Snapshot) -> Result<Vec<BackendId>, NoEligibleBackend> {
    let rule = snap.config.policy.data_classes.get(&task.data_class);
    let mut allowed = Vec::new();
    let mut refused = Vec::new();
    for name in &task.backends {
        let Some(id) = snap.backend_id(name) else {
            refused.push(format!("{name}: not configured"));
            continue;
        };
        let gate = snap.gate_refusal(&task.name, name).map(str::to_string);
        match refusal(rule, &snap.config.backends[id]).or(gate) {
            None => allowed.push(id),
            Some(why) => refused.push(format!("{name}: {why}")),
        }
    }
    if allowed.is_empty() {
        return Err(NoEligibleBackend(format!(
            "no backend may serve task `{}` (data class `{}`): {}",
            task.name,
            task.data_class,
            refused.join("; ")
        )));
    }
    Ok(allowed)
}

/// Why the task's data class may not reach `backend` (a judge, a shadow), if it may not.
pub fn refuses(config: &Config, task: &TaskConfig, backend: &BackendConfig) -> Option<String> {
    refusal(config.policy.data_classes.get(&task.data_class), backend)
}

/// The data class's refusal of `backend`: hosted when it must stay local, its region, then
/// every data term it does not meet (all of them, `; `-joined).
fn refusal(rule: Option<&DataClassPolicy>, backend: &BackendConfig) -> Option<String> {
    let rule = rule?;
    let local = backend.kind().is_local();
    if !rule.allow_hosted && !local {
        return Some("hosted backends are not allowed for this data class".to_string());
    }
    if let Some(regions) = &rule.regions {
        let region = backend.region.as_deref().unwrap_or("(none)");
        if !regions.iter().any(|r| r == region) {
            return Some(format!("region {region} is not in [{}]", regions.join(", ")));
        }
    }
    let unmet = terms::unmet(rule, local, &backend.terms);
    if unmet.is_empty() {
        return None;
    }
    Some(unmet.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
}

/// Why each task that lists `backend` may not send it data (task name, reason), in task order:
/// what `GET /admin/backends` shows. The gate's refusals are not here (`/admin/gate` has them).
pub(crate) fn refusals_of(config: &Config, backend: &BackendConfig) -> Vec<(String, String)> {
    config
        .tasks
        .iter()
        .filter(|t| t.backends.contains(&backend.name))
        .filter_map(|t| refuses(config, t, backend).map(|why| (t.name.clone(), why)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn snap() -> Snapshot {
        let config = crate::config::parse(include_str!("../spillway.example.yaml")).unwrap();
        Snapshot::from_config(Arc::new(config))
    }

    #[test]
    fn restricted_data_stays_local_and_in_region() {
        let snap = snap();
        let task = snap.config.task("triage-restricted").unwrap().clone();
        let allowed = eligible(&task, &snap).unwrap();
        let names: Vec<&str> = allowed.iter().map(|&i| snap.backends[i].name.as_str()).collect();
        assert_eq!(names, ["local-llama"]);
    }

    #[test]
    fn unrestricted_class_keeps_preference_order() {
        let snap = snap();
        let task = snap.config.task("summarise-ticket").unwrap().clone();
        let allowed = eligible(&task, &snap).unwrap();
        let names: Vec<&str> = allowed.iter().map(|&i| snap.backends[i].name.as_str()).collect();
        assert_eq!(names, ["local-llama", "anthropic", "openai"]);
    }

    #[test]
    fn nothing_left_explains_each_refusal() {
        let snap = snap();
        let mut task = snap.config.task("triage-restricted").unwrap().clone();
        task.backends = vec!["openai".into(), "anthropic".into()];
        let err = eligible(&task, &snap).unwrap_err().to_string();
        assert!(err.contains("openai: hosted backends are not allowed"), "{err}");
        assert!(err.contains("anthropic: hosted"), "{err}");
        assert!(err.contains("data class `restricted`"), "{err}");
    }

    const TERMS: &str = r#"
policy: {data_classes: {confidential: {regions: [eu-west-1], max_retention_days: 0, no_training: true}}}
backends:
  - {name: pool, kind: vllm, endpoints: ["http://127.0.0.1:1"], model: m, region: eu-west-1}
  - {name: zdr, kind: openai, model: m, region: eu-west-1, terms: {zero_data_retention: true, trains_on_data: false}}
  - {name: keeps, kind: anthropic, model: m, region: eu-west-1, terms: {retention_days: 30, trains_on_data: false}}
  - {name: silent, kind: gemini, model: m, region: eu-west-1}
  - {name: abroad, kind: openai_compatible, base_url: "http://127.0.0.1:2/v1", model: m, region: eu-west-1,
     terms: {retention_days: 0, trains_on_data: false, processing_regions: [eu-west-1, us-east-1]}}
tasks:
  - {name: c, data_class: confidential, backends: [pool, zdr, keeps, silent, abroad], slo: {ttft_ms: 800}}
  - {name: open, backends: [keeps], slo: {ttft_ms: 800}}
"#;

    #[test]
    fn data_terms_refuse_each_backend_that_misses_one_with_the_term_named() {
        let config = Arc::new(crate::config::parse(TERMS).unwrap());
        let snap = Snapshot::from_config(Arc::clone(&config));
        let task = config.task("c").unwrap();
        let allowed = eligible(task, &snap).unwrap();
        let names: Vec<&str> = allowed.iter().map(|&i| snap.backends[i].name.as_str()).collect();
        assert_eq!(names, ["pool", "zdr"], "a pool declaring nothing keeps the data in-house");
        let why = |name: &str| refuses(&config, task, config.backend(name).unwrap());
        assert_eq!(
            why("keeps").as_deref(),
            Some("terms.retention_days 30 is over the data class's max_retention_days 0")
        );
        assert_eq!(
            why("silent").as_deref(),
            Some(
                "terms.retention_days not declared (data class allows at most 0 days); \
                 terms.trains_on_data not declared (data class requires no_training)"
            )
        );
        assert_eq!(
            why("abroad").as_deref(),
            Some("terms.processing_regions includes us-east-1, not in [eu-west-1]")
        );
        // The same backend serves a class that requires nothing.
        assert_eq!(refuses(&config, config.task("open").unwrap(), config.backend("keeps").unwrap()), None);
        assert_eq!(
            refusals_of(&config, config.backend("keeps").unwrap()),
            [("c".to_string(), why("keeps").unwrap())]
        );
        assert!(refusals_of(&config, config.backend("zdr").unwrap()).is_empty());
    }

    #[test]
    fn when_terms_leave_nothing_the_reason_names_the_unmet_terms() {
        let config = crate::config::parse(TERMS).unwrap();
        let snap = Snapshot::from_config(Arc::new(config));
        let mut task = snap.config.task("c").unwrap().clone();
        task.backends = vec!["keeps".into(), "silent".into()];
        let err = eligible(&task, &snap).unwrap_err().to_string();
        assert_eq!(
            err,
            "no backend may serve task `c` (data class `confidential`): keeps: terms.retention_days 30 is over \
             the data class's max_retention_days 0; silent: terms.retention_days not declared (data class allows \
             at most 0 days); terms.trains_on_data not declared (data class requires no_training)"
        );
    }
}
