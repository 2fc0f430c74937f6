//! Operator state shared by every replica: holds (drain, disable), forced breakers, canary
//! results, the gate's verdicts on kept-out nodes and its accepted pins. With a ledger store
//! every change is written there first (with its audit line: who, what, when, before and
//! after), then read back into this replica's boards and announced through Redis when it is
//! configured; every replica's loop reads the store again on each announcement and every
//! `state.operator_poll_ms`, and once before the router reports ready, so an action through
//! any replica holds on all of them and survives a restart.
//!
//! Without a store the same changes are kept in memory on this replica alone (as before the
//! store existed): one path for both, so the boards are only ever set from the whole state.

pub mod entry;
mod memory;
mod notify;
pub mod store;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

pub use entry::Change;
use entry::OperatorState;
use notify::Notifier;
pub use store::AuditRow;

use crate::control::canary::{CanaryBoard, CanaryResult};
use crate::control::pins::PinBoard;
use crate::guard::breaker::BreakerBoard;
use crate::guard::holds::HoldBoard;
use crate::ledger::{unix_millis, Store, StoreError};

/// The boards the state is applied to.
pub struct Targets {
    pub holds: Arc<HoldBoard>,
    pub breakers: Arc<BreakerBoard>,
    pub canaries: Arc<CanaryBoard>,
    pub pins: Arc<PinBoard>,
}

impl Targets {
    /// Set every board from the whole state. Canary results are in the state only with a store
    /// (`shared`); without one the canary board keeps its own.
    fn apply(&self, state: &OperatorState, shared: bool) {
        let (d, problems) = entry::desired(state);
        for p in problems {
            tracing::warn!("{p}; left out");
        }
        self.holds.replace(d.holds);
        self.breakers.force_all(&d.breakers);
        if shared {
            self.canaries.replace(d.canaries);
        }
        self.pins.set_gate_verdicts(d.gate_verdicts);
        for (backend, pin) in d.pins {
            self.pins.accept(&backend, pin);
        }
    }
}

enum Backing {
    Memory(memory::Memory),
    Store { store: Store, notifier: Option<Arc<Notifier>> },
}

/// Where the state stands on this replica, for `/metrics` and the admin API.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Status {
    /// The version applied here.
    pub version: i64,
    /// Kept in the ledger store (shared), or in memory (this replica alone).
    pub shared: bool,
    /// Since the store was last read; `None` without a store or before the first read.
    pub sync_age: Option<Duration>,
    /// Whether the Redis subscription is up; `None` without Redis.
    pub notify_up: Option<bool>,
}

pub struct OperatorBoard {
    targets: Targets,
    backing: Backing,
    applied: Mutex<OperatorState>,
    synced_at: Mutex<Option<Instant>>,
    /// One read of the store at a time (an admin write's own and the loop's).
    syncing: tokio::sync::Mutex<()>,
    wake: Arc<Notify>,
    canaries: Mutex<Option<mpsc::UnboundedReceiver<CanaryResult>>>,
}

impl OperatorBoard {
    /// The state on this replica alone (no ledger store).
    pub(crate) fn in_memory(targets: Targets) -> Arc<OperatorBoard> {
        OperatorBoard::new(targets, Backing::Memory(memory::Memory::default()))
    }

    /// The state in `store`, announced through Redis at `redis_url` when there is one.
    pub fn shared(targets: Targets, store: Store, redis_url: Option<&str>) -> Arc<OperatorBoard> {
        let notifier = redis_url.and_then(|url| {
            Notifier::new(url)
                .inspect_err(|e| {
                    tracing::warn!("operator state: the Redis URL cannot be used ({e}); polling only")
                })
                .ok()
        });
        let (tx, rx) = mpsc::unbounded_channel();
        targets.canaries.forward_to(tx);
        let board = OperatorBoard::new(targets, Backing::Store { store, notifier });
        *board.canaries.lock().unwrap_or_else(|e| e.into_inner()) = Some(rx);
        board
    }

    fn new(targets: Targets, backing: Backing) -> Arc<OperatorBoard> {
        Arc::new(OperatorBoard {
            targets,
            backing,
            applied: Mutex::default(),
            synced_at: Mutex::new(None),
            syncing: tokio::sync::Mutex::new(()),
            wake: Arc::new(Notify::new()),
            canaries: Mutex::new(None),
        })
    }

