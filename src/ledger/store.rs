//! Where ledger rows live: SQLite (`sqlite://path`, the default, created if missing, WAL mode)
//! or PostgreSQL (`postgres://…`, one table shared by many router replicas).
//!
//! Both go through sqlx's `Any` driver with one set of portable SQL statements and one set of
//! migrations, run when the store opens. Inserts are idempotent on the record id, so a batch
//! retried after an ambiguous failure (commit sent, answer lost) is never counted twice. This
//! module must not retry, buffer or price anything: the writer owns retries.

use std::str::FromStr;
use std::time::Duration;

use rust_decimal::Decimal;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, Row};

use super::error::{RedactedUrl, StoreError};
use super::record::{LedgerRecord, LedgerRow, Outcome};
use super::usage::{NodeMinute, Occupancy};

/// Columns in insert order; `row_to_record` reads them by name.
const COLUMNS: [&str; 20] = [
    "id",
    "at_ms",
    "task",
    "client_key",
    "affinity_hash",
    "backend",
    "model",
    "node",
    "attempts",
    "outcome",
    "error_class",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "ttft_ms",
    "duration_ms",
    "cost_usd",
    "cache_write_tokens",
    "team",
    "priority",
];

/// Rows per `INSERT` statement: 20 × 50 = 1000 bind parameters, far below both databases' limits.
const ROWS_PER_STATEMENT: usize = 50;

/// One node-minute; another replica's row for it merges: `busy` is ORed and the occupancy of
/// the row that watched more capacity time wins (`Occupancy::merge`). SET expressions read the
/// stored row as it was, on both databases.
const MINUTE_UPSERT: &str = "INSERT INTO node_minutes \
     (node, minute_ms, backend, gpu_count, gpu_hourly_usd, busy, running_seq_ms, capacity_seq_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (node, minute_ms) DO UPDATE SET \
     busy = CASE WHEN excluded.busy > node_minutes.busy THEN excluded.busy ELSE node_minutes.busy END, \
     running_seq_ms = CASE WHEN node_minutes.capacity_seq_ms IS NULL \
         OR excluded.capacity_seq_ms > node_minutes.capacity_seq_ms \
         THEN excluded.running_seq_ms ELSE node_minutes.running_seq_ms END, \
     capacity_seq_ms = CASE WHEN node_minutes.capacity_seq_ms IS NULL \
         OR excluded.capacity_seq_ms > node_minutes.capacity_seq_ms \
         THEN excluded.capacity_seq_ms ELSE node_minutes.capacity_seq_ms END";

/// Per SQLite connection: wait up to 2 s for another writer's lock before a write fails, and
/// sync at checkpoints only (safe with WAL).
const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout = 2000; PRAGMA synchronous = NORMAL;";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// A connection pool to the ledger table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    kind: StoreKind,
}

