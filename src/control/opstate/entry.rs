//! The operator state as data: one entry per (kind, scope), what a change does to an entry
//! (and whether the audit keeps it), what the entries mean for the boards, and which entries
//! differ between two reads. Pure: no I/O, no clock; the store and the sync loop use it.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use crate::canonical::{BackendName, NodeKey};
use crate::config::Pin;
use crate::control::canary::CanaryResult;
use crate::guard::breaker::Forced;
use crate::guard::holds::{Hold, HoldKind, Scope};

/// What an entry is about. Stored as its `as_str` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A drain or disable on a whole backend (scope: the backend's name).
    BackendHold,
    /// A drain or disable on one node (scope: its node key).
    NodeHold,
    /// A breaker forced open or closed (scope: a node key).
    Breaker,
    /// The last canary result of a fallback backend (scope: the backend's name).
    Canary,
    /// Why the gate keeps a quarantined node out (scope: a node key).
    GateVerdict,
    /// The pin a pool took on after its new fingerprint passed the gate (scope: the backend).
    Pin,
}

impl Kind {
    pub const ALL: [Kind; 6] =
        [Kind::BackendHold, Kind::NodeHold, Kind::Breaker, Kind::Canary, Kind::GateVerdict, Kind::Pin];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::BackendHold => "backend_hold",
            Kind::NodeHold => "node_hold",
            Kind::Breaker => "breaker",
            Kind::Canary => "canary",
            Kind::GateVerdict => "gate_verdict",
            Kind::Pin => "pin",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// An entry's identity: its kind and what it is on.
pub type Key = (Kind, String);

/// One stored entry: its value (JSON), who set it, when (unix ms), at which state version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: String,
    pub by: String,
    pub at_ms: i64,
    pub version: i64,
}

/// The whole operator state as read at one version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorState {
    pub version: i64,
    pub entries: BTreeMap<Key, Entry>,
}

/// A change an operator (or a loop: canaries, the gate) asks for; `None` lifts it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Hold(Scope, Option<HoldKind>),
    Breaker(NodeKey, Option<Forced>),
    Canary(CanaryResult),
    GateVerdict(NodeKey, Option<String>),
    Pin(String, Pin),
}

/// What one change does to its entry: the row written (or removed) and the audit line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub key: Key,
    /// What happened, for the audit (`drain`, `release`, `breaker_open`, …).
    pub action: &'static str,
    pub old: Option<String>,
    /// `None`: the entry is removed.
    pub new: Option<String>,
    /// Whether the audit keeps it: every operator action does; a canary result only when its
    /// verdict differs from the last one (a round every few minutes is not news).
    pub audited: bool,
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("operator state values are plain data")
}

impl Change {
    pub fn key(&self) -> Key {
        match self {
            Change::Hold(Scope::Backend(b), _) => (Kind::BackendHold, b.clone()),
            Change::Hold(Scope::Node(n), _) => (Kind::NodeHold, n.as_str().to_string()),
            Change::Breaker(n, _) => (Kind::Breaker, n.as_str().to_string()),
            Change::Canary(r) => (Kind::Canary, r.backend.clone()),
            Change::GateVerdict(n, _) => (Kind::GateVerdict, n.as_str().to_string()),
            Change::Pin(b, _) => (Kind::Pin, b.clone()),
        }
    }

    /// The entry's value after the change (`None`: removed).
    pub fn value(&self) -> Option<String> {
        match self {
            Change::Hold(_, kind) => kind.map(|k| json(&k)),
            Change::Breaker(_, forced) => forced.map(|f| json(&f)),
            Change::Canary(r) => Some(json(r)),
            Change::GateVerdict(_, why) => why.as_ref().map(json),
            Change::Pin(_, pin) => Some(json(pin)),
        }
    }

