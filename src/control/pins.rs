//! Pinned metadata: a pool pins its weights digest, quantisation and engine version; a node
//! that reports something else leaves every task's pool (quarantine) until it matches again
//! or the evaluation gate accepts the new fingerprint.
//!
//! The comparison is pure. The board remembers who is quarantined and announces each change
//! on a broadcast channel: the gate listens there to start a run for the new fingerprint.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::broadcast;

use crate::canonical::{BackendName, NodeKey};
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
    pub node: NodeKey,
    /// What differs (empty when the node left quarantine).
    pub differences: Vec<String>,
    /// What the node reported: the fingerprint a gate run would test.
    pub reported: Reported,
}

/// Who is quarantined now, the pins the gate accepted, and the channel that announces changes.
pub struct PinBoard {
    /// Each quarantined node's announcement (its reason is its differences, joined).
    current: Mutex<BTreeMap<NodeKey, QuarantineEvent>>,
    /// Pins whose fingerprint passed the gate, by backend, oldest first: a node reporting any
    /// of them is not quarantined, and the last is the pin in effect.
    accepted: Mutex<BTreeMap<BackendName, Vec<Pin>>>,
    /// Why the gate kept a quarantined node out, by node key.
    gate_verdicts: Mutex<BTreeMap<NodeKey, String>>,
    events: broadcast::Sender<QuarantineEvent>,
}

impl Default for PinBoard {
    fn default() -> Self {
        PinBoard {
            current: Mutex::new(BTreeMap::new()),
            accepted: Mutex::new(BTreeMap::new()),
            gate_verdicts: Mutex::new(BTreeMap::new()),
            events: broadcast::channel(256).0,
        }
    }
}

impl PinBoard {
    pub fn subscribe(&self) -> broadcast::Receiver<QuarantineEvent> {
        self.events.subscribe()
    }

    /// The announcements of the nodes quarantined now, then every change after them: a
    /// listener that starts after the first checks (the gate, which starts after the loops
    /// that check) misses none of them. Taken under the lock that announces, so no change
    /// falls between the two.
    pub fn watch(&self) -> (Vec<QuarantineEvent>, broadcast::Receiver<QuarantineEvent>) {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let events = self.events.subscribe();
        (current.values().cloned().collect(), events)
    }

    /// Record the verdict for one node; announce it if it changed. Returns the reason the
    /// node is quarantined, if it is.
    pub fn check(
        &self,
        backend: &str,
        node: &NodeKey,
        pin: Option<&Pin>,
        reported: &Reported,
    ) -> Option<String> {
        let mut diffs = pin.map(|p| differences(p, reported)).unwrap_or_default();
        let accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        if accepted.get(backend).is_some_and(|pins| pins.iter().any(|p| differences(p, reported).is_empty()))
        {
            diffs.clear();
        }
        drop(accepted);
        let reason = (!diffs.is_empty()).then(|| diffs.join("; "));
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let changed = match current.get(node) {
            Some(announced) => announced.differences != diffs,
            None => !diffs.is_empty(),
        };
        if changed {
            let event = QuarantineEvent {
                backend: backend.to_string(),
                node: node.clone(),
                differences: diffs,
                reported: reported.clone(),
            };
            match &reason {
                Some(r) => {
                    tracing::warn!(backend, node = %node, "node quarantined: {r}");
                    current.insert(node.clone(), event.clone());
                }
                None => {
                    tracing::info!(backend, node = %node, "node left quarantine");
                    current.remove(node);
                }
            }
            let _ = self.events.send(event);
        }
        drop(current);
        // The gate's verdict is shown with the reason but is not a change to announce (that
        // would start another run for the same fingerprint).
        let mut verdicts = self.gate_verdicts.lock().unwrap_or_else(|e| e.into_inner());
        match reason {
            Some(r) => Some(match verdicts.get(node) {
                Some(verdict) => format!("{r}; {verdict}"),
                None => r,
            }),
            None => {
                verdicts.remove(node);
                None
            }
        }
    }

    /// Accept `pin` for `backend` (its fingerprint passed the gate): it becomes the pin in
    /// effect, and nodes reporting it leave quarantine at the next check.
    pub fn accept(&self, backend: &str, pin: Pin) {
        let mut accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        let pins = accepted.entry(BackendName::from(backend)).or_default();
        pins.retain(|p| *p != pin);
        pins.push(pin);
    }

