//! The provider batches a job's lines were sent to (`batch::spill`): one row each, its lines
//! held in `batch_lines` under the row's claim until its results are read back.

use sqlx::Row;

use super::Result;
use crate::ledger::Store;

/// A provider batch a job's lines were sent to.
#[derive(Debug, Clone, PartialEq)]
pub struct Spill {
    /// The provider's batch id.
    pub id: String,
    pub batch_id: String,
    pub backend: String,
    /// The claim its lines are held under.
    pub claim: String,
}

pub async fn insert_spill(store: &Store, s: &Spill, lines: u64, now_ms: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO batch_spills (id, batch_id, backend, claim, state, lines, created_ms) \
         VALUES ($1, $2, $3, $4, 'submitted', $5, $6)",
    )
    .bind(s.id.clone())
    .bind(s.batch_id.clone())
    .bind(s.backend.clone())
    .bind(s.claim.clone())
    .bind(lines as i64)
    .bind(now_ms)
    .execute(store.pool())
    .await
    .map(|_| ())
}

/// The provider batches not yet read back.
pub async fn open_spills(store: &Store) -> Result<Vec<Spill>> {
    let rows = sqlx::query(
        "SELECT id, batch_id, backend, claim FROM batch_spills WHERE state = 'submitted' ORDER BY created_ms",
    )
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Spill {
                id: r.try_get("id")?,
                batch_id: r.try_get("batch_id")?,
                backend: r.try_get("backend")?,
                claim: r.try_get("claim")?,
            })
        })
        .collect()
}

pub async fn end_spill(store: &Store, id: &str, now_ms: i64) -> Result<()> {
    sqlx::query("UPDATE batch_spills SET state = 'ended', ended_ms = $1 WHERE id = $2")
        .bind(now_ms)
        .bind(id.to_string())
        .execute(store.pool())
        .await
        .map(|_| ())
}