    fn action(&self) -> &'static str {
        match self {
            Change::Hold(_, Some(HoldKind::Drained)) => "drain",
            Change::Hold(_, Some(HoldKind::Disabled)) => "disable",
            Change::Hold(_, None) => "release",
            Change::Breaker(_, Some(Forced::Open)) => "breaker_open",
            Change::Breaker(_, Some(Forced::Closed)) => "breaker_closed",
            Change::Breaker(_, None) => "breaker_auto",
            Change::Canary(r) if r.ok => "canary_ok",
            Change::Canary(_) => "canary_failed",
            Change::GateVerdict(_, Some(_)) => "gate_kept_out",
            Change::GateVerdict(_, None) => "gate_verdict_cleared",
            Change::Pin(..) => "pin_accepted",
        }
    }

    /// What the change does to an entry whose value is `old`; `None` when nothing changes
    /// (lifting what is not there, setting a gate verdict or pin already in place).
    pub fn effect(&self, old: Option<&str>) -> Option<Effect> {
        let new = self.value();
        let unchanged = old == new.as_deref();
        let audited = match self {
            Change::Hold(..) | Change::Breaker(..) => !(old.is_none() && new.is_none()),
            Change::Canary(r) => old.and_then(|o| parse::<CanaryResult>(o).ok()).is_none_or(|o| o.ok != r.ok),
            Change::GateVerdict(..) | Change::Pin(..) => !unchanged,
        };
        let noop = match self {
            Change::Canary(_) => false,
            _ => !audited,
        };
        (!noop).then(|| Effect {
            key: self.key(),
            action: self.action(),
            old: old.map(str::to_string),
            new,
            audited,
        })
    }
}

fn parse<T: DeserializeOwned>(value: &str) -> Result<T, String> {
    serde_json::from_str(value).map_err(|e| e.to_string())
}

/// What the entries mean for the boards.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Desired {
    pub holds: BTreeMap<Scope, Hold>,
    pub breakers: BTreeMap<NodeKey, Forced>,
    pub canaries: BTreeMap<BackendName, CanaryResult>,
    pub gate_verdicts: BTreeMap<NodeKey, String>,
    /// Accepted pins by backend.
    pub pins: BTreeMap<BackendName, Pin>,
}

/// Read every entry; one that does not parse (hand-edited, or from a newer version) is left
/// out and named in the second list.
pub(crate) fn desired(state: &OperatorState) -> (Desired, Vec<String>) {
    let mut d = Desired::default();
    let mut problems = Vec::new();
    for ((kind, scope), e) in &state.entries {
        let node = || NodeKey::from(scope.as_str());
        let hold = |kind: HoldKind| Hold { kind, by: e.by.clone(), since: (e.at_ms / 1000).max(0) as u64 };
        let read = match kind {
            Kind::BackendHold => parse(&e.value).map(|k| {
                d.holds.insert(Scope::Backend(scope.clone()), hold(k));
            }),
            Kind::NodeHold => parse(&e.value).map(|k| {
                d.holds.insert(Scope::Node(node()), hold(k));
            }),
            Kind::Breaker => parse(&e.value).map(|f| {
                d.breakers.insert(node(), f);
            }),
            Kind::Canary => parse(&e.value).map(|r| {
                d.canaries.insert(scope.as_str().into(), r);
            }),
            Kind::GateVerdict => parse(&e.value).map(|why| {
                d.gate_verdicts.insert(node(), why);
            }),
            Kind::Pin => parse(&e.value).map(|pin| {
                d.pins.insert(scope.as_str().into(), pin);
            }),
        };
        if let Err(why) = read {
            problems.push(format!("operator_state {} `{scope}`: {why}", kind.as_str()));
        }
    }
    (d, problems)
}

/// The keys whose entry differs between `old` and `new` (added, removed or changed).
pub fn changed(old: &OperatorState, new: &OperatorState) -> Vec<Key> {
    let mut keys: Vec<Key> =
        old.entries.iter().filter(|(k, e)| new.entries.get(*k) != Some(*e)).map(|(k, _)| k.clone()).collect();
    keys.extend(new.entries.keys().filter(|k| !old.entries.contains_key(*k)).cloned());
    keys.sort();
    keys
}

