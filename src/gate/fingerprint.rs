//! Fingerprints: what exactly a gate result vouches for. A hosted backend's is its model name
//! and configured version tag; a self-hosted pool's is its pinned weights, quantisation and
//! engine. A result for one fingerprint says nothing about another. Pure.

use crate::config::{BackendConfig, Pin};
use crate::control::pins::Reported;

/// The fingerprint of a backend as configured (a pool: its config pin).
pub(crate) fn of_backend(backend: &BackendConfig) -> String {
    if let Some(pool) = backend.pool() {
        of_pin(&backend.model, pool.pin.as_ref().unwrap_or(&Pin::default()))
    } else {
        match backend.hosted().and_then(|h| h.version.as_ref()) {
            Some(version) => format!("{}@{version}", backend.model),
            None => backend.model.clone(),
        }
    }
}

/// A pool's fingerprint under `pin`: the pinned fields, or the model name when none is pinned.
pub(crate) fn of_pin(model: &str, pin: &Pin) -> String {
    let fields: Vec<String> =
        [("weights", &pin.weights), ("quantization", &pin.quantization), ("engine", &pin.engine)]
            .into_iter()
            .filter_map(|(name, value)| value.as_ref().map(|v| format!("{name}={}", v.to_lowercase())))
            .collect();
    if fields.is_empty() {
        format!("model={model}")
    } else {
        fields.join(",")
    }
}

/// The pin a node would have if what it reports were accepted: the configured pin with every
/// reported field in place of the pinned one.
pub(crate) fn reported_pin(pin: &Pin, reported: &Reported) -> Pin {
    Pin {
        weights: reported.weights.clone().or_else(|| pin.weights.clone()),
        quantization: reported.quantization.clone().or_else(|| pin.quantization.clone()),
        engine: reported.engine.clone().or_else(|| pin.engine.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(yaml: &str) -> BackendConfig {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn hosted_fingerprints_are_model_and_version() {
        assert_eq!(of_backend(&backend("{name: a, kind: openai, model: gpt-4o}")), "gpt-4o");
        assert_eq!(
            of_backend(&backend("{name: a, kind: anthropic, model: claude, version: '2025-10-01'}")),
            "claude@2025-10-01"
        );
    }

    #[test]
    fn pool_fingerprints_are_the_pin_in_a_fixed_order() {
        let pool = backend(
            "{name: p, kind: vllm, model: llama, endpoints: ['http://h:1'], pin: {engine: '0.9', weights: 'sha256:AA'}}",
        );
        assert_eq!(of_backend(&pool), "weights=sha256:aa,engine=0.9");
        let unpinned = backend("{name: p, kind: vllm, model: llama, endpoints: ['http://h:1']}");
        assert_eq!(of_backend(&unpinned), "model=llama");
        let reported = Reported { quantization: Some("awq".into()), ..Reported::default() };
        let pin = reported_pin(pool.pool().unwrap().pin.as_ref().unwrap(), &reported);
        assert_eq!(of_pin("llama", &pin), "weights=sha256:aa,quantization=awq,engine=0.9");
    }
}
