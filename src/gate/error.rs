//! Why the gate could not run, judge or store something, as data. These messages reach the
//! operator as they are: on the CLI, in the admin API's error bodies, in quarantine reasons
//! and in the logs; the store's and the judge's own errors are kept as the source.

use std::path::PathBuf;

use crate::config::Problem;
use crate::dispatch::synthetic::SyntheticError;
use crate::ledger::StoreError;

/// A failure of a gate run, of grading, or of the gate's tables.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("no task named `{0}`")]
    NoTask(String),
    #[error("task `{0}` has no `gate` in the config")]
    NoGate(String),
    #[error("no backend named `{0}`")]
    NoBackend(String),
    #[error("`{backend}` is not one of task `{task}`'s backends")]
    NotTaskBackend { backend: String, task: String },
    #[error("backend `{0}` has no node to test")]
    NoNode(String),
    /// A `judge` grader in a task whose gate names no judge backend.
    #[error("judge: task `{0}` names no `gate.judge` backend")]
    NoJudge(String),
    #[error("judge `{judge}` may not see task `{task}`'s data: {why}")]
    JudgeRefused { judge: String, task: String, why: String },
    #[error("judge `{0}` has no node")]
    JudgeNoNode(String),
    #[error("judge: {}", .source.message())]
    JudgeCall { source: SyntheticError },
    #[error("judge: no 0–10 score in {0:?}")]
    JudgeScore(String),
    /// What is wrong with a golden set file, one problem per entry (each names the file).
    #[error("{}", .0.join("; "))]
    Golden(Vec<String>),
    #[error("{} is not a valid config:\n{}", .path.display(), Problem::indented(.problems))]
    Config { path: PathBuf, problems: Vec<Problem> },
    /// The config's `ledger.url_env` names a variable that is not set (the config's message).
    #[error("{0}")]
    LedgerUrl(String),
    #[error("the gate needs the ledger store: enable `ledger`")]
    NoStore,
    #[error(transparent)]
    Ledger(#[from] StoreError),
    /// A statement on the gate's tables failed; `what` names it (`insert result`, …).
    #[error("gate store: {what}: {source}")]
    Store { what: &'static str, source: sqlx::Error },
    #[error("gate store: {column}: {source}")]
    Column { column: String, source: sqlx::Error },
    #[error("gate store: bad decimal {value:?}: {source}")]
    Decimal { value: String, source: rust_decimal::Error },
    #[error("progress bar: {0}")]
    Progress(#[from] indicatif::style::TemplateError),
    #[error("node {0} is not quarantined for a pin change")]
    NotQuarantined(String),
    #[error("node {0} is gone")]
    NodeGone(String),
    #[error("no task with a gate uses this pool, so nothing can vouch for the change")]
    NoVouching,
    /// Tasks whose golden set failed on a node, each as `task <name>: <why>`.
    #[error("{}", .0.join("; "))]
    Failed(Vec<String>),
}

impl GateError {
    /// A failed statement on the gate's tables, for `map_err`.
    pub(crate) fn store(what: &'static str) -> impl Fn(sqlx::Error) -> GateError {
        move |source| GateError::Store { what, source }
    }

    /// A column of a stored row that could not be read, for `map_err`.
    pub(crate) fn column(column: &str) -> impl Fn(sqlx::Error) -> GateError + '_ {
        move |source| GateError::Column { column: column.to_string(), source }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn messages_say_what_is_wrong_and_keep_the_source() {
        let call = SyntheticError::Failed {
            class: crate::canonical::ErrorClass::Timeout,
            message: "no answer in 30s".into(),
        };
        let judge = GateError::JudgeCall { source: call };
        assert_eq!(judge.to_string(), "judge: no answer in 30s");
        assert_eq!(judge.source().map(|s| s.to_string()).as_deref(), Some("timeout: no answer in 30s"));

        let store = GateError::store("insert result")(sqlx::Error::PoolClosed);
        assert!(store.to_string().starts_with("gate store: insert result: "), "{store}");
        assert!(store.source().is_some());

        let column = GateError::column("passed")(sqlx::Error::RowNotFound);
        assert!(column.to_string().starts_with("gate store: passed: "), "{column}");

        let failed = GateError::Failed(vec!["task a: 0/3 passed".into(), "task b: 1/3 passed".into()]);
        assert_eq!(failed.to_string(), "task a: 0/3 passed; task b: 1/3 passed");
        assert!(failed.source().is_none());

        let refused =
            GateError::JudgeRefused { judge: "us".into(), task: "eu-only".into(), why: "region us".into() };
        assert_eq!(refused.to_string(), "judge `us` may not see task `eu-only`'s data: region us");
        assert_eq!(GateError::NoGate("t".into()).to_string(), "task `t` has no `gate` in the config");
    }
}
