//! `spillway report` and `/admin/reports/cost`: what each task cost, per request and per
//! million tokens, on our GPUs (busy and idle hours shared out) and on each hosted API, and at
//! what utilisation self-hosting breaks even.
//!
//! `query` parses what is asked, `group` keys each row by task, backend, client key and team,
//! `allocate` shares GPU cost out (pure), `build`, `economics` and `utilisation` make the
//! report's figures (pure), `render` and `html` format them, and `spenders` ranks keys and teams
//! by the same figures for the dashboard, and `budgets` sets key and team spend against their
//! budgets. This module only fetches rows. Every failure is a
//! [`ReportError`].

pub mod allocate;
pub mod budgets;
pub mod build;
pub mod economics;
mod error;
mod figures;
pub mod group;
mod html;
pub mod query;
mod render;
pub mod spenders;
pub mod utilisation;

use std::path::PathBuf;

pub use build::{build, Report};
pub use error::ReportError;
pub use query::{GroupKey, ReportFormat, ReportQuery};

use crate::config::Config;
use crate::ledger::Store;

/// `spillway report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// The router config: where the ledger is (`ledger.url`) and the hosted prices that
    /// break-even is measured against.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The ledger to read, overriding the config's (`sqlite://spillway.db`, `postgres://…`).
    #[arg(long)]
    pub ledger: Option<String>,
    /// Start: now, today, 2026-11-29, 2026-11-29T10:00:00Z or an age like -24h (default: 24
    /// hours before --to).
    #[arg(long, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// End (exclusive), same forms (default: now).
    #[arg(long, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Comma-separated, in any order, each once: task, backend, key (the client key's name),
    /// team (an issued key's team); e.g. `task,backend`, `key,team`, `team`.
    #[arg(long, default_value = "task")]
    pub group_by: String,
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
}

/// Fetch the period's rows and render the report.
pub async fn generate(
    store: &Store,
    config: Option<&Config>,
    query: &ReportQuery,
) -> Result<String, ReportError> {
    let records = store.query(query.from_ms, query.to_ms).await?;
    let minutes = store.query_minutes(query.from_ms, query.to_ms).await?;
    let mut report = build(query, &records, &minutes, config);
    if query.group_by.iter().any(|g| matches!(g, GroupKey::Key | GroupKey::Team)) {
        let keys = crate::keys::store::list(store).await?;
        let issued = keys.iter().map(|k| (k.key.id.to_string(), k.key.name.clone(), &k.limits));
        let dir = budgets::Directory::new(issued, &config.map(|c| c.budgets.clone()).unwrap_or_default());
        report.budgets = budgets::budget_use(&report, query.from_ms, query.to_ms, &dir);
    }
    render(&report, query.format)
}

/// Format a built report.
pub fn render(report: &Report, format: ReportFormat) -> Result<String, ReportError> {
    match format {
        ReportFormat::Table => Ok(render::table(report)),
        ReportFormat::Csv => render::csv(report),
        ReportFormat::Json => serde_json::to_string_pretty(report).map_err(ReportError::render("json")),
        ReportFormat::Html => Ok(html::page(report)),
    }
}

/// The CLI command: parse, open the ledger, print the report.
pub async fn run(args: ReportArgs) -> Result<String, ReportError> {
    let query = ReportQuery::parse(
        args.from.as_deref(),
        args.to.as_deref(),
        Some(&args.group_by),
        args.format,
        jiff::Timestamp::now(),
    )?;
    let config = match &args.config {
        Some(path) => Some(
            crate::config::load_file(path)
                .map_err(|problems| ReportError::Config { path: path.clone(), problems })?,
        ),
        None => None,
    };
    let url = match (&args.ledger, &config) {
        (Some(url), _) => url.clone(),
        (None, Some(c)) => {
            c.ledger.resolve_url(|name| std::env::var(name).ok()).map_err(ReportError::LedgerUrl)?
        }
        (None, None) => return Err(ReportError::NoLedger),
    };
    let store = Store::open(&url).await?;
    let out = generate(&store, config.as_ref(), &query).await;
    store.close().await;
    out
}
