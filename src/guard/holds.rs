//! Holds an operator put on a backend or a node through the admin API: drained (a game-day
//! drill or maintenance: no new requests, those in flight finish) or disabled (the same for
//! routing, meant to stay until enabled). The snapshot loop copies them into node views, so
//! planning never offers a held node; nothing else changes (its GPUs are still scraped and
//! costed). With a ledger store the holds live there (`control::opstate`) and this board is
//! their copy on this replica; without one it is all there is, and a restart clears them.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::canonical::NodeKey;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    Drained,
    Disabled,
}

impl HoldKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldKind::Drained => "drained",
            HoldKind::Disabled => "disabled",
        }
    }
}

/// One hold and who put it there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hold {
    pub kind: HoldKind,
    pub by: String,
    /// Unix seconds.
    pub since: u64,
}

/// What a hold is on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "on", content = "name")]
pub enum Scope {
    Backend(String),
    /// A node (`backend/model@url`).
    Node(NodeKey),
}

#[derive(Debug, Default)]
pub struct HoldBoard {
    holds: Mutex<BTreeMap<Scope, Hold>>,
}

impl HoldBoard {
    /// Put a hold (replacing one already there).
    pub fn hold(&self, scope: Scope, kind: HoldKind, by: &str) {
        let since = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.lock().insert(scope, Hold { kind, by: by.to_string(), since });
    }

    /// Lift a hold; `false` when there was none.
    pub fn release(&self, scope: &Scope) -> bool {
        self.lock().remove(scope).is_some()
    }

    /// Why a node of `backend` may not take requests: the node's own hold, else its backend's.
    pub(crate) fn why_held(&self, backend: &str, node: &NodeKey) -> Option<String> {
        let holds = self.lock();
        let own = holds.get(&Scope::Node(node.clone())).map(|h| (h, "node"));
        let whole = holds.get(&Scope::Backend(backend.to_string())).map(|h| (h, "backend"));
        own.or(whole).map(|(h, what)| format!("{what} {} by {}", h.kind.as_str(), h.by))
    }

    /// Put exactly `holds` in place (the shared state as read from the store).
    pub fn replace(&self, holds: BTreeMap<Scope, Hold>) {
        *self.lock() = holds;
    }

    pub fn all(&self) -> Vec<(Scope, Hold)> {
        self.lock().iter().map(|(s, h)| (s.clone(), h.clone())).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Scope, Hold>> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_held_by_its_own_hold_or_its_backends() {
        let board = HoldBoard::default();
        assert_eq!(board.why_held("pool", &"pool/m@a".into()), None);
        board.hold(Scope::Backend("pool".into()), HoldKind::Drained, "alice");
        assert_eq!(board.why_held("pool", &"pool/m@a".into()).as_deref(), Some("backend drained by alice"));
        board.hold(Scope::Node("pool/m@a".into()), HoldKind::Disabled, "bob");
        assert_eq!(board.why_held("pool", &"pool/m@a".into()).as_deref(), Some("node disabled by bob"));
        assert!(board.release(&Scope::Backend("pool".into())));
        assert_eq!(board.why_held("pool", &"pool/m@b".into()), None);
        assert!(!board.release(&Scope::Backend("pool".into())));
        assert_eq!(board.all().len(), 1);
    }
}
