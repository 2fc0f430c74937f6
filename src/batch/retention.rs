//! Batch data does not pile up in the ledger store: once a minute, uploaded files past their
//! `expires_at` are deleted, and so are jobs that ended more than `batch.file_retention_days`
//! ago, with their lines and their output and error files. What is due is [`Due`]'s rule
//! (pure); the deleting is `store`'s.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::store::{self, FileRow, JobRow};
use crate::ledger::Store;
use crate::snapshot::Snapshot;

const DAY_MS: i64 = 86_400_000;

/// How often the loop looks for what is due.
const EVERY: Duration = Duration::from_secs(60);

/// Most jobs deleted in one pass (the rest wait for the next).
const JOBS_PER_PASS: i64 = 500;

/// What is due for deletion at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// An uploaded file whose `expires_ms` is before this is due.
    pub files_expired_before: i64,
    /// A job that ended before this is due.
    pub jobs_ended_before: i64,
}

impl Due {
    /// What is due at `now_ms`, jobs being kept `retention_days` after they end.
    pub fn at(now_ms: i64, retention_days: u64) -> Due {
        let kept = i64::try_from(retention_days).unwrap_or(i64::MAX).saturating_mul(DAY_MS);
        Due { files_expired_before: now_ms, jobs_ended_before: now_ms.saturating_sub(kept) }
    }

    /// An uploaded file (not a job's output or error file: those go with their job).
    pub fn file(&self, file: &FileRow) -> bool {
        file.batch_id.is_none() && file.expires_ms.is_some_and(|at| at < self.files_expired_before)
    }

    /// A job that has ended, long enough ago.
    pub fn job(&self, job: &JobRow) -> bool {
        job.status.ended() && job.entered(job.status).unwrap_or(job.created_ms) < self.jobs_ended_before
    }
}

/// What one pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub files: u64,
    pub jobs: u64,
}

/// Delete what is `due`.
pub async fn sweep(store: &Store, due: Due) -> Result<Swept, sqlx::Error> {
    let files = store::delete_expired_files(store, due.files_expired_before).await?;
    let mut jobs = 0;
    for job in store::jobs_ended_before(store, due.jobs_ended_before, JOBS_PER_PASS).await? {
        if due.job(&job) {
            store::delete_job(store, &job.id).await?;
            jobs += 1;
        }
    }
    Ok(Swept { files, jobs })
}

/// Sweep once a minute until the task is dropped (the control loops' token).
pub async fn run(store: Store, snapshot: Arc<ArcSwap<Snapshot>>) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let now = crate::ledger::unix_millis(std::time::SystemTime::now());
        let due = Due::at(now, snapshot.load().config.batch.file_retention_days);
        match sweep(&store, due).await {
            Ok(Swept { files: 0, jobs: 0 }) => {}
            Ok(swept) => tracing::info!(files = swept.files, jobs = swept.jobs, "batch retention: deleted"),
            Err(e) => {
                tracing::warn!(error = %e, "batch retention: the store failed; trying again next minute")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::job::{Dialect, Status};

    fn job(status: Status, at_ms: Option<i64>) -> JobRow {
        let mut stamps = [None; 7];
        // `JobRow::at_ms` order: in_progress, finalizing, completed, failed, expired, cancelling, cancelled.
        let slot = match status {
            Status::Completed => Some(2),
            Status::Failed => Some(3),
            Status::Expired => Some(4),
            Status::Cancelled => Some(6),
            _ => None,
        };
        if let Some(slot) = slot {
            stamps[slot] = at_ms;
        }
        JobRow {
            id: "batch_x".into(),
            dialect: Dialect::OpenAi,
            endpoint: "/v1/chat/completions".into(),
            input_file_id: None,
            output_file_id: None,
            error_file_id: None,
            status,
            owner: None,
            metadata: None,
            errors: None,
            window_ms: DAY_MS,
            created_ms: 0,
            at_ms: stamps,
            total: 1,
            plan: None,
        }
    }

    fn file(expires_ms: Option<i64>, batch_id: Option<&str>) -> FileRow {
        FileRow {
            id: "file-x".into(),
            purpose: "batch".into(),
            filename: "in.jsonl".into(),
            bytes: 1,
            owner: None,
            created_ms: 0,
            expires_ms,
            batch_id: batch_id.map(str::to_string),
        }
    }

    #[test]
    fn a_job_is_due_retention_days_after_it_ended_and_not_before() {
        let now = 100 * DAY_MS;
        let due = Due::at(now, 30);
        assert_eq!(due.jobs_ended_before, 70 * DAY_MS);
        for status in [Status::Completed, Status::Failed, Status::Expired, Status::Cancelled] {
            assert!(due.job(&job(status, Some(70 * DAY_MS - 1))), "{status:?} ended 30 days and 1 ms ago");
            assert!(!due.job(&job(status, Some(70 * DAY_MS))), "{status:?} ended exactly 30 days ago");
        }
        for status in [Status::Validating, Status::InProgress, Status::Finalizing, Status::Cancelling] {
            assert!(!due.job(&job(status, None)), "{status:?} has not ended: never due, however old");
        }
        assert!(!Due::at(0, u64::MAX).job(&job(Status::Completed, Some(i64::MIN + 1))), "no overflow");
    }

    #[test]
    fn an_uploaded_file_is_due_once_it_expires_and_an_output_file_goes_with_its_job() {
        let due = Due::at(1_000, 30);
        assert!(due.file(&file(Some(999), None)));
        assert!(!due.file(&file(Some(1_000), None)));
        assert!(!due.file(&file(None, None)));
        assert!(!due.file(&file(Some(0), Some("batch_x"))), "a job's output file goes with its job");
    }
}
