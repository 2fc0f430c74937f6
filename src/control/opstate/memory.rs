//! The operator state without a ledger store: the same entries, effects and audit lines as the
//! store keeps, in this replica's memory alone (a restart clears them, no other replica sees
//! them). No I/O; the board applies what it returns.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::entry::{self, Change, Effect, OperatorState};
use super::store::AuditRow;

/// Audit lines kept.
const AUDIT_LINES: usize = 1_000;

#[derive(Default)]
pub struct Memory {
    inner: Mutex<(OperatorState, VecDeque<AuditRow>)>,
}

impl Memory {
    /// Make `changes` by `by` at `at_ms` and hand the whole new state to `apply` (still under
    /// the lock, so two changes are applied in the order they were made); `false` when nothing
    /// changed.
    pub fn change(
        &self,
        changes: &[Change],
        by: &str,
        at_ms: i64,
        apply: impl FnOnce(&OperatorState),
    ) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (state, audit) = &mut *inner;
        let mut effects: Vec<Effect> = Vec::new();
        for change in changes {
            let key = change.key();
            // A change made earlier in this batch counts as the old value.
            let old = match effects.iter().rev().find(|e| e.key == key) {
                Some(e) => e.new.clone(),
                None => state.entries.get(&key).map(|e| e.value.clone()),
            };
            effects.extend(change.effect(old.as_deref()));
        }
        if effects.is_empty() {
            return false;
        }
        let version = state.version + 1;
        entry::apply_effects(state, &effects, by, at_ms, version);
        for e in effects.iter().filter(|e| e.audited) {
            audit.push_front(AuditRow::of(e, version, by, at_ms));
        }
        audit.truncate(AUDIT_LINES);
        apply(state);
        true
    }

    /// The latest `limit` audit lines, newest first.
    pub fn audit(&self, limit: usize) -> Vec<AuditRow> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.1.iter().take(limit).cloned().collect()
    }
}
