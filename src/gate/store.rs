//! The gate's tables in the ledger store (SQLite or PostgreSQL, the ledger's migrations):
//! run results per (task, backend, fingerprint), pins accepted after a pass, and shadow
//! answers with their grades.

use std::str::FromStr;

use rust_decimal::Decimal;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::error::GateError;
use super::summary::Summary;
use crate::config::Pin;
use crate::ledger::Store;

/// One stored gate run.
#[derive(Debug, Clone, PartialEq)]
pub struct GateResult {
    pub id: String,
    pub task: String,
    pub backend: String,
    pub fingerprint: String,
    /// The node tested (a run after a pin change), else `None` (the backend as routed).
    pub node: Option<String>,
    /// `cli`, `admin` or `pin_change`.
    pub trigger: String,
    pub started_ms: i64,
    pub finished_ms: i64,
    pub summary: Summary,
}

/// One shadow answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowResult {
    pub id: String,
    pub at_ms: i64,
    pub task: String,
    pub request_id: String,
    pub primary_backend: String,
    pub backend: String,
    pub model: String,
    pub error_class: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub duration_ms: i64,
    pub cost: Option<Decimal>,
    pub primary_answer: Option<String>,
    pub answer: String,
    /// `pass` or `fail` once graded.
    pub verdict: Option<String>,
    pub why: Option<String>,
}

fn decimal(text: Option<String>) -> Result<Option<Decimal>, GateError> {
    text.map(|t| Decimal::from_str(&t).map_err(|source| GateError::Decimal { value: t, source })).transpose()
}

pub async fn insert_result(store: &Store, r: &GateResult) -> Result<(), GateError> {
    let s = &r.summary;
    sqlx::query(
        "INSERT INTO gate_results (id, task, backend, fingerprint, node, trigger_kind, started_ms, finished_ms, \
         items, passed_items, errors, p50_ms, p95_ms, cost_usd, passed, why) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
    )
    .bind(r.id.clone())
    .bind(r.task.clone())
    .bind(r.backend.clone())
    .bind(r.fingerprint.clone())
    .bind(r.node.clone())
    .bind(r.trigger.clone())
    .bind(r.started_ms)
    .bind(r.finished_ms)
    .bind(s.items as i64)
    .bind(s.passed_items as i64)
    .bind(s.errors as i64)
    .bind(s.p50_ms.map(|v| v as i64))
    .bind(s.p95_ms.map(|v| v as i64))
    .bind(s.cost.map(|c| c.to_string()))
    .bind(i64::from(s.passed))
    .bind(s.why.clone())
    .execute(store.pool())
    .await
    .map_err(GateError::store("insert result"))?;
    Ok(())
}

/// Every stored run, oldest first.
pub async fn results(store: &Store) -> Result<Vec<GateResult>, GateError> {
    let rows = sqlx::query(
        "SELECT id, task, backend, fingerprint, node, trigger_kind, started_ms, finished_ms, items, passed_items, \
         errors, p50_ms, p95_ms, cost_usd, passed, why FROM gate_results ORDER BY finished_ms, id",
    )
    .fetch_all(store.pool())
    .await
    .map_err(GateError::store("query results"))?;
    rows.iter().map(row_to_result).collect()
}

fn row_to_result(row: &AnyRow) -> Result<GateResult, GateError> {
    let get_i64 = |c: &str| row.try_get::<i64, _>(c).map_err(GateError::column(c));
    let get_opt = |c: &str| row.try_get::<Option<i64>, _>(c).map_err(GateError::column(c));
    let get_str = |c: &str| row.try_get::<String, _>(c).map_err(GateError::column(c));
    Ok(GateResult {
        id: get_str("id")?,
        task: get_str("task")?,
        backend: get_str("backend")?,
        fingerprint: get_str("fingerprint")?,
        node: row.try_get::<Option<String>, _>("node").map_err(GateError::column("node"))?,
        trigger: get_str("trigger_kind")?,
        started_ms: get_i64("started_ms")?,
        finished_ms: get_i64("finished_ms")?,
        summary: Summary {
            items: get_i64("items")? as u64,
            passed_items: get_i64("passed_items")? as u64,
            errors: get_i64("errors")? as u64,
            p50_ms: get_opt("p50_ms")?.map(|v| v as u64),
            p95_ms: get_opt("p95_ms")?.map(|v| v as u64),
            cost: decimal(row.try_get("cost_usd").map_err(GateError::column("cost_usd"))?)?,
            passed: get_i64("passed")? != 0,
            why: get_str("why")?,
        },
    })
}

