//! `GET /admin/spenders?top=N`: the dashboard's top spenders, the keys and teams that spent
//! most today and this month (UTC), behind the admin token (spend by key is finance's data,
//! not the open dashboard's). Fetches the month's ledger rows and the issued keys' names;
//! the figures are `report::spenders`, the cost report's own.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::authorize;
use crate::api::{codes, ApiError, Ops};
use crate::report::budgets::Directory;
use crate::report::spenders::{spenders, Period, Rows};

/// How many keys and teams each list holds unless `top` says otherwise, and at most.
const TOP: usize = 10;
const TOP_MAX: usize = 100;

pub(crate) async fn top_spenders(
    State(state): State<Arc<Ops>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    match inner(&state, &headers, &params).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

fn parse_top(params: &HashMap<String, String>) -> Result<usize, ApiError> {
    super::count_param(params, "top", TOP, TOP_MAX)
}

async fn inner(
    state: &Ops,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let who = authorize(state, headers)?;
    let top = parse_top(params)?;
    let Some((store, _)) = &state.ledger else {
        return Err(ApiError::new(codes::LEDGER_OFF, "the ledger is off (ledger.enabled: false)"));
    };
    let unavailable = |what: &str, e: &dyn std::fmt::Display| {
        tracing::error!("top spenders: {what}: {e}");
        ApiError::new(codes::LEDGER_UNAVAILABLE, "the ledger could not be read; see the router's log")
    };
    let now = jiff::Timestamp::now();
    let (from_ms, to_ms) = Period::Month.span(now);
    let records = store.query(from_ms, to_ms).await.map_err(|e| unavailable("requests", &e))?;
    let minutes = store.query_minutes(from_ms, to_ms).await.map_err(|e| unavailable("node minutes", &e))?;
    let keys = crate::keys::store::list(store).await.map_err(|e| unavailable("keys", &e))?;
    let config = state.snapshot.load().config.clone();
    let issued = keys.iter().map(|k| (k.key.id.to_string(), k.key.name.clone(), &k.limits));
    let dir = Directory::new(issued, &config.budgets);
    let rows = Rows { records: &records, minutes: &minutes, config: Some(&config) };
    let periods: Vec<_> = Period::ALL.into_iter().map(|p| spenders(p, now, &rows, &dir, top)).collect();
    tracing::debug!(who = %who.0, "admin: top spenders");
    let body = json!({"now_ms": now.as_millisecond(), "top": top, "periods": periods});
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn top_is_one_to_a_hundred() {
        assert_eq!(parse_top(&params(&[])).unwrap(), 10);
        assert_eq!(parse_top(&params(&[("top", "3")])).unwrap(), 3);
        for bad in ["0", "101", "-1", "ten"] {
            let e = parse_top(&params(&[("top", bad)])).unwrap_err();
            assert_eq!(e.message, format!("top `{bad}` must be a whole number from 1 to 100"));
            assert_eq!(e.param.as_deref(), Some("top"));
        }
        let unknown = parse_top(&params(&[("limit", "3")])).unwrap_err();
        assert_eq!(unknown.message, "unknown parameter `limit`; expected top");
    }
}
