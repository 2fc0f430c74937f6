//! `GET /admin/audit?limit=N`: the latest changes to the operator state (holds, forced
//! breakers, canary verdicts, gate verdicts, accepted pins), newest first: who, what, when,
//! the value before and after. From the ledger store, so every replica lists the same; without
//! a store, this replica's own changes since it started.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::authorize;
use crate::api::{codes, ApiError, Ops};

const LIMIT: usize = 100;
const LIMIT_MAX: usize = 1_000;

fn parse_limit(params: &HashMap<String, String>) -> Result<usize, ApiError> {
    super::count_param(params, "limit", LIMIT, LIMIT_MAX)
}

pub async fn list(
    State(state): State<Arc<Ops>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let answer = async {
        authorize(&state, &headers)?;
        let limit = parse_limit(&params)?;
        let changes = state.operator.audit(limit).await.map_err(|e| {
            tracing::error!("admin: the operator audit could not be read: {e}");
            ApiError::new(codes::LEDGER_UNAVAILABLE, "the ledger could not be read; see the router's log")
        })?;
        let shared = state.operator.status().shared;
        Ok::<_, ApiError>(json!({"shared": shared, "changes": changes}))
    };
    match answer.await {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_bounded_and_named_when_wrong() {
        let params =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(parse_limit(&params(&[])).unwrap(), LIMIT);
        assert_eq!(parse_limit(&params(&[("limit", "5")])).unwrap(), 5);
        for bad in ["0", "1001", "x"] {
            assert!(parse_limit(&params(&[("limit", bad)])).is_err(), "{bad}");
        }
        assert!(parse_limit(&params(&[("top", "5")])).is_err());
    }
}
