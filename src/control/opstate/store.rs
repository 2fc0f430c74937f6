//! The operator state's tables in the ledger store (SQLite alone, PostgreSQL for several
//! replicas; the ledger's pool and migrations): `operator_state` (one row per entry),
//! `operator_version` (one row: the state's version) and `operator_audit` (append-only).
//!
//! A write raises the version first, in the same transaction: that row's lock puts every
//! writer in line, so the old values the audit records are the ones each change replaced. A
//! read takes the version before the rows, so rows newer than the version read are only ever
//! read again, never missed. This module must not retry, cache or apply anything.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::entry::{Change, Effect, Entry, Kind, OperatorState};
use crate::ledger::{Store, StoreError};

/// One line of the audit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditRow {
    pub version: i64,
    pub kind: &'static str,
    pub scope: String,
    pub action: String,
    pub by: String,
    pub at_ms: i64,
    pub old: Option<serde_json::Value>,
    pub new: Option<serde_json::Value>,
}

impl AuditRow {
    /// The audit line of `effect`, made at `version` by `by` at `at_ms`.
    pub fn of(effect: &Effect, version: i64, by: &str, at_ms: i64) -> AuditRow {
        let value = |v: &Option<String>| v.as_deref().map(json_value);
        AuditRow {
            version,
            kind: effect.key.0.as_str(),
            scope: effect.key.1.clone(),
            action: effect.action.to_string(),
            by: by.to_string(),
            at_ms,
            old: value(&effect.old),
            new: value(&effect.new),
        }
    }
}

fn json_value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}

fn column(col: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |source| StoreError::Column { column: col.to_string(), source }
}

/// Apply `changes` by `by` at `at_ms` in one transaction: all or none. Returns the new
/// version, or `None` when no change changed anything (the version stays).
pub async fn write(
    store: &Store,
    changes: &[Change],
    by: &str,
    at_ms: i64,
) -> Result<Option<i64>, StoreError> {
    let mut tx = store.pool().begin().await.map_err(StoreError::statement("begin"))?;
    let version: i64 =
        sqlx::query("UPDATE operator_version SET version = version + 1 WHERE id = 1 RETURNING version")
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::statement("raise operator state version"))?
            .try_get("version")
            .map_err(column("version"))?;
    let mut effects: Vec<Effect> = Vec::new();
    for change in changes {
        let (kind, scope) = change.key();
        let old: Option<String> =
            sqlx::query("SELECT value FROM operator_state WHERE kind = $1 AND scope = $2")
                .bind(kind.as_str())
                .bind(scope.clone())
                .fetch_optional(&mut *tx)
                .await
                .map_err(StoreError::statement("read operator state"))?
                .map(|row| row.try_get::<String, _>("value"))
                .transpose()
                .map_err(column("value"))?;
        // A change already made earlier in this batch counts as the old value.
        let old =
            effects.iter().rev().find(|e| e.key == (kind, scope.clone())).map_or(old, |e| e.new.clone());
        effects.extend(change.effect(old.as_deref()));
    }
    if effects.is_empty() {
        tx.rollback().await.map_err(StoreError::statement("rollback"))?;
        return Ok(None);
    }
    for e in &effects {
        let (kind, scope) = &e.key;
        let statement = match &e.new {
            Some(value) => sqlx::query(
                "INSERT INTO operator_state (kind, scope, value, set_by, at_ms, version) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (kind, scope) DO UPDATE SET \
                 value = excluded.value, set_by = excluded.set_by, at_ms = excluded.at_ms, version = excluded.version",
            )
            .bind(kind.as_str())
            .bind(scope.clone())
            .bind(value.clone())
            .bind(by.to_string())
            .bind(at_ms)
            .bind(version),
            None => sqlx::query("DELETE FROM operator_state WHERE kind = $1 AND scope = $2")
                .bind(kind.as_str())
                .bind(scope.clone()),
        };
        statement.execute(&mut *tx).await.map_err(StoreError::statement("write operator state"))?;
        if e.audited {
            sqlx::query(
                "INSERT INTO operator_audit (version, kind, scope, action, set_by, at_ms, old_value, new_value) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (version, kind, scope) DO NOTHING",
            )
            .bind(version)
            .bind(kind.as_str())
            .bind(scope.clone())
            .bind(e.action)
            .bind(by.to_string())
            .bind(at_ms)
            .bind(e.old.clone())
            .bind(e.new.clone())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::statement("write operator audit"))?;
        }
    }
    tx.commit().await.map_err(StoreError::statement("commit"))?;
    Ok(Some(version))
}

/// The state's version now (cheap: one row).
pub async fn version(store: &Store) -> Result<i64, StoreError> {
    sqlx::query("SELECT version FROM operator_version WHERE id = 1")
        .fetch_one(store.pool())
        .await
        .map_err(StoreError::statement("read operator state version"))?
        .try_get("version")
        .map_err(column("version"))
}

/// The whole state: its version, then every entry. Rows of a kind this version does not know
/// are left out (a newer replica wrote them).
pub async fn load(store: &Store) -> Result<OperatorState, StoreError> {
    let version = version(store).await?;
    let rows = sqlx::query("SELECT kind, scope, value, set_by, at_ms, version FROM operator_state")
        .fetch_all(store.pool())
        .await
        .map_err(StoreError::statement("read operator state"))?;
    let mut state = OperatorState { version, ..OperatorState::default() };
    for row in &rows {
        let kind: String = row.try_get("kind").map_err(column("kind"))?;
        let Some(kind) = Kind::parse(&kind) else { continue };
        let entry = Entry {
            value: row.try_get("value").map_err(column("value"))?,
            by: row.try_get("set_by").map_err(column("set_by"))?,
            at_ms: row.try_get("at_ms").map_err(column("at_ms"))?,
            version: row.try_get("version").map_err(column("version"))?,
        };
        state.entries.insert((kind, row.try_get("scope").map_err(column("scope"))?), entry);
    }
    Ok(state)
}

/// The latest `limit` audit lines, newest first.
pub async fn audit(store: &Store, limit: i64) -> Result<Vec<AuditRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT version, kind, scope, action, set_by, at_ms, old_value, new_value FROM operator_audit \
         ORDER BY version DESC, kind, scope LIMIT $1",
    )
    .bind(limit)
    .fetch_all(store.pool())
    .await
    .map_err(StoreError::statement("read operator audit"))?;
    rows.iter().filter_map(|row| audit_row(row).transpose()).collect()
}

fn audit_row(row: &AnyRow) -> Result<Option<AuditRow>, StoreError> {
    let kind: String = row.try_get("kind").map_err(column("kind"))?;
    let Some(kind) = Kind::parse(&kind) else { return Ok(None) };
    let value = |col: &'static str| -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<String> = row.try_get(col).map_err(column(col))?;
        Ok(text.as_deref().map(json_value))
    };
    Ok(Some(AuditRow {
        version: row.try_get("version").map_err(column("version"))?,
        kind: kind.as_str(),
        scope: row.try_get("scope").map_err(column("scope"))?,
        action: row.try_get("action").map_err(column("action"))?,
        by: row.try_get("set_by").map_err(column("set_by"))?,
        at_ms: row.try_get("at_ms").map_err(column("at_ms"))?,
        old: value("old_value")?,
        new: value("new_value")?,
    }))
}