impl Store {
    /// Connect to `sqlite://path` or `postgres://…` (also `postgresql://`), create the SQLite
    /// file if it is missing, and run the migrations.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let (kind, url) = if url.starts_with("sqlite:") {
            (StoreKind::Sqlite, sqlite_url(url))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (StoreKind::Postgres, url.to_string())
        } else {
            return Err(StoreError::Scheme { url: RedactedUrl::of(url) });
        };
        let options = AnyPoolOptions::new()
            .max_connections(if kind == StoreKind::Sqlite { 2 } else { 4 })
            .acquire_timeout(Duration::from_secs(5));
        let options = if kind == StoreKind::Sqlite {
            options.after_connect(|conn, _| {
                Box::pin(async move { sqlx::raw_sql(SQLITE_PRAGMAS).execute(conn).await.map(|_| ()) })
            })
        } else {
            options
        };
        let pool = options
            .connect(&url)
            .await
            .map_err(|source| StoreError::Open { url: RedactedUrl::of(&url), source })?;
        if kind == StoreKind::Sqlite {
            // Persistent in the file: readers (reports) never block the writer.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await
                .map_err(|source| StoreError::Wal { source })?;
        }
        sqlx::migrate!("src/ledger/migrations")
            .run(&pool)
            .await
            .map_err(|source| StoreError::Migrate { url: RedactedUrl::of(&url), source })?;
        Ok(Store { pool, kind })
    }

    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// The connection pool, for the other tables kept in this store (the gate's).
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Insert every record in one transaction: all of them or none. Records whose id is
    /// already stored are skipped, so retrying a batch is safe.
    pub async fn insert_batch(&self, records: &[LedgerRecord]) -> Result<(), StoreError> {
        self.insert(records.iter().collect(), Vec::new()).await
    }

    /// Insert requests and node-minutes in one transaction: all of them or none. Retrying a
    /// batch is safe: request ids are skipped when stored, node-minutes merge (busy is ORed).
    pub async fn insert_rows(&self, rows: &[LedgerRow]) -> Result<(), StoreError> {
        let mut records = Vec::new();
        let mut minutes = Vec::new();
        for row in rows {
            match row {
                LedgerRow::Request(r) => records.push(r),
                LedgerRow::NodeMinute(m) => minutes.push(m),
            }
        }
        self.insert(records, minutes).await
    }

    async fn insert(&self, records: Vec<&LedgerRecord>, minutes: Vec<&NodeMinute>) -> Result<(), StoreError> {
        if records.is_empty() && minutes.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(StoreError::statement("begin"))?;
        for m in minutes {
            sqlx::query(MINUTE_UPSERT)
                .bind(m.node.clone())
                .bind(m.minute_ms)
                .bind(m.backend.clone())
                .bind(m.gpu_count)
                .bind(m.gpu_hourly_usd.map(|p| p.to_string()))
                .bind(i64::from(m.busy))
                .bind(m.occupancy.map(|o| o.running_seq_ms))
                .bind(m.occupancy.map(|o| o.capacity_seq_ms))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::statement("insert node minute"))?;
        }
        for chunk in records.chunks(ROWS_PER_STATEMENT) {
            let sql = insert_sql(chunk.len(), self.kind);
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for r in chunk {
                q = q
                    .bind(r.id.clone())
                    .bind(r.at_ms)
                    .bind(r.task.clone())
                    .bind(r.client_key.clone())
                    .bind(r.affinity_hash.clone())
                    .bind(r.backend.clone())
                    .bind(r.model.clone())
                    .bind(r.node.clone())
                    .bind(r.attempts)
                    .bind(r.outcome.as_str())
                    .bind(r.error_class.clone())
                    .bind(r.input_tokens)
                    .bind(r.cached_input_tokens)
                    .bind(r.output_tokens)
                    .bind(r.ttft_ms)
                    .bind(r.duration_ms)
                    .bind(r.cost_usd.map(|c| c.to_string()))
                    .bind(r.cache_write_tokens)
                    .bind(r.team.clone())
                    .bind(r.priority.map(|p| p.as_str()));
            }
            q.execute(&mut *tx).await.map_err(StoreError::statement("insert"))?;
        }
        tx.commit().await.map_err(StoreError::statement("commit"))
    }

    /// Records that arrived in `[from_ms, to_ms)` (unix milliseconds), oldest first.
    pub async fn query(&self, from_ms: i64, to_ms: i64) -> Result<Vec<LedgerRecord>, StoreError> {
        let sql = format!(
            "SELECT {} FROM ledger_records WHERE at_ms >= $1 AND at_ms < $2 ORDER BY at_ms, id",
            COLUMNS.join(", ")
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(from_ms)
            .bind(to_ms)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::statement("query"))?;
        rows.iter().map(row_to_record).collect()
    }

    /// Node-minutes that start in `[from_ms, to_ms)`, oldest first.
    pub async fn query_minutes(&self, from_ms: i64, to_ms: i64) -> Result<Vec<NodeMinute>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, minute_ms, backend, gpu_count, gpu_hourly_usd, busy, running_seq_ms, capacity_seq_ms \
             FROM node_minutes \
             WHERE minute_ms >= $1 AND minute_ms < $2 ORDER BY minute_ms, node",
        )
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::statement("query node minutes"))?;
        rows.iter().map(row_to_minute).collect()
    }

    /// Close the pool, waiting for connections in use to come back.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// `sqlite://path` with `mode=rwc` (create if missing) unless a mode is given.