    /// Make `changes` by `by` (all or none), then apply the state here and announce it.
    /// `false`: nothing changed (lifting a hold that was not there).
    pub async fn change(&self, changes: Vec<Change>, by: &str) -> Result<bool, StoreError> {
        let at_ms = unix_millis(std::time::SystemTime::now());
        match &self.backing {
            Backing::Memory(memory) => Ok(memory.change(&changes, by, at_ms, |state| {
                self.targets.apply(state, false);
                *self.applied.lock().unwrap_or_else(|e| e.into_inner()) = state.clone();
            })),
            Backing::Store { store, notifier } => {
                let Some(version) = store::write(store, &changes, by, at_ms).await? else {
                    return Ok(false);
                };
                if let Err(e) = self.sync().await {
                    tracing::warn!("operator state: written (version {version}) but not read back yet: {e}");
                }
                if let Some(n) = notifier {
                    n.publish(version).await;
                }
                Ok(true)
            }
        }
    }

    /// Read the store if its version moved, and apply the whole state here.
    pub async fn sync(&self) -> Result<(), StoreError> {
        let Backing::Store { store, .. } = &self.backing else { return Ok(()) };
        let _one = self.syncing.lock().await;
        let version = store::version(store).await?;
        let applied = self.applied.lock().unwrap_or_else(|e| e.into_inner()).version;
        if version != applied {
            let state = store::load(store).await?;
            let old = self.applied.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let changed = entry::changed(&old, &state);
            if !changed.is_empty() {
                let what: Vec<String> = changed.iter().map(|(k, s)| format!("{} {s}", k.as_str())).collect();
                tracing::info!(version = state.version, changed = ?what, "operator state applied");
            }
            self.targets.apply(&state, true);
            *self.applied.lock().unwrap_or_else(|e| e.into_inner()) = state;
        }
        *self.synced_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        Ok(())
    }

