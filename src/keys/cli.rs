//! `spillway keys create|list|revoke|rotate`: manage issued client keys in the ledger store
//! the config names (or `--ledger`), the same table every router replica reads. `create` and
//! `rotate` print the key once, alone on the first line of stdout; `list` never prints a
//! secret or a hash. A running router sees a change within `issued_keys.refresh_ms`.

use std::fmt::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::new::NewKey;
use super::{store, KeyError, Listing, StoredKey};
use crate::canonical::KeyId;
use crate::config::Config;
use crate::ledger::{unix_millis, Store};

#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,
    /// The router config (its ledger store and tasks).
    #[arg(long, short, global = true)]
    pub config: Option<PathBuf>,
    /// The ledger store, overriding the config's.
    #[arg(long, global = true)]
    pub ledger: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Issue a key; it is printed once, on the first line.
    Create {
        #[arg(long)]
        name: String,
        /// The owner its spend is counted to.
        #[arg(long)]
        team: String,
        /// A task it may use (repeatable); none: every task open to all keys.
        #[arg(long = "task")]
        tasks: Vec<String>,
        /// How long it lives: 90d, 12h, 30m, 45s; default: until revoked.
        #[arg(long)]
        expires_in: Option<String>,
        /// Requests per minute.
        #[arg(long)]
        rpm: Option<u64>,
        /// Tokens per minute (prompt estimate plus max_tokens, corrected to usage).
        #[arg(long)]
        tpm: Option<u64>,
        /// Requests in flight at once.
        #[arg(long)]
        concurrent: Option<u64>,
        /// US dollars per UTC day, an exact decimal such as 5 or 2.50.
        #[arg(long)]
        usd_per_day: Option<rust_decimal::Decimal>,
        /// US dollars per UTC month.
        #[arg(long)]
        usd_per_month: Option<rust_decimal::Decimal>,
    },
    /// Every issued key with its status (never a secret).
    List,
    /// Refuse a key from now on.
    Revoke { id: String },
    /// Give a key a new secret (printed once); the old one is refused.
    Rotate { id: String },
}

/// Why the command failed, as one line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--config is required (the router config whose ledger store holds the keys)")]
    NoConfig,
    #[error("{path}: not a valid config:\n{problems}")]
    Config { path: String, problems: String },
    #[error("the ledger is off in this config (ledger.enabled: false): issued keys live in its store")]
    LedgerOff,
    #[error("{0}")]
    LedgerUrl(String),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Store(#[from] crate::ledger::StoreError),
}

pub async fn run(args: KeysArgs) -> Result<String, CliError> {
    let path = args.config.ok_or(CliError::NoConfig)?;
    let config = crate::config::load_file(&path).map_err(|problems| CliError::Config {
        path: path.display().to_string(),
        problems: crate::config::Problem::indented(&problems),
    })?;
    let url = match args.ledger {
        Some(url) => url,
        None if !config.ledger.enabled => return Err(CliError::LedgerOff),
        None => config.ledger.resolve_url(|n| std::env::var(n).ok()).map_err(CliError::LedgerUrl)?,
    };
    let db = Store::open(&url).await?;
    let out = command(&config, &db, args.command).await;
    db.close().await;
    out
}

async fn command(config: &Config, db: &Store, command: KeysCommand) -> Result<String, CliError> {
    let now = unix_millis(std::time::SystemTime::now());
    Ok(match command {
        KeysCommand::Create {
            name,
            team,
            tasks,
            expires_in,
            rpm,
            tpm,
            concurrent,
            usd_per_day,
            usd_per_month,
        } => {
            let limits = crate::config::KeyLimits { rpm, tpm, concurrent, usd_per_day, usd_per_month };
            let new = NewKey::check(config, &name, &team, &tasks, expires_in.as_deref(), limits)
                .map_err(KeyError::from)?;
            let (row, text) = store::create(db, &new, now).await?;
            shown_once(&text, &row, now)
        }
        KeysCommand::List => table(&store::list(db).await?, now),
        KeysCommand::Revoke { id } => {
            let row = store::revoke(db, &key_id(&id)?, now).await?;
            format!("revoked {} ({}, team {})\n", row.key.id, row.key.name, row.key.team)
        }
        KeysCommand::Rotate { id } => {
            let (row, text) = store::rotate(db, &key_id(&id)?, now).await?;
            shown_once(&text, &row, now)
        }
    })
}

fn key_id(text: &str) -> Result<KeyId, KeyError> {
    KeyId::parse(text.trim()).ok_or_else(|| KeyError::NotFound(text.to_string()))
}

/// The key alone on the first line (for scripts), then what it is.
fn shown_once(text: &str, row: &StoredKey, now_ms: i64) -> String {
    let mut out = format!("{text}\n");
    out.push_str(&table(std::slice::from_ref(row), now_ms));
    out.push_str("This key is shown once: store it now.\n");
    out
}

/// One line per key: id, name, team, status, tasks, times, limits given at creation.
pub fn table(rows: &[StoredKey], now_ms: i64) -> String {
    let mut out = String::from("id            name                 team             status   tasks                created_at            expires_at            limits\n");
    for row in rows {
        let l = Listing::of(row, now_ms);
        let tasks = if l.tasks.is_empty() { "*".to_string() } else { l.tasks.join(",") };
        let _ = writeln!(
            out,
            "{:<13} {:<20} {:<16} {:<8} {:<20} {:<21} {:<21} {}",
            l.id,
            l.name,
            l.team,
            l.status.as_str(),
            tasks,
            l.created_at,
            l.expires_at.as_deref().unwrap_or("-"),
            limits(&l.limits),
        );
    }
    out
}

/// `rpm=60,usd_per_day=5`, or `-` for none.
fn limits(l: &crate::config::KeyLimits) -> String {
    let set: Vec<String> = [
        ("rpm", l.rpm.map(|v| v.to_string())),
        ("tpm", l.tpm.map(|v| v.to_string())),
        ("concurrent", l.concurrent.map(|v| v.to_string())),
        ("usd_per_day", l.usd_per_day.map(|v| v.to_string())),
        ("usd_per_month", l.usd_per_month.map(|v| v.to_string())),
    ]
    .into_iter()
    .filter_map(|(name, v)| Some(format!("{name}={}", v?)))
    .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: KeysCommand,
    }

    #[tokio::test]
    async fn create_takes_limits_and_list_shows_them() {
        let config = crate::config::parse(
            "backends: [{name: a, kind: openai, model: m}]\ntasks: [{name: t, backends: [a], slo: {ttft_ms: 500}}]\n",
        )
        .unwrap();
        let path = std::env::temp_dir().join(format!("spillway-keys-cli-{:016x}.db", rand::random::<u64>()));
        let db = Store::open(&format!("sqlite://{}", path.display())).await.unwrap();
        let parse = |args: &str| Cli::try_parse_from(format!("keys {args}").split(' ')).map(|c| c.command);
        let create = parse("create --name ci --team pay --rpm 60 --usd-per-day 2.50").unwrap();
        let out = command(&config, &db, create).await.unwrap();
        assert!(out.starts_with("sk-spw-"), "{out}");
        let listed = command(&config, &db, parse("list").unwrap()).await.unwrap();
        assert!(listed.lines().nth(1).unwrap().ends_with(" rpm=60,usd_per_day=2.50"), "{listed}");
        assert!(parse("create --name ci --team pay --usd-per-day five").is_err());
        let zero = parse("create --name ci --team pay --concurrent 0").unwrap();
        let refused = command(&config, &db, zero).await.unwrap_err();
        assert_eq!(refused.to_string(), "limits.concurrent: must be at least 1");
    }
}