fn sqlite_url(url: &str) -> String {
    if url.contains("mode=") || url.contains(":memory:") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

/// The insert of `rows` records. SQLite gets anonymous `?` parameters: it looks a named one
/// up in a list for each bind, which makes binding a 1,000-parameter statement quadratic.
fn insert_sql(rows: usize, kind: StoreKind) -> String {
    let n = COLUMNS.len();
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let params: Vec<String> = match kind {
                StoreKind::Sqlite => vec!["?".to_string(); n],
                StoreKind::Postgres => (1..=n).map(|c| format!("${}", r * n + c)).collect(),
            };
            format!("({})", params.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO ledger_records ({}) VALUES {} ON CONFLICT (id) DO NOTHING",
        COLUMNS.join(", "),
        values.join(", ")
    )
}

fn decimal(col: &str, value: Option<String>) -> Result<Option<Decimal>, StoreError> {
    value
        .map(|s| {
            Decimal::from_str(&s).map_err(|source| StoreError::Decimal {
                column: col.to_string(),
                value: s,
                source,
            })
        })
        .transpose()
}

fn bad(column: &str, source: sqlx::Error) -> StoreError {
    StoreError::Column { column: column.to_string(), source }
}

fn row_to_minute(row: &AnyRow) -> Result<NodeMinute, StoreError> {
    let text = |col: &str| row.try_get::<String, _>(col).map_err(|e| bad(col, e));
    let int = |col: &str| row.try_get::<i64, _>(col).map_err(|e| bad(col, e));
    let opt_int = |col: &str| row.try_get::<Option<i64>, _>(col).map_err(|e| bad(col, e));
    let price = row.try_get::<Option<String>, _>("gpu_hourly_usd").map_err(|e| bad("gpu_hourly_usd", e))?;
    // Rows written before the occupancy columns existed have neither.
    let occupancy = match (opt_int("running_seq_ms")?, opt_int("capacity_seq_ms")?) {
        (Some(running_seq_ms), Some(capacity_seq_ms)) => Some(Occupancy { running_seq_ms, capacity_seq_ms }),
        _ => None,
    };
    Ok(NodeMinute {
        minute_ms: int("minute_ms")?,
        backend: text("backend")?,
        node: text("node")?,
        gpu_count: int("gpu_count")?,
        gpu_hourly_usd: decimal("gpu_hourly_usd", price)?,
        busy: int("busy")? != 0,
        occupancy,
    })
}

fn row_to_record(row: &AnyRow) -> Result<LedgerRecord, StoreError> {
    let text = |col: &str| row.try_get::<String, _>(col).map_err(|e| bad(col, e));
    let opt_text = |col: &str| row.try_get::<Option<String>, _>(col).map_err(|e| bad(col, e));
    let int = |col: &str| row.try_get::<i64, _>(col).map_err(|e| bad(col, e));
    let outcome = text("outcome")?;
    let cost_usd = decimal("cost_usd", opt_text("cost_usd")?)?;
    Ok(LedgerRecord {
        id: text("id")?,
        at_ms: int("at_ms")?,
        task: text("task")?,
        client_key: opt_text("client_key")?,
        team: opt_text("team")?,
        priority: opt_text("priority")?.as_deref().and_then(crate::config::Priority::parse),
        affinity_hash: opt_text("affinity_hash")?,
        backend: text("backend")?,
        model: text("model")?,
        node: text("node")?,
        attempts: int("attempts")?,
        outcome: Outcome::parse(&outcome).ok_or_else(|| StoreError::Outcome(outcome.clone()))?,
        error_class: opt_text("error_class")?,
        input_tokens: int("input_tokens")?,
        cached_input_tokens: int("cached_input_tokens")?,
        cache_write_tokens: int("cache_write_tokens")?,
        output_tokens: int("output_tokens")?,
        ttft_ms: row.try_get::<Option<i64>, _>("ttft_ms").map_err(|e| bad("ttft_ms", e))?,
        duration_ms: int("duration_ms")?,
        cost_usd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(sqlite_url("sqlite://spillway.db"), "sqlite://spillway.db?mode=rwc");
        assert_eq!(sqlite_url("sqlite://a.db?mode=ro"), "sqlite://a.db?mode=ro");
    }

    #[test]
    fn insert_sql_numbers_parameters_per_row_for_postgres_and_leaves_them_anonymous_for_sqlite() {
        let sql = insert_sql(2, StoreKind::Postgres);
        assert!(sql.contains("($1, $2,"));
        assert!(sql.contains("$20), ($21, $22,"));
        assert!(sql.ends_with("$40) ON CONFLICT (id) DO NOTHING"));
        let sql = insert_sql(2, StoreKind::Sqlite);
        assert_eq!(sql.matches('?').count(), 40);
        assert!(!sql.contains('$'));
        assert!(sql.ends_with("?) ON CONFLICT (id) DO NOTHING"));
    }
}
