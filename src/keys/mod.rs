//! Client keys issued by operators (`spillway keys`, `/admin/keys`) beside the static keys of
//! `client_keys_env`. `secret` makes and checks a key's text (`sk-spw-<id>-<secret>`, stored
//! as a salted SHA-256), `new` checks what an operator asks for, `store` keeps keys in the
//! ledger store (shared by every replica), `board` is a router's view that authenticates a
//! request, and `cli` is the command. A key's secret leaves this module once, when it is made;
//! it is never logged, stored or kept in memory afterwards.

pub mod board;
pub mod cli;
pub mod new;
pub mod secret;
pub mod store;

pub use board::{KeyBoard, Refused, StaticKeys};
pub use store::{KeyError, Status, StoredKey};

use crate::ledger::Store;

/// Read every issued key from the store into the board (the refresh loop's step, and what the
/// admin API does at once after a revocation or rotation of its own).
pub async fn reload(board: &KeyBoard, store: &Store) -> Result<(), KeyError> {
    let rows = store::list(store).await?;
    board.set_issued(board::IssuedKeys::from_rows(rows));
    board.mark_read(tokio::time::Instant::now());
    Ok(())
}

/// A stored key as listed (CLI, admin API): never its hash or salt. Times are RFC 3339 (UTC).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Listing {
    pub id: crate::canonical::KeyId,
    pub name: String,
    pub team: String,
    /// Empty: every task open to all keys.
    pub tasks: Vec<String>,
    pub status: Status,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    pub rotated_at: Option<String>,
    /// Limits given at creation (`{}`: none).
    pub limits: crate::config::KeyLimits,
}

impl Listing {
    pub fn of(row: &StoredKey, now_ms: i64) -> Listing {
        Listing {
            id: row.key.id.clone(),
            name: row.key.name.clone(),
            team: row.key.team.clone(),
            tasks: row.key.tasks.clone(),
            status: row.status(now_ms),
            created_at: rfc3339(row.created_ms),
            expires_at: row.expires_ms.map(rfc3339),
            revoked_at: row.revoked_ms.map(rfc3339),
            rotated_at: row.rotated_ms.map(rfc3339),
            limits: row.limits.clone(),
        }
    }
}

use crate::ledger::rfc3339;
