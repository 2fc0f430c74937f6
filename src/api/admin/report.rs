//! `GET /admin/reports/cost`: the cost report of `spillway report`, over HTTP.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

use super::authorize;
use crate::api::{codes, ApiError, Ops};
use crate::report::{self, ReportFormat, ReportQuery};

/// `GET /admin/reports/cost?from=&to=&group_by=&format=`: the same report as `spillway report`.
pub async fn cost_report(
    State(state): State<Arc<Ops>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    match cost_report_inner(&state, &headers, &params).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn cost_report_inner(
    state: &Ops,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let who = authorize(state, headers)?;
    if let Some(unknown) = params.keys().find(|k| !["from", "to", "group_by", "format"].contains(&k.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "unknown parameter `{unknown}`; expected from, to, group_by, format"
        ))
        .param(unknown));
    }
    let format = match params.get("format") {
        Some(f) => {
            ReportFormat::parse(f).map_err(|e| ApiError::bad_request(e.to_string()).param("format"))?
        }
        None => ReportFormat::Json,
    };
    let query = ReportQuery::parse(
        params.get("from").map(String::as_str),
        params.get("to").map(String::as_str),
        params.get("group_by").map(String::as_str),
        format,
        jiff::Timestamp::now(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let Some((store, _)) = &state.ledger else {
        return Err(ApiError::new(codes::LEDGER_OFF, "the ledger is off (ledger.enabled: false)"));
    };
    let config = state.snapshot.load().config.clone();
    let body = report::generate(store, Some(&config), &query).await.map_err(|e| {
        tracing::error!("cost report failed: {e}");
        ApiError::new(codes::LEDGER_UNAVAILABLE, "the ledger could not be read; see the router's log")
    })?;
    tracing::info!(who = %who.0, from = query.from_ms, to = query.to_ms, "admin: cost report");
    Ok(([(header::CONTENT_TYPE, query.format.content_type())], body).into_response())
}
