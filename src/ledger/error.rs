//! Why the ledger store failed, as data: which step (open, migrate, a statement, a column),
//! with the database's own error kept as the source. URLs in these messages never carry a
//! password: they are held as [`RedactedUrl`], which can only be made by redacting one.

use std::fmt;

/// A database URL with its password replaced by `***`, safe to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactedUrl(String);

impl RedactedUrl {
    /// `url` without its password (`postgres://u:***@h/db`); URLs without one are unchanged.
    pub fn of(url: &str) -> RedactedUrl {
        let redacted = match (url.find("://"), url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                let userinfo = &url[scheme + 3..at];
                match userinfo.find(':') {
                    Some(colon) => format!("{}{}:***{}", &url[..scheme + 3], &userinfo[..colon], &url[at..]),
                    None => url.to_string(),
                }
            }
            _ => url.to_string(),
        };
        RedactedUrl(redacted)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A failure of the ledger store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names neither SQLite nor PostgreSQL.
    #[error("ledger url must start with sqlite:// or postgres://, got {:?}", .url.as_str())]
    Scheme { url: RedactedUrl },
    #[error("ledger: cannot open {url}: {source}")]
    Open { url: RedactedUrl, source: sqlx::Error },
    #[error("ledger: cannot switch SQLite to WAL: {source}")]
    Wal { source: sqlx::Error },
    #[error("ledger: migrations failed on {url}: {source}")]
    Migrate { url: RedactedUrl, source: sqlx::migrate::MigrateError },
    /// A statement failed; `what` names it (`begin`, `insert`, `query node minutes`, …).
    #[error("ledger: {what}: {source}")]
    Statement { what: &'static str, source: sqlx::Error },
    /// A stored row has a column of the wrong type, or none.
    #[error("ledger: column {column}: {source}")]
    Column { column: String, source: sqlx::Error },
    /// A stored amount is not a decimal number.
    #[error("ledger: {column} {value:?}: {source}")]
    Decimal { column: String, value: String, source: rust_decimal::Error },
    #[error("ledger: unknown outcome {0:?}")]
    Outcome(String),
}

impl StoreError {
    /// A failed statement, for `map_err`.
    pub(crate) fn statement(what: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
        move |source| StoreError::Statement { what, source }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn urls_lose_their_password_only() {
        assert_eq!(RedactedUrl::of("postgres://u:secret@h:5432/db").as_str(), "postgres://u:***@h:5432/db");
        assert_eq!(RedactedUrl::of("postgres://u@h/db").as_str(), "postgres://u@h/db");
        assert_eq!(RedactedUrl::of("sqlite://a.db").as_str(), "sqlite://a.db");
    }

    #[test]
    fn messages_name_the_step_and_keep_the_source() {
        let open = StoreError::Open {
            url: RedactedUrl::of("postgres://u:secret@h/db"),
            source: sqlx::Error::PoolTimedOut,
        };
        let text = open.to_string();
        assert!(text.starts_with("ledger: cannot open postgres://u:***@h/db: "), "{text}");
        assert!(!text.contains("secret"), "{text}");
        assert!(open.source().is_some_and(|s| s.to_string() == sqlx::Error::PoolTimedOut.to_string()));

        let scheme = StoreError::Scheme { url: RedactedUrl::of("mysql://u:pw@h/db") };
        assert_eq!(
            scheme.to_string(),
            "ledger url must start with sqlite:// or postgres://, got \"mysql://u:***@h/db\""
        );
        assert!(scheme.source().is_none());

        let insert = StoreError::statement("insert")(sqlx::Error::RowNotFound);
        assert!(insert.to_string().starts_with("ledger: insert: "), "{insert}");
        assert!(insert.source().is_some());

        let bad = "x1".parse::<rust_decimal::Decimal>().unwrap_err();
        let decimal = StoreError::Decimal { column: "cost_usd".into(), value: "x1".into(), source: bad };
        assert!(decimal.to_string().starts_with("ledger: cost_usd \"x1\": "), "{decimal}");
        assert!(decimal.source().is_some());
        assert_eq!(StoreError::Outcome("odd".into()).to_string(), "ledger: unknown outcome \"odd\"");
    }
}
