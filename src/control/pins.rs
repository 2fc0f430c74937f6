//! Pinned metadata: a pool pins its weights digest, quantisation and engine version; a node
//! that reports something else leaves every task's pool (quarantine) until it matches again
//! or the evaluation gate accepts the new fingerprint.
//!
//! The comparison is pure. The board remembers who is quarantined and announces each change
//! on a broadcast channel: the gate listens there to start a run for the new fingerprint.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::broadcast;

use crate::config::Pin;

/// What a node says it is, from whichever source knows (pod annotations, vLLM's
/// `cache_config_info`, `/version`). `None`: not reported, so not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reported {
    pub weights: Option<String>,
    pub quantization: Option<String>,
    pub engine: Option<String>,
}

/// Each pinned field the node reports differently, as `field: pinned X, reported Y`.
pub fn differences(pin: &Pin, reported: &Reported) -> Vec<String> {
    let fields = [
        ("weights", &pin.weights, &reported.weights),
        ("quantization", &pin.quantization, &reported.quantization),
        ("engine", &pin.engine, &reported.engine),
    ];
    fields
        .into_iter()
        .filter_map(|(name, pinned, got)| match (pinned, got) {
            (Some(p), Some(g)) if !p.eq_ignore_ascii_case(g) => {
                Some(format!("{name}: pinned {p}, reported {g}"))
            }
            _ => None,
        })
        .collect()
}

/// A node entered or left quarantine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineEvent {
    pub backend: String,
    pub node: String,
    /// What differs (empty when the node left quarantine).
    pub differences: Vec<String>,
    /// What the node reported: the fingerprint a gate run would test.
    pub reported: Reported,
}

/// Who is quarantined now, and the channel that announces changes.
pub struct PinBoard {
    current: Mutex<BTreeMap<String, String>>,
    events: broadcast::Sender<QuarantineEvent>,
}

impl Default for PinBoard {
    fn default() -> Self {
        PinBoard { current: Mutex::new(BTreeMap::new()), events: broadcast::channel(256).0 }
    }
}

impl PinBoard {
    pub fn subscribe(&self) -> broadcast::Receiver<QuarantineEvent> {
        self.events.subscribe()
    }

    /// Record the verdict for one node; announce it if it changed. Returns the reason the
    /// node is quarantined, if it is.
    pub fn check(&self, backend: &str, node: &str, pin: Option<&Pin>, reported: &Reported) -> Option<String> {
        let diffs = pin.map(|p| differences(p, reported)).unwrap_or_default();
        let reason = (!diffs.is_empty()).then(|| diffs.join("; "));
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let changed = current.get(node) != reason.as_ref();
        if changed {
            match &reason {
                Some(r) => {
                    tracing::warn!(backend, node, "node quarantined: {r}");
                    current.insert(node.to_string(), r.clone());
                }
                None => {
                    tracing::info!(backend, node, "node left quarantine");
                    current.remove(node);
                }
            }
            let _ = self.events.send(QuarantineEvent {
                backend: backend.to_string(),
                node: node.to_string(),
                differences: diffs,
                reported: reported.clone(),
            });
        }
        reason
    }

    /// Forget nodes that are gone.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| keep(k));
    }

    /// Every quarantined node and why.
    pub fn all(&self) -> BTreeMap<String, String> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin() -> Pin {
        Pin { weights: Some("sha256:aaa".into()), quantization: Some("fp8".into()), engine: None }
    }

    #[test]
    fn only_reported_pinned_fields_are_compared() {
        let same = Reported {
            weights: Some("sha256:aaa".into()),
            quantization: Some("FP8".into()),
            engine: Some("0.9".into()),
        };
        assert!(differences(&pin(), &same).is_empty());
        assert!(differences(&pin(), &Reported::default()).is_empty());
        let other =
            Reported { weights: Some("sha256:bbb".into()), quantization: Some("fp8".into()), engine: None };
        assert_eq!(differences(&pin(), &other), ["weights: pinned sha256:aaa, reported sha256:bbb"]);
    }

    #[test]
    fn the_board_announces_entering_and_leaving_quarantine_once() {
        let board = PinBoard::default();
        let mut events = board.subscribe();
        let bad = Reported { quantization: Some("awq".into()), ..Reported::default() };
        let reason = board.check("pool", "n1", Some(&pin()), &bad);
        assert_eq!(reason.as_deref(), Some("quantization: pinned fp8, reported awq"));
        assert_eq!(board.check("pool", "n1", Some(&pin()), &bad), reason, "same verdict");
        let event = events.try_recv().unwrap();
        assert_eq!(event.differences, ["quantization: pinned fp8, reported awq"]);
        assert_eq!(event.reported, bad);
        assert!(events.try_recv().is_err(), "announced once");
        assert_eq!(board.all().len(), 1);
        assert_eq!(board.check("pool", "n1", Some(&pin()), &Reported::default()), None);
        assert!(events.try_recv().unwrap().differences.is_empty());
        assert!(board.all().is_empty());
    }
}
