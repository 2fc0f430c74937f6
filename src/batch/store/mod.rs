//! Batch files, jobs and lines in the ledger store (SQLite or PostgreSQL, the ledger's
//! migrations), shared by every replica. A replica takes lines by claiming them under a lease
//! it renews (`batch::lease`; a conditional update: a line is claimed by one replica at a time,
//! and a claim that lapses, its replica gone, is taken again); a line's result is written with its final state by the
//! replica whose claim it is, so a line is done exactly once, whatever dies when.

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::job::{Dialect, Status};
use super::lines::Line;

mod claims;
mod retention;
mod spills;

/// Jobs, files and lines are kept in the ledger's store, and dated as its rows are.
pub use crate::ledger::{rfc3339, unix_millis, Store};
pub use claims::{
    claim, claim_these, counts, end_queued, ended, finish, finished_since, held, holders, queued, release,
    release_all, renew, Claimed, Ended, LineEnd,
};
pub use retention::{delete_expired_files, delete_job, jobs_ended_before};
pub use spills::{end_spill, insert_spill, open_spills, Spill};

/// A stored file (an input file, or a job's output or error file, whose lines live with the job).
#[derive(Debug, Clone, PartialEq)]
pub struct FileRow {
    pub id: String,
    pub purpose: String,
    pub filename: String,
    pub bytes: i64,
    pub owner: Option<String>,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
    /// The job whose output or error file it is.
    pub batch_id: Option<String>,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: String,
    pub dialect: Dialect,
    pub endpoint: String,
    pub input_file_id: Option<String>,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub status: Status,
    pub owner: Option<String>,
    /// JSON text.
    pub metadata: Option<String>,
    /// JSON text: OpenAI's `errors` object of a job that failed validation.
    pub errors: Option<String>,
    pub window_ms: i64,
    pub created_ms: i64,
    /// When it entered each status (`None`: never).
    pub at_ms: [Option<i64>; 7],
    pub total: i64,
    /// JSON text: where its lines go now and why (`deadline::Plan`).
    pub plan: Option<String>,
}

impl JobRow {
    /// When its window ends.
    pub fn expires_ms(&self) -> i64 {
        self.created_ms + self.window_ms
    }

    /// When it entered `status` (creation for `validating`).
    pub fn entered(&self, status: Status) -> Option<i64> {
        match stamp_index(status) {
            Some(i) => self.at_ms[i],
            None => Some(self.created_ms),
        }
    }
}

/// The timestamp columns, in `JobRow::at_ms` order.
const STAMPS: [&str; 7] = [
    "in_progress_ms",
    "finalizing_ms",
    "completed_ms",
    "failed_ms",
    "expired_ms",
    "cancelling_ms",
    "cancelled_ms",
];

fn stamp_index(status: Status) -> Option<usize> {
    match status {
        Status::Validating => None,
        Status::InProgress => Some(0),
        Status::Finalizing => Some(1),
        Status::Completed => Some(2),
        Status::Failed => Some(3),
        Status::Expired => Some(4),
        Status::Cancelling => Some(5),
        Status::Cancelled => Some(6),
    }
}

pub(super) type Result<T> = std::result::Result<T, sqlx::Error>;

pub(super) const JOB_COLUMNS: &str = "id, dialect, endpoint, input_file_id, output_file_id, error_file_id, status, owner, \
     metadata, errors, window_ms, created_ms, in_progress_ms, finalizing_ms, completed_ms, failed_ms, expired_ms, \
     cancelling_ms, cancelled_ms, total, plan";

