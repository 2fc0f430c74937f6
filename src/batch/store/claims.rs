//! A job's lines in the store: claimed a few at a time by one replica (a conditional update
//! with an expiry), ended with their result in one statement by the claim's holder, handed back
//! when there was no room, and read back in input order for the output.

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::Result;
use crate::batch::job::{Counts, LineState};
use crate::ledger::Store;

/// A line claimed to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub idx: i64,
    pub custom_id: String,
    pub request: String,
}

/// A line that has ended, as its job's results list it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub idx: i64,
    pub custom_id: String,
    pub state: LineState,
    pub status_code: Option<i64>,
    /// JSON text: the answer, or the error.
    pub result: Option<String>,
}

pub async fn counts(store: &Store, id: &str) -> Result<Counts> {
    let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM batch_lines WHERE batch_id = $1 GROUP BY state")
        .bind(id.to_string())
        .fetch_all(store.pool())
        .await?;
    let mut counts = Counts::default();
    for row in rows {
        let state: String = row.try_get("state")?;
        if let Some(state) = LineState::parse(&state) {
            counts.add(state, row.try_get::<i64, _>("n")? as u64);
        }
    }
    Ok(counts)
}

/// Claim up to `n` of a job's lines for `me` until `until_ms`: queued ones, or running ones
/// whose claim lapsed before `now_ms`.
pub async fn claim(
    store: &Store,
    id: &str,
    me: &str,
    n: usize,
    now_ms: i64,
    until_ms: i64,
) -> Result<Vec<Claimed>> {
    let rows = sqlx::query(
        "SELECT idx, custom_id, request FROM batch_lines WHERE batch_id = $1 \
         AND (state = 'queued' OR (state = 'running' AND claim_until_ms < $2)) ORDER BY idx LIMIT $3",
    )
    .bind(id.to_string())
    .bind(now_ms)
    .bind(n as i64)
    .fetch_all(store.pool())
    .await?;
    let candidates = rows.iter().map(claimed_of).collect::<Result<Vec<_>>>()?;
    take(store, id, candidates, me, until_ms, now_ms).await
}

/// Take each of `lines` for `me` until `until_ms` if it is still queued, or running under a
/// claim that lapsed before `lapsed_before`: a conditional update, so one replica gets each.
async fn take(
    store: &Store,
    id: &str,
    lines: Vec<Claimed>,
    me: &str,
    until_ms: i64,
    lapsed_before: i64,
) -> Result<Vec<Claimed>> {
    let mut claimed = Vec::new();
    for line in lines {
        let taken = sqlx::query(
            "UPDATE batch_lines SET state = 'running', claimed_by = $1, claim_until_ms = $2 \
             WHERE batch_id = $3 AND idx = $4 AND (state = 'queued' OR (state = 'running' AND claim_until_ms < $5))",
        )
        .bind(me.to_string())
        .bind(until_ms)
        .bind(id.to_string())
        .bind(line.idx)
        .bind(lapsed_before)
        .execute(store.pool())
        .await?;
        if taken.rows_affected() == 1 {
            claimed.push(line);
        }
    }
    Ok(claimed)
}

fn claimed_of(r: &AnyRow) -> Result<Claimed> {
    Ok(Claimed { idx: r.try_get("idx")?, custom_id: r.try_get("custom_id")?, request: r.try_get("request")? })
}

/// How a line ended: its state, its answer's status and body, and who served it.
#[derive(Debug, Clone, Copy)]
pub struct LineEnd<'a> {
    pub state: LineState,
    pub status_code: Option<i64>,
    /// JSON text: the answer, or the error.
    pub result: &'a str,
    pub backend: Option<&'a str>,
}

/// End a line `me` holds: its state and result in one statement. Whether it was still ours.
pub async fn finish(
    store: &Store,
    id: &str,
    idx: i64,
    me: &str,
    end: LineEnd<'_>,
    now_ms: i64,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE batch_lines SET state = $1, status_code = $2, result = $3, backend = $4, finished_ms = $5, \
         claim_until_ms = NULL WHERE batch_id = $6 AND idx = $7 AND state = 'running' AND claimed_by = $8",
    )
    .bind(end.state.as_str())
    .bind(end.status_code)
    .bind(end.result.to_string())
    .bind(end.backend.map(str::to_string))
    .bind(now_ms)
    .bind(id.to_string())
    .bind(idx)
    .bind(me.to_string())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Hand a line `me` holds back to the queue (no room for it after all).
