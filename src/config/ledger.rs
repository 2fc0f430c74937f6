//! The `ledger:` section: where the cost ledger is kept and its local crash spool. Only what
//! the operator writes, its defaults and its checks; `ledger` keeps the rows.

use schemars::JsonSchema;
use serde::Deserialize;

use super::range::{self, Range, Says};
use super::{yes, Problem};

/// Where the cost ledger is kept.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LedgerConfig {
    /// Write one row per request and per node-minute (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `sqlite://path` (default `sqlite://spillway.db`) or `postgres://…` for many replicas.
    #[serde(default)]
    pub url: Option<String>,
    /// Or the name of an environment variable that holds the URL (when it carries a password).
    #[serde(default)]
    pub url_env: Option<String>,
    /// The local crash spool: rows are fsynced here before the store has them.
    #[serde(default)]
    pub spool: SpoolSettings,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig { enabled: true, url: None, url_env: None, spool: SpoolSettings::default() }
    }
}

/// The ledger's local crash spool (`ledger.spool`).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SpoolSettings {
    /// Spool each row to a local file, fsynced, before the store has it (default true).
    pub enabled: bool,
    /// The spool directory. Default: beside a SQLite ledger (`<file>.spool`); for PostgreSQL
    /// `spillway-spool-<hash of the URL>` in the temporary directory (`/tmp`, an emptyDir in the
    /// chart, which outlives a container restart).
    pub dir: Option<String>,
    /// Most bytes on disk (default 64 MiB); past it rows go on in memory only (an alert, never
    /// a blocked request).
    pub max_bytes: u64,
    /// At most one fsync per this many milliseconds (default 20) unless 256 rows wait.
    pub fsync_interval_ms: u64,
}

impl Default for SpoolSettings {
    fn default() -> Self {
        SpoolSettings { enabled: true, dir: None, max_bytes: 64 << 20, fsync_interval_ms: 20 }
    }
}

impl SpoolSettings {
    /// The spool directory for a ledger at `url`; `None` when the spool is off or the ledger
    /// is an in-memory SQLite database (nothing survives a crash there anyway).
    pub fn dir_for(&self, url: &str) -> Option<std::path::PathBuf> {
        if !self.enabled || url.contains(":memory:") {
            return None;
        }
        if let Some(dir) = &self.dir {
            return Some(dir.into());
        }
        match url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
            Some(path) => {
                let path = path.split('?').next().unwrap_or(path);
                Some(format!("{path}.spool").into())
            }
            None => {
                use sha2::{Digest, Sha256};
                let digest = Sha256::digest(url.as_bytes());
                let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
                Some(std::env::temp_dir().join(format!("spillway-spool-{hash}")))
            }
        }
    }
}

impl LedgerConfig {
    pub const DEFAULT_URL: &'static str = "sqlite://spillway.db";

    /// Where the ledger is: `url`, else the value of `url_env` read through `env`, else the
    /// default. `Err` names the unset variable.
    pub fn resolve_url(&self, env: impl Fn(&str) -> Option<String>) -> Result<String, String> {
        match (&self.url, &self.url_env) {
            (Some(url), _) => Ok(url.clone()),
            (None, Some(name)) => env(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("ledger.url_env: environment variable {name} is not set")),
            (None, None) => Ok(Self::DEFAULT_URL.to_string()),
        }
    }
}

impl LedgerConfig {
    /// The ranges of the section's numbers (keys below `ledger`).
    pub const RANGES: &'static [Range] = &[
        Range::at_least("spool.max_bytes", (1 << 20) as f64).says(Says::TooSmall).note(" (1 MiB)"),
        Range::between("spool.fsync_interval_ms", 1.0, 1_000.0).says(Says::OutOfRange),
    ];

    /// One way to give the URL, a URL the ledger can open, an env name, the spool's ranges.
    pub fn check(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.url.is_some() && self.url_env.is_some() {
            problems.push(Problem::new("ledger.url_env", "give url or url_env, not both"));
        }
        if let Some(url) = &self.url {
            let known = ["sqlite:", "postgres://", "postgresql://"];
            if !known.iter().any(|scheme| url.starts_with(scheme)) {
                problems.push(Problem::new(
                    "ledger.url",
                    format!("`{url}` must start with sqlite:// or postgres://"),
                ));
            }
        }
        let sp = &self.spool;
        let values = [
            ("spool.max_bytes", sp.max_bytes as f64),
            ("spool.fsync_interval_ms", sp.fsync_interval_ms as f64),
        ];
        problems.extend(range::check("ledger", Self::RANGES, &values));
        if sp.dir.as_deref().is_some_and(|d| d.trim().is_empty()) {
            problems
                .push(Problem::new("ledger.spool.dir", "must not be empty (leave it out for the default)"));
        }
        problems
            .extend(self.url_env.as_deref().and_then(|env| super::check::env_name("ledger.url_env", env)));
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::SpoolSettings;
    use std::path::PathBuf;

    #[test]
    fn the_spool_sits_beside_a_sqlite_ledger_unless_told() {
        let spool = SpoolSettings::default();
        assert_eq!(
            spool.dir_for("sqlite:///var/lib/s/l.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/s/l.db.spool"))
        );
        let pg = spool.dir_for("postgres://db/ledger").unwrap();
        assert!(pg.starts_with(std::env::temp_dir()), "{pg:?}");
        let name = pg.file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("spillway-spool-") && name.len() == 31, "{name}: no password in a path");
        assert_ne!(spool.dir_for("postgres://db/other"), Some(pg), "one spool per store");
        assert_eq!(spool.dir_for("sqlite::memory:"), None);
        let set = SpoolSettings { dir: Some("/spool".into()), ..spool.clone() };
        assert_eq!(set.dir_for("postgres://db/ledger"), Some(PathBuf::from("/spool")));
        let off = SpoolSettings { enabled: false, ..spool };
        assert_eq!(off.dir_for("sqlite://l.db"), None);
    }
}