pub(super) fn job_of(row: &AnyRow) -> Result<JobRow> {
    let text = |name: &str| row.try_get::<String, _>(name);
    let bad = |what: &str| sqlx::Error::Decode(format!("unknown batch {what}").into());
    let mut at_ms = [None; 7];
    for (slot, column) in at_ms.iter_mut().zip(STAMPS) {
        *slot = row.try_get::<Option<i64>, _>(column)?;
    }
    Ok(JobRow {
        id: text("id")?,
        dialect: Dialect::parse(&text("dialect")?).ok_or_else(|| bad("dialect"))?,
        endpoint: text("endpoint")?,
        input_file_id: row.try_get("input_file_id")?,
        output_file_id: row.try_get("output_file_id")?,
        error_file_id: row.try_get("error_file_id")?,
        status: Status::parse(&text("status")?).ok_or_else(|| bad("status"))?,
        owner: row.try_get("owner")?,
        metadata: row.try_get("metadata")?,
        errors: row.try_get("errors")?,
        window_ms: row.try_get("window_ms")?,
        created_ms: row.try_get("created_ms")?,
        at_ms,
        total: row.try_get("total")?,
        plan: row.try_get("plan")?,
    })
}

/// Keep a file (once: a file already kept under its id stays as it is).
pub async fn insert_file(store: &Store, f: &FileRow, content: Option<&str>) -> Result<()> {
    sqlx::query(
        "INSERT INTO batch_files (id, purpose, filename, bytes, owner, created_ms, expires_ms, content, batch_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
    )
    .bind(f.id.clone())
    .bind(f.purpose.clone())
    .bind(f.filename.clone())
    .bind(f.bytes)
    .bind(f.owner.clone())
    .bind(f.created_ms)
    .bind(f.expires_ms)
    .bind(content.map(str::to_string))
    .bind(f.batch_id.clone())
    .execute(store.pool())
    .await
    .map(|_| ())
}

pub async fn file(store: &Store, id: &str) -> Result<Option<FileRow>> {
    let row = sqlx::query(
        "SELECT id, purpose, filename, bytes, owner, created_ms, expires_ms, batch_id FROM batch_files WHERE id = $1",
    )
    .bind(id.to_string())
    .fetch_optional(store.pool())
    .await?;
    row.map(|r| {
        Ok(FileRow {
            id: r.try_get("id")?,
            purpose: r.try_get("purpose")?,
            filename: r.try_get("filename")?,
            bytes: r.try_get("bytes")?,
            owner: r.try_get("owner")?,
            created_ms: r.try_get("created_ms")?,
            expires_ms: r.try_get("expires_ms")?,
            batch_id: r.try_get("batch_id")?,
        })
    })
    .transpose()
}

/// An input file's text.
pub async fn file_content(store: &Store, id: &str) -> Result<Option<String>> {
    let row = sqlx::query("SELECT content FROM batch_files WHERE id = $1")
        .bind(id.to_string())
        .fetch_optional(store.pool())
        .await?;
    row.map(|r| r.try_get::<Option<String>, _>("content")).transpose().map(Option::flatten)
}