    /// The pin in effect for `backend`: the last one the gate accepted, else the configured one.
    pub(crate) fn in_effect(&self, backend: &str, configured: Option<&Pin>) -> Option<Pin> {
        let accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        accepted.get(backend).and_then(|pins| pins.last().cloned()).or_else(|| configured.cloned())
    }

    /// Record why the gate keeps a quarantined node out (shown with its quarantine reason).
    pub(crate) fn gate_verdict(&self, node: &NodeKey, why: String) {
        self.gate_verdicts.lock().unwrap_or_else(|e| e.into_inner()).insert(node.clone(), why);
    }

    /// Put exactly `verdicts` in place (the shared state as read from the store).
    pub(crate) fn set_gate_verdicts(&self, verdicts: BTreeMap<NodeKey, String>) {
        *self.gate_verdicts.lock().unwrap_or_else(|e| e.into_inner()) = verdicts;
    }

    /// Forget nodes that are gone.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| keep(k));
    }

    /// Every quarantined node and why.
    pub fn all(&self) -> BTreeMap<NodeKey, String> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.iter().map(|(node, event)| (node.clone(), event.differences.join("; "))).collect()
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
    fn an_accepted_pin_lets_its_nodes_serve_and_becomes_the_pin_in_effect() {
        let board = PinBoard::default();
        let new = Reported { quantization: Some("awq".into()), ..Reported::default() };
        assert!(board.check("pool", &"n1".into(), Some(&pin()), &new).is_some());
        board.gate_verdict(&"n1".into(), "gate failed: 1/10 passed".into());
        let reason = board.check("pool", &"n1".into(), Some(&pin()), &new).unwrap();
        assert!(reason.ends_with("; gate failed: 1/10 passed"), "{reason}");
        assert_eq!(board.in_effect("pool", Some(&pin())), Some(pin()));
        let accepted = Pin { quantization: Some("awq".into()), ..pin() };
        board.accept("pool", accepted.clone());
        assert_eq!(board.check("pool", &"n1".into(), Some(&pin()), &new), None);
        assert_eq!(board.in_effect("pool", Some(&pin())), Some(accepted));
        let old = Reported { quantization: Some("fp8".into()), ..Reported::default() };
        assert_eq!(
            board.check("pool", &"n2".into(), Some(&pin()), &old),
            None,
            "the configured pin still serves"
        );
    }

    #[test]
    fn the_board_announces_entering_and_leaving_quarantine_once() {
        let board = PinBoard::default();
        let mut events = board.subscribe();
        let bad = Reported { quantization: Some("awq".into()), ..Reported::default() };
        let reason = board.check("pool", &"n1".into(), Some(&pin()), &bad);
        assert_eq!(reason.as_deref(), Some("quantization: pinned fp8, reported awq"));
        assert_eq!(board.check("pool", &"n1".into(), Some(&pin()), &bad), reason, "same verdict");
        let event = events.try_recv().unwrap();
        assert_eq!(event.differences, ["quantization: pinned fp8, reported awq"]);
        assert_eq!(event.reported, bad);
        assert!(events.try_recv().is_err(), "announced once");
        assert_eq!(board.all().len(), 1);
        assert_eq!(board.check("pool", &"n1".into(), Some(&pin()), &Reported::default()), None);
        assert!(events.try_recv().unwrap().differences.is_empty());
        assert!(board.all().is_empty());
    }

    #[test]
    fn a_listener_that_starts_late_is_handed_the_nodes_already_quarantined() {
        let board = PinBoard::default();
        let bad = Reported { quantization: Some("awq".into()), ..Reported::default() };
        // Announced before anyone listens (the gate starts after the loops that check).
        board.check("pool", &"n1".into(), Some(&pin()), &bad);
        board.check("pool", &"n2".into(), Some(&pin()), &Reported::default());
        let (now, mut later) = board.watch();
        let nodes: Vec<(&str, &Reported)> = now.iter().map(|e| (e.node.as_str(), &e.reported)).collect();
        assert_eq!(nodes, [("n1", &bad)], "the quarantined node alone, with what it reported");
        assert!(later.try_recv().is_err());
        board.check("pool", &"n1".into(), Some(&pin()), &Reported::default());
        assert_eq!(later.try_recv().unwrap().node, "n1", "and the changes after it");
    }
}
