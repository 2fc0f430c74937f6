//! What the retention loop deletes: uploaded files past their time, and jobs long ended with
//! their lines, output files and spills.

use sqlx::AssertSqlSafe;

use super::{job_of, JobRow, Result, JOB_COLUMNS};
use crate::batch::job::Status;
use crate::ledger::Store;

/// Delete the uploaded files whose time ran out before `now_ms`, content and all; how many.
pub async fn delete_expired_files(store: &Store, now_ms: i64) -> Result<u64> {
    let done = sqlx::query(
        "DELETE FROM batch_files WHERE batch_id IS NULL AND expires_ms IS NOT NULL AND expires_ms < $1",
    )
    .bind(now_ms)
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected())
}

/// Up to `limit` jobs that ended before `before_ms`, oldest first.
pub async fn jobs_ended_before(store: &Store, before_ms: i64, limit: i64) -> Result<Vec<JobRow>> {
    let ended: Vec<String> =
        Status::ALL.iter().filter(|s| s.ended()).map(|s| format!("'{}'", s.as_str())).collect();
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT {JOB_COLUMNS} FROM batch_jobs WHERE status IN ({}) \
         AND COALESCE(completed_ms, failed_ms, expired_ms, cancelled_ms, created_ms) < $1 \
         ORDER BY created_ms, id LIMIT $2",
        ended.join(", ")
    )))
    .bind(before_ms)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(job_of).collect()
}

/// Delete a job with its lines and its output and error files, all or nothing.
pub async fn delete_job(store: &Store, id: &str) -> Result<()> {
    let mut tx = store.pool().begin().await?;
    for table in [
        "DELETE FROM batch_lines WHERE batch_id = $1",
        "DELETE FROM batch_files WHERE batch_id = $1",
        "DELETE FROM batch_spills WHERE batch_id = $1",
    ] {
        sqlx::query(table).bind(id.to_string()).execute(&mut *tx).await?;
    }
    sqlx::query("DELETE FROM batch_jobs WHERE id = $1").bind(id.to_string()).execute(&mut *tx).await?;
    tx.commit().await
}