pub async fn delete_file(store: &Store, id: &str) -> Result<bool> {
    let done = sqlx::query("DELETE FROM batch_files WHERE id = $1")
        .bind(id.to_string())
        .execute(store.pool())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Store a job and its lines, all or nothing.
pub async fn create_job(store: &Store, job: &JobRow, lines: &[Line]) -> Result<()> {
    let mut tx = store.pool().begin().await?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO batch_jobs ({JOB_COLUMNS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)"
    )))
    .bind(job.id.clone())
    .bind(job.dialect.as_str())
    .bind(job.endpoint.clone())
    .bind(job.input_file_id.clone())
    .bind(job.output_file_id.clone())
    .bind(job.error_file_id.clone())
    .bind(job.status.as_str())
    .bind(job.owner.clone())
    .bind(job.metadata.clone())
    .bind(job.errors.clone())
    .bind(job.window_ms)
    .bind(job.created_ms)
    .bind(job.at_ms[0])
    .bind(job.at_ms[1])
    .bind(job.at_ms[2])
    .bind(job.at_ms[3])
    .bind(job.at_ms[4])
    .bind(job.at_ms[5])
    .bind(job.at_ms[6])
    .bind(job.total)
    .bind(job.plan.clone())
    .execute(&mut *tx)
    .await?;
    for (idx, line) in lines.iter().enumerate() {
        sqlx::query(
            "INSERT INTO batch_lines (batch_id, idx, custom_id, request, state) VALUES ($1, $2, $3, $4, 'queued')",
        )
        .bind(job.id.clone())
        .bind(idx as i64)
        .bind(line.custom_id.clone())
        .bind(line.request.clone())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

pub async fn job(store: &Store, id: &str) -> Result<Option<JobRow>> {
    let row = sqlx::query(AssertSqlSafe(format!("SELECT {JOB_COLUMNS} FROM batch_jobs WHERE id = $1")))
        .bind(id.to_string())
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(job_of).transpose()
}

/// A dialect's jobs, newest first, `limit` of them after the job `after` (its id).
pub async fn jobs(store: &Store, dialect: Dialect, after: Option<&str>, limit: i64) -> Result<Vec<JobRow>> {
    // Placeholders in the order they are bound: SQLite numbers them as they appear.
    let rows = match after {
        None => {
            let query = format!(
                "SELECT {JOB_COLUMNS} FROM batch_jobs WHERE dialect = $1 ORDER BY created_ms DESC, id DESC LIMIT $2"
            );
            sqlx::query(AssertSqlSafe(query))
                .bind(dialect.as_str())
                .bind(limit)
                .fetch_all(store.pool())
                .await?
        }
        Some(after) => {
            let query = format!(
                "SELECT {JOB_COLUMNS} FROM batch_jobs j WHERE dialect = $1 AND EXISTS (SELECT 1 FROM batch_jobs a \
                 WHERE a.id = $2 AND (j.created_ms < a.created_ms OR (j.created_ms = a.created_ms AND j.id < a.id))) \
                 ORDER BY created_ms DESC, id DESC LIMIT $3"
            );
            let query = sqlx::query(AssertSqlSafe(query)).bind(dialect.as_str()).bind(after.to_string());
            query.bind(limit).fetch_all(store.pool()).await?
        }
    };
    rows.iter().map(job_of).collect()
}

/// The `limit` newest jobs of either dialect, newest first.
pub async fn latest_jobs(store: &Store, limit: i64) -> Result<Vec<JobRow>> {
    let query = format!("SELECT {JOB_COLUMNS} FROM batch_jobs ORDER BY created_ms DESC, id DESC LIMIT $1");
    let rows = sqlx::query(AssertSqlSafe(query)).bind(limit).fetch_all(store.pool()).await?;
    rows.iter().map(job_of).collect()
}

/// The jobs that have not ended, oldest first.
pub async fn active_jobs(store: &Store) -> Result<Vec<JobRow>> {
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT {JOB_COLUMNS} FROM batch_jobs WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling') \
         ORDER BY created_ms, id"
    )))
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(job_of).collect()
}

/// Move a job from `from` to `to` at `at_ms`; whether it moved (another replica may have).
pub async fn set_status(store: &Store, id: &str, from: &[Status], to: Status, at_ms: i64) -> Result<bool> {
    let froms: Vec<String> = from.iter().map(|s| format!("'{}'", s.as_str())).collect();
    let stamp = stamp_index(to).map_or(String::new(), |i| format!(", {} = {at_ms}", STAMPS[i]));
    let done = sqlx::query(AssertSqlSafe(format!(
        "UPDATE batch_jobs SET status = $1{stamp} WHERE id = $2 AND status IN ({})",
        froms.join(", ")
    )))
    .bind(to.as_str())
    .bind(id.to_string())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Name a finished job's output and error files.
pub async fn set_files(store: &Store, id: &str, output: Option<&str>, error: Option<&str>) -> Result<()> {
    sqlx::query("UPDATE batch_jobs SET output_file_id = $1, error_file_id = $2 WHERE id = $3")
        .bind(output.map(str::to_string))
        .bind(error.map(str::to_string))
        .bind(id.to_string())
        .execute(store.pool())
        .await
        .map(|_| ())
}

/// Keep a job's plan (JSON), shown in its object.
pub async fn set_plan(store: &Store, id: &str, plan: &str) -> Result<()> {
    sqlx::query("UPDATE batch_jobs SET plan = $1 WHERE id = $2")
        .bind(plan.to_string())
        .bind(id.to_string())
        .execute(store.pool())
        .await
        .map(|_| ())
}
