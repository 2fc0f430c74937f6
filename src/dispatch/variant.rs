//! Per-backend prompt variants: a task may give each backend (by name, else by kind) its own
//! system prompt, put before the request's messages by the call (`adapter::Call`). Live
//! traffic, gate runs and shadows all go through dispatch, which reads it here, so a backend is
//! tested with the prompt it will serve with.

use crate::config::{BackendKind, TaskConfig};

/// The variant text for this backend, if the task has one: its name wins over its kind.
pub fn for_backend<'t>(task: &'t TaskConfig, backend: &str, kind: BackendKind) -> Option<&'t str> {
    let by_kind = || kind.names().iter().find_map(|name| task.variant_texts.get(*name));
    task.variant_texts.get(backend).or_else(by_kind).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_wins_over_the_kind_and_others_have_none() {
        let mut task: TaskConfig =
            serde_yaml_ng::from_str("{name: t, backends: [a, b], slo: {ttft_ms: 1}}").unwrap();
        task.variant_texts.insert("vllm".into(), "Be brief.".into());
        task.variant_texts.insert("special".into(), "Use JSON.".into());
        assert_eq!(for_backend(&task, "pool", BackendKind::Local), Some("Be brief."));
        assert_eq!(for_backend(&task, "special", BackendKind::Local), Some("Use JSON."));
        assert_eq!(for_backend(&task, "oa", BackendKind::Openai), None);
    }
}