pub async fn release(store: &Store, id: &str, idx: i64, me: &str) -> Result<()> {
    sqlx::query(
        "UPDATE batch_lines SET state = 'queued', claimed_by = NULL, claim_until_ms = NULL \
         WHERE batch_id = $1 AND idx = $2 AND state = 'running' AND claimed_by = $3",
    )
    .bind(id.to_string())
    .bind(idx)
    .bind(me.to_string())
    .execute(store.pool())
    .await
    .map(|_| ())
}

/// End every queued line of a job as `state` (`canceled`, `expired`), with `result`.
pub async fn end_queued(store: &Store, id: &str, state: LineState, result: &str, now_ms: i64) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE batch_lines SET state = $1, result = $2, finished_ms = $3 WHERE batch_id = $4 AND state = 'queued'",
    )
    .bind(state.as_str())
    .bind(result.to_string())
    .bind(now_ms)
    .bind(id.to_string())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected())
}

/// A job's ended lines in `states`, in input order.
pub async fn ended(store: &Store, id: &str, states: &[LineState]) -> Result<Vec<Ended>> {
    let wanted: Vec<String> = states.iter().map(|s| format!("'{}'", s.as_str())).collect();
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT idx, custom_id, state, status_code, result FROM batch_lines \
         WHERE batch_id = $1 AND state IN ({}) ORDER BY idx",
        wanted.join(", ")
    )))
    .bind(id.to_string())
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|r| {
            let state: String = r.try_get("state")?;
            Ok(Ended {
                idx: r.try_get("idx")?,
                custom_id: r.try_get("custom_id")?,
                state: LineState::parse(&state)
                    .ok_or_else(|| sqlx::Error::Decode(format!("unknown line state {state}").into()))?,
                status_code: r.try_get("status_code")?,
                result: r.try_get("result")?,
            })
        })
        .collect()
}

/// Up to `n` of a job's queued lines, without claiming them (to choose where they go).
pub async fn queued(store: &Store, id: &str, n: usize) -> Result<Vec<Claimed>> {
    let rows = sqlx::query(
        "SELECT idx, custom_id, request FROM batch_lines WHERE batch_id = $1 AND state = 'queued' ORDER BY idx LIMIT $2",
    )
    .bind(id.to_string())
    .bind(n as i64)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(claimed_of).collect()
}

/// Claim these queued lines for `me` until `until_ms`: those it got.
pub async fn claim_these(
    store: &Store,
    id: &str,
    lines: Vec<Claimed>,
    me: &str,
    until_ms: i64,
) -> Result<Vec<Claimed>> {
    take(store, id, lines, me, until_ms, i64::MIN).await
}

/// The lines `me` holds of a job.
pub async fn held(store: &Store, id: &str, me: &str) -> Result<Vec<Claimed>> {
    let rows = sqlx::query(
        "SELECT idx, custom_id, request FROM batch_lines WHERE batch_id = $1 AND state = 'running' AND claimed_by = $2 \
         ORDER BY idx",
    )
    .bind(id.to_string())
    .bind(me.to_string())
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(claimed_of).collect()
}

/// How many of a job's lines have ended since `since_ms`.
pub async fn finished_since(store: &Store, id: &str, since_ms: i64) -> Result<u64> {
    let row = sqlx::query("SELECT COUNT(*) AS n FROM batch_lines WHERE batch_id = $1 AND finished_ms >= $2")
        .bind(id.to_string())
        .bind(since_ms)
        .fetch_one(store.pool())
        .await?;
    Ok(row.try_get::<i64, _>("n")? as u64)
}

/// Renew the claim of every running line `holder` holds until `until_ms`, where it lasted
/// less (a renewal never shortens a claim): how many.
pub async fn renew(store: &Store, holder: &str, until_ms: i64) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE batch_lines SET claim_until_ms = $1 \
         WHERE state = 'running' AND claimed_by = $2 AND claim_until_ms < $1",
    )
    .bind(until_ms)
    .bind(holder.to_string())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected())
}

/// Who holds running lines.
pub async fn holders(store: &Store) -> Result<Vec<String>> {
    let rows = sqlx::query("SELECT DISTINCT claimed_by FROM batch_lines WHERE state = 'running'")
        .fetch_all(store.pool())
        .await?;
    let holders = rows.iter().map(|r| r.try_get::<Option<String>, _>("claimed_by"));
    Ok(holders.collect::<Result<Vec<_>>>()?.into_iter().flatten().collect())
}

/// Hand every running line `holder` holds back to the queue (its holder is gone): how many.
pub async fn release_all(store: &Store, holder: &str) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE batch_lines SET state = 'queued', claimed_by = NULL, claim_until_ms = NULL \
         WHERE state = 'running' AND claimed_by = $1",
    )
    .bind(holder.to_string())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected())
}
