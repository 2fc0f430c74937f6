//! The built-in TTFT and SLO dashboard: `/dashboard` serves one self-contained page (inline CSS
//! and JS, hand-drawn SVG, nothing fetched from elsewhere) that polls `/dashboard/data`, the
//! JSON [`data::build`] makes from the router's own Prometheus exposition and config.
//!
//! The page is for an operator with a browser and no Grafana at hand: per-task TTFT against the
//! SLO, attainment and error budget, per-node load and telemetry, local against hosted traffic,
//! spill reasons, provider availability, weights, breakers and quarantines.

pub mod data;

use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};

use crate::api::Ops;

/// The page, with its script and style inlined at the markers.
static PAGE: LazyLock<String> = LazyLock::new(|| {
    include_str!("page.html")
        .replace("/*STYLE*/", include_str!("page.css"))
        .replace("/*SCRIPT*/", include_str!("page.js"))
});

/// Only inline script and style, data from this origin, the `data:` favicon: a page that
/// tried to load anything else would be refused (and the browser test would see the error).
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// `GET /dashboard`: the page.
pub async fn page() -> Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(PAGE.as_str()),
    )
        .into_response()
}

/// `GET /dashboard/data`: what the page draws, as JSON (see [`data::build`]).
pub async fn data(State(state): State<Arc<Ops>>) -> Response {
    let text = crate::api::current_metrics(&state);
    let snapshot = state.snapshot.load();
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let jobs = match &state.ledger {
        Some((store, _)) => batch_jobs(store).await,
        None => Vec::new(),
    };
    let body = data::build(&text, &snapshot.config, now_ms, &jobs);
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
}

/// The batch jobs the page lists: the newest of either dialect, with their line counts and plan.
const JOBS_SHOWN: i64 = 10;

/// The newest batch jobs; none when the store cannot be read (the page shows the rest).
async fn batch_jobs(store: &crate::ledger::Store) -> Vec<data::BatchJob> {
    let jobs = match crate::batch::store::latest_jobs(store, JOBS_SHOWN).await {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: batch jobs not read");
            return Vec::new();
        }
    };
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        let counts = crate::batch::store::counts(store, &job.id).await.unwrap_or_default();
        out.push(data::BatchJob::new(&job, &counts));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_is_self_contained() {
        let page = PAGE.replace("http://www.w3.org/2000/svg", "");
        assert!(!page.contains("/*STYLE*/") && !page.contains("/*SCRIPT*/"));
        assert!(page.contains(r#"<link rel="icon" href="data:,">"#), "no favicon request");
        for external in ["http://", "https://", "//cdn", "@import", "url("] {
            assert!(!page.contains(external), "the page must fetch nothing: found {external}");
        }
        assert!(!page.contains("innerHTML"), "data goes into the DOM as text only");
    }
}
