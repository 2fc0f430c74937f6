//! Per-backend prompt variants: a task may give each backend (by name, else by kind) its own
//! system prompt, put before the request's messages. Live traffic, gate runs and shadows all
//! go through [`apply`], so a backend is tested with the prompt it will serve with.

use crate::canonical::{ChatRequest, Message, Role};
use crate::config::{BackendKind, TaskConfig};

/// The variant text for this backend, if the task has one: its name wins over its kind.
pub fn for_backend<'t>(task: &'t TaskConfig, backend: &str, kind: BackendKind) -> Option<&'t str> {
    let by_kind = || kind.names().iter().find_map(|name| task.variant_texts.get(*name));
    task.variant_texts.get(backend).or_else(by_kind).map(String::as_str)
}

/// Put the backend's variant first in the request, as a system message.
pub fn apply(task: &TaskConfig, backend: &str, kind: BackendKind, request: &mut ChatRequest) {
    if let Some(text) = for_backend(task, backend, kind) {
        request.messages.insert(0, Message::new(Role::System, text));
        if let Some(native) = &mut request.native {
            native.prepend_system(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_wins_over_the_kind_and_others_are_untouched() {
        let mut task: TaskConfig =
            serde_yaml_ng::from_str("{name: t, backends: [a, b], slo: {ttft_ms: 1}}").unwrap();
        task.variant_texts.insert("vllm".into(), "Be brief.".into());
        task.variant_texts.insert("special".into(), "Use JSON.".into());
        let base = ChatRequest { messages: vec![Message::new(Role::User, "hi")], ..Default::default() };

        let mut req = base.clone();
        apply(&task, "pool", BackendKind::Local, &mut req);
        assert_eq!(req.messages[0], Message::new(Role::System, "Be brief."));
        assert_eq!(req.messages[1], base.messages[0]);

        let mut req = base.clone();
        apply(&task, "special", BackendKind::Local, &mut req);
        assert_eq!(req.messages[0].content, "Use JSON.");

        let mut req = base.clone();
        apply(&task, "oa", BackendKind::Openai, &mut req);
        assert_eq!(req, base);
    }
}