/// Apply `effects` to `state` at `version` (the in-memory store, and tests).
pub(crate) fn apply_effects(
    state: &mut OperatorState,
    effects: &[Effect],
    by: &str,
    at_ms: i64,
    version: i64,
) {
    for e in effects {
        match &e.new {
            Some(value) => {
                let entry = Entry { value: value.clone(), by: by.to_string(), at_ms, version };
                state.entries.insert(e.key.clone(), entry);
            }
            None => {
                state.entries.remove(&e.key);
            }
        }
    }
    state.version = version;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary(ok: bool, at: u64) -> CanaryResult {
        CanaryResult { backend: "b".into(), task: "t".into(), ok, ttft_ms: None, error: None, at }
    }

    #[test]
    fn kinds_round_trip_through_their_text() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Kind::parse("hold"), None);
    }

    #[test]
    fn a_change_says_what_it_does_and_whether_the_audit_keeps_it() {
        let drain = Change::Hold(Scope::Backend("pool".into()), Some(HoldKind::Drained));
        let e = drain.effect(None).unwrap();
        assert_eq!(
            (e.key, e.action, e.new.as_deref(), e.audited),
            ((Kind::BackendHold, "pool".into()), "drain", Some("\"drained\""), true)
        );
        let release = Change::Hold(Scope::Node("pool/m@a".into()), None);
        assert_eq!(release.effect(None), None, "lifting nothing changes nothing");
        let e = release.effect(Some("\"disabled\"")).unwrap();
        assert_eq!((e.action, e.old.as_deref(), e.new), ("release", Some("\"disabled\""), None));
        let open = Change::Breaker("pool/m@a".into(), Some(Forced::Open));
        assert_eq!(open.effect(Some("\"closed\"")).unwrap().action, "breaker_open");
        // A canary result is always stored, audited only when its verdict turns.
        let old = json(&canary(true, 1));
        let same = Change::Canary(canary(true, 2)).effect(Some(&old)).unwrap();
        assert!(same.new.is_some() && !same.audited);
        assert!(Change::Canary(canary(false, 3)).effect(Some(&old)).unwrap().audited);
        assert!(Change::Canary(canary(true, 3)).effect(None).unwrap().audited);
        let pin = Change::Pin("pool".into(), Pin { weights: Some("w".into()), ..Pin::default() });
        let stored = pin.value();
        assert_eq!(pin.effect(stored.as_deref()), None, "the same pin again is no change");
    }

    #[test]
    fn entries_become_the_boards_state_and_bad_rows_are_named() {
        let mut state = OperatorState::default();
        let changes = [
            Change::Hold(Scope::Backend("pool".into()), Some(HoldKind::Drained)),
            Change::Hold(Scope::Node("pool/m@a".into()), Some(HoldKind::Disabled)),
            Change::Breaker("pool/m@b".into(), Some(Forced::Open)),
            Change::Canary(canary(false, 9)),
            Change::GateVerdict("pool/m@c".into(), Some("gate failed".into())),
            Change::Pin("pool".into(), Pin { quantization: Some("awq".into()), ..Pin::default() }),
        ];
        let effects: Vec<Effect> = changes.iter().filter_map(|c| c.effect(None)).collect();
        apply_effects(&mut state, &effects, "alice", 5_000, 1);
        state.entries.insert(
            (Kind::Breaker, "pool/m@z".into()),
            Entry { value: "\"ajar\"".into(), by: "bob".into(), at_ms: 0, version: 1 },
        );
        let (d, problems) = desired(&state);
        assert_eq!(
            d.holds[&Scope::Backend("pool".into())],
            Hold { kind: HoldKind::Drained, by: "alice".into(), since: 5 }
        );
        assert_eq!(d.holds[&Scope::Node("pool/m@a".into())].kind, HoldKind::Disabled);
        assert_eq!(d.breakers.len(), 1);
        assert_eq!(d.breakers[&NodeKey::from("pool/m@b")], Forced::Open);
        assert!(!d.canaries["b"].ok);
        assert_eq!(d.gate_verdicts[&NodeKey::from("pool/m@c")], "gate failed");
        assert_eq!(d.pins["pool"].quantization.as_deref(), Some("awq"));
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("breaker `pool/m@z`"), "{problems:?}");
    }

    #[test]
    fn changed_lists_added_removed_and_altered_entries() {
        let mut old = OperatorState::default();
        let hold = |k| Change::Hold(Scope::Backend("a".into()), Some(k));
        apply_effects(&mut old, &[hold(HoldKind::Drained).effect(None).unwrap()], "x", 1, 1);
        let b = Change::Breaker("n".into(), Some(Forced::Open));
        apply_effects(&mut old, &[b.effect(None).unwrap()], "x", 1, 2);
        let mut new = old.clone();
        assert!(changed(&old, &new).is_empty());
        let effects = [
            hold(HoldKind::Disabled).effect(Some("\"drained\"")).unwrap(),
            Change::Breaker("n".into(), None).effect(Some("\"open\"")).unwrap(),
            Change::Hold(Scope::Node("m".into()), Some(HoldKind::Drained)).effect(None).unwrap(),
        ];
        apply_effects(&mut new, &effects, "y", 2, 3);
        assert_eq!(new.version, 3);
        assert_eq!(
            changed(&old, &new),
            [(Kind::BackendHold, "a".into()), (Kind::NodeHold, "m".into()), (Kind::Breaker, "n".into())]
        );
    }
}