    /// Read the store every `every`, at once on each announcement, and store canary results as
    /// they come. Without a store there is nothing to do.
    pub async fn run(self: Arc<Self>, every: Duration) {
        let Backing::Store { notifier, .. } = &self.backing else { return };
        let listen = {
            let (notifier, wake) = (notifier.clone(), Arc::clone(&self.wake));
            async move {
                match notifier {
                    Some(n) => n.listen(wake).await,
                    None => std::future::pending().await,
                }
            }
        };
        tokio::pin!(listen);
        let mut canaries = self.canaries.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.wake.notified() => {}
                () = &mut listen => {}
                Some(result) = async { canaries.as_mut()?.recv().await } => {
                    if let Err(e) = self.change(vec![Change::Canary(result)], "canary").await {
                        tracing::debug!("operator state: canary result not stored: {e}");
                    }
                    continue;
                }
            }
            match self.sync().await {
                Ok(()) if std::mem::take(&mut failing) => {
                    tracing::info!("operator state: the store is readable again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "operator state: cannot read the store; the last state stays");
                }
                Err(_) => {}
            }
        }
    }

    pub fn status(&self) -> Status {
        let version = self.applied.lock().unwrap_or_else(|e| e.into_inner()).version;
        let synced_at = *self.synced_at.lock().unwrap_or_else(|e| e.into_inner());
        match &self.backing {
            Backing::Memory(_) => Status { version, shared: false, sync_age: None, notify_up: None },
            Backing::Store { notifier, .. } => Status {
                version,
                shared: true,
                sync_age: synced_at.map(|at| at.elapsed()),
                notify_up: notifier.as_ref().map(|n| n.up()),
            },
        }
    }

    /// The latest `limit` audit lines, newest first.
    pub async fn audit(&self, limit: usize) -> Result<Vec<AuditRow>, StoreError> {
        match &self.backing {
            Backing::Memory(memory) => Ok(memory.audit(limit)),
            Backing::Store { store, .. } => {
                store::audit(store, i64::try_from(limit).unwrap_or(i64::MAX)).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::NodeKey;
    use crate::guard::breaker::Forced;
    use crate::guard::holds::{HoldKind, Scope};

    fn targets() -> Targets {
        Targets {
            holds: Arc::default(),
            breakers: BreakerBoard::new(crate::config::BreakerConfig::default()),
            canaries: Arc::default(),
            pins: Arc::default(),
        }
    }

    #[tokio::test]
    async fn without_a_store_changes_apply_to_the_boards_and_are_audited_here() {
        let board = OperatorBoard::in_memory(targets());
        let node = NodeKey::from("pool/m@a");
        board.targets.breakers.node(&NodeKey::from("pool/m@b"));
        let changes = vec![
            Change::Hold(Scope::Node(node.clone()), Some(HoldKind::Drained)),
            Change::Breaker(node.clone(), Some(Forced::Open)),
        ];
        assert!(board.change(changes, "alice").await.unwrap());
        assert_eq!(board.targets.holds.why_held("pool", &node).as_deref(), Some("node drained by alice"));
        assert_eq!(board.targets.breakers.forced("pool/m@a"), Some(Forced::Open));
        assert_eq!(board.targets.breakers.forced("pool/m@b"), None);
        assert!(!board.change(vec![Change::Hold(Scope::Backend("pool".into()), None)], "bob").await.unwrap());
        assert!(board.change(vec![Change::Breaker(node.clone(), None)], "bob").await.unwrap());
        assert_eq!(board.targets.breakers.forced("pool/m@a"), None, "auto hands it back");
        let status = board.status();
        assert_eq!(
            (status.version, status.shared, status.sync_age, status.notify_up),
            (2, false, None, None)
        );
        let audit = board.audit(10).await.unwrap();
        let lines: Vec<(&str, &str)> = audit.iter().map(|a| (a.action.as_str(), a.by.as_str())).collect();
        assert_eq!(lines, [("breaker_auto", "bob"), ("breaker_open", "alice"), ("drain", "alice")]);
        assert_eq!(board.audit(1).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn two_boards_on_one_store_share_verdicts_pins_and_canaries_and_audit_them_once() {
        let path = std::env::temp_dir().join(format!("spillway-opstate-{:016x}.db", rand::random::<u64>()));
        let url = format!("sqlite://{}", path.display());
        let (a, b) = (targets(), targets());
        let (pins_b, canaries_b) = (Arc::clone(&b.pins), Arc::clone(&b.canaries));
        let a = OperatorBoard::shared(a, Store::open(&url).await.unwrap(), None);
        let b = OperatorBoard::shared(b, Store::open(&url).await.unwrap(), None);
        let node = NodeKey::from("pool/m@a");
        let pin = crate::config::Pin { quantization: Some("awq".into()), ..Default::default() };
        let canary = CanaryResult {
            backend: "oa".into(),
            task: "t".into(),
            ok: false,
            ttft_ms: None,
            error: Some("502".into()),
            at: 1,
        };
        let changes = vec![
            Change::GateVerdict(node.clone(), Some("gate failed: 1/10".into())),
            Change::Pin("pool".into(), pin.clone()),
            Change::Canary(canary.clone()),
        ];
        assert!(a.change(changes, "gate").await.unwrap());
        assert_eq!(b.status().version, 0, "not read yet");
        b.sync().await.unwrap();
        assert_eq!(b.status().version, a.status().version);
        assert!(b.status().sync_age.is_some());
        assert_eq!(pins_b.in_effect("pool", None), Some(pin.clone()), "the accepted pin is in effect on B");
        let reported =
            crate::control::pins::Reported { quantization: Some("fp8".into()), ..Default::default() };
        let why = pins_b.check("pool", &node, Some(&pin), &reported).unwrap();
        assert!(why.ends_with("; gate failed: 1/10"), "{why}");
        assert_eq!(canaries_b.last(), std::slice::from_ref(&canary));
        // The same pin again is no change; a canary that confirms the last is stored, not audited.
        assert!(!b.change(vec![Change::Pin("pool".into(), pin)], "gate").await.unwrap());
        assert!(b.change(vec![Change::Canary(CanaryResult { at: 2, ..canary })], "canary").await.unwrap());
        let audit = a.audit(10).await.unwrap();
        let kinds: Vec<&str> = audit.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, ["canary", "gate_verdict", "pin"]);
        assert_eq!(audit[1].new, Some(serde_json::json!("gate failed: 1/10")));
    }
}