/// Record that `backend` now runs under `pin` (its fingerprint passed the gate).
pub async fn accept_pin(
    store: &Store,
    backend: &str,
    fingerprint: &str,
    pin: &Pin,
    at_ms: i64,
) -> Result<(), GateError> {
    sqlx::query(
        "INSERT INTO gate_pins (backend, fingerprint, weights, quantization, engine, accepted_ms) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (backend, fingerprint) DO UPDATE SET accepted_ms = excluded.accepted_ms",
    )
    .bind(backend.to_string())
    .bind(fingerprint.to_string())
    .bind(pin.weights.clone())
    .bind(pin.quantization.clone())
    .bind(pin.engine.clone())
    .bind(at_ms)
    .execute(store.pool())
    .await
    .map_err(GateError::store("accept pin"))?;
    Ok(())
}

/// Accepted pins by backend, oldest first: `(backend, pin)`.
pub async fn accepted_pins(store: &Store) -> Result<Vec<(String, Pin)>, GateError> {
    let rows = sqlx::query(
        "SELECT backend, weights, quantization, engine FROM gate_pins ORDER BY accepted_ms, fingerprint",
    )
    .fetch_all(store.pool())
    .await
    .map_err(GateError::store("query pins"))?;
    rows.iter()
        .map(|row| {
            let opt = |c: &str| row.try_get::<Option<String>, _>(c).map_err(GateError::column(c));
            let backend = row.try_get::<String, _>("backend").map_err(GateError::column("backend"))?;
            Ok((
                backend,
                Pin { weights: opt("weights")?, quantization: opt("quantization")?, engine: opt("engine")? },
            ))
        })
        .collect()
}

pub async fn insert_shadow(store: &Store, r: &ShadowResult) -> Result<(), GateError> {
    sqlx::query(
        "INSERT INTO shadow_results (id, at_ms, task, request_id, primary_backend, backend, model, error_class, \
         input_tokens, output_tokens, duration_ms, cost_usd, primary_answer, answer, verdict, why) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
    )
    .bind(r.id.clone())
    .bind(r.at_ms)
    .bind(r.task.clone())
    .bind(r.request_id.clone())
    .bind(r.primary_backend.clone())
    .bind(r.backend.clone())
    .bind(r.model.clone())
    .bind(r.error_class.clone())
    .bind(r.input_tokens)
    .bind(r.output_tokens)
    .bind(r.duration_ms)
    .bind(r.cost.map(|c| c.to_string()))
    .bind(r.primary_answer.clone())
    .bind(r.answer.clone())
    .bind(r.verdict.clone())
    .bind(r.why.clone())
    .execute(store.pool())
    .await
    .map_err(GateError::store("insert shadow"))?;
    Ok(())
}

/// Shadow answers, oldest first; `ungraded_only`: those still waiting for a grade.
pub async fn shadows(store: &Store, ungraded_only: bool) -> Result<Vec<ShadowResult>, GateError> {
    let filter = if ungraded_only { "WHERE verdict IS NULL AND error_class IS NULL" } else { "" };
    let sql = format!(
        "SELECT id, at_ms, task, request_id, primary_backend, backend, model, error_class, input_tokens, \
         output_tokens, duration_ms, cost_usd, primary_answer, answer, verdict, why FROM shadow_results {filter} \
         ORDER BY at_ms, id"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(store.pool())
        .await
        .map_err(GateError::store("query shadows"))?;
    rows.iter()
        .map(|row| {
            let s = |c: &str| row.try_get::<String, _>(c).map_err(GateError::column(c));
            let o = |c: &str| row.try_get::<Option<String>, _>(c).map_err(GateError::column(c));
            let i = |c: &str| row.try_get::<i64, _>(c).map_err(GateError::column(c));
            Ok(ShadowResult {
                id: s("id")?,
                at_ms: i("at_ms")?,
                task: s("task")?,
                request_id: s("request_id")?,
                primary_backend: s("primary_backend")?,
                backend: s("backend")?,
                model: s("model")?,
                error_class: o("error_class")?,
                input_tokens: i("input_tokens")?,
                output_tokens: i("output_tokens")?,
                duration_ms: i("duration_ms")?,
                cost: decimal(o("cost_usd")?)?,
                primary_answer: o("primary_answer")?,
                answer: s("answer")?,
                verdict: o("verdict")?,
                why: o("why")?,
            })
        })
        .collect()
}

/// Store the grade of one shadow answer.
pub async fn grade_shadow(
    store: &Store,
    id: &str,
    verdict: &str,
    why: Option<&str>,
) -> Result<(), GateError> {
    sqlx::query("UPDATE shadow_results SET verdict = $1, why = $2 WHERE id = $3")
        .bind(verdict.to_string())
        .bind(why.map(str::to_string))
        .bind(id.to_string())
        .execute(store.pool())
        .await
        .map_err(GateError::store("grade shadow"))?;
    Ok(())
}
