//! Why a report could not be made, as data: what was asked for is not a report (these
//! messages go back to the CLI user and to `/admin/reports/cost` callers as they are), the
//! config or the ledger could not be read, or the report could not be written out.

use std::path::PathBuf;

use jiff::Timestamp;

use crate::config::Problem;
use crate::ledger::StoreError;

/// A failure of `spillway report` or `/admin/reports/cost`.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("format `{0}` is not one of table, csv, json, html")]
    Format(String),
    #[error("group-by `{0}` is not one of task, backend, key, team, priority")]
    GroupKey(String),
    #[error("group-by names `{0}` twice")]
    GroupKeyTwice(String),
    /// `what` (`from`, `to`) is `text`, which jiff could not turn into a time.
    #[error("{what} `{text}`: {source}")]
    Time { what: &'static str, text: String, source: jiff::Error },
    #[error("{what} `{text}`: an age is a number and a unit, e.g. -24h")]
    AgeNumber { what: &'static str, text: String, source: std::num::ParseIntError },
    #[error("{what} `{text}`: an age's unit is m, h or d")]
    AgeUnit { what: &'static str, text: String },
    #[error(
        "{what} `{text}`: expected now, today, a date (2026-11-29), an RFC 3339 time \
         (2026-11-29T10:00:00Z) or an age (-24h)"
    )]
    TimeForm { what: &'static str, text: String },
    /// 24 hours before `to` is out of range.
    #[error("from: {source}")]
    DefaultFrom { source: jiff::Error },
    #[error("from ({from}) must be before to ({to})")]
    Period { from: Timestamp, to: Timestamp },
    #[error("{} is not a valid config:\n{}", .path.display(), Problem::indented(.problems))]
    Config { path: PathBuf, problems: Vec<Problem> },
    /// The config's `ledger.url_env` names a variable that is not set (the config's message).
    #[error("{0}")]
    LedgerUrl(String),
    #[error("give --config (the router's config) or --ledger URL")]
    NoLedger,
    #[error(transparent)]
    Ledger(#[from] StoreError),
    /// The issued keys (for their budgets) could not be read.
    #[error(transparent)]
    Keys(#[from] crate::keys::KeyError),
    /// Writing the report out as `format` failed.
    #[error("cannot write the report as {format}: {source}")]
    Render { format: &'static str, source: Box<dyn std::error::Error + Send + Sync> },
}

impl ReportError {
    /// A failure writing the report as `format`, for `map_err`.
    pub(crate) fn render<E>(format: &'static str) -> impl Fn(E) -> ReportError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        move |source| ReportError::Render { format, source: Box::new(source) }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn messages_say_what_is_wrong_and_keep_the_source() {
        let age = "x".parse::<i64>().unwrap_err();
        let e = ReportError::AgeNumber { what: "from", text: "-xh".into(), source: age };
        assert_eq!(e.to_string(), "from `-xh`: an age is a number and a unit, e.g. -24h");
        assert!(e.source().is_some());

        let config = ReportError::Config {
            path: "router.yaml".into(),
            problems: vec![Problem::new("ledger.url", "bad"), Problem::new("", "worse")],
        };
        assert_eq!(config.to_string(), "router.yaml is not a valid config:\n  ledger.url: bad\n  worse");

        let csv = ReportError::render("csv")(std::io::Error::other("disk full"));
        assert_eq!(csv.to_string(), "cannot write the report as csv: disk full");
        assert_eq!(csv.source().map(|s| s.to_string()).as_deref(), Some("disk full"));

        let ledger = ReportError::from(StoreError::Outcome("odd".into()));
        assert_eq!(ledger.to_string(), "ledger: unknown outcome \"odd\"");
        assert_eq!(ReportError::NoLedger.to_string(), "give --config (the router's config) or --ledger URL");
    }
}
