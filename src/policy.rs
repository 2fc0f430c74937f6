//! The hard eligibility filter: which backends a task's data may reach at all.
//!
//! Applied before any ordering, to every plan: normal routing, failover and spill all start
//! from this set, so a fallback can never widen it. When it leaves nothing, the reason names
//! each backend and why it was refused. A task's required evaluation gate refuses, the same
//! way, each backend without a passing result for its current fingerprint.

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
        let view = &snap.backends[id];
        match refusal(rule, view.is_local(), view.region.as_deref()).or(gate) {
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
    let rule = config.policy.data_classes.get(&task.data_class);
    refusal(rule, backend.kind().is_local(), backend.region.as_deref())
}

fn refusal(rule: Option<&DataClassPolicy>, local: bool, region: Option<&str>) -> Option<String> {
    let rule = rule?;
    if !rule.allow_hosted && !local {
        return Some("hosted backends are not allowed for this data class".to_string());
    }
    if let Some(regions) = &rule.regions {
        let region = region.unwrap_or("(none)");
        if !regions.iter().any(|r| r == region) {
            return Some(format!("region {region} is not in [{}]", regions.join(", ")));
        }
    }
    None
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
}
