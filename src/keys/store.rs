//! Issued keys in the ledger store (`client_keys`, SQLite or PostgreSQL through the ledger's
//! pool and migrations): create, list, revoke, rotate, and the whole table for the routers'
//! view. Rows hold a salt and a hash, never a secret; a new secret leaves here once, in the
//! return value of [`create`] or [`rotate`]. Every router replica reads the same table, so a
//! revocation written through any of them reaches all.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::new::{NewKey, Refusal};
use super::secret::{self, Hashed, Minted};
use crate::canonical::{IssuedKey, KeyId};
use crate::config::KeyLimits;
use crate::ledger::{Store, StoreError};

/// A stored key: who it is, how to check it, and its times (unix milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub key: IssuedKey,
    pub hashed: Hashed,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
    pub revoked_ms: Option<i64>,
    pub rotated_ms: Option<i64>,
    /// Limits given at creation (none set: the config's alone apply).
    pub limits: KeyLimits,
}

/// Whether a key is accepted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    Expired,
    Revoked,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Expired => "expired",
            Status::Revoked => "revoked",
        }
    }
}

impl StoredKey {
    pub fn status(&self, now_ms: i64) -> Status {
        if self.revoked_ms.is_some() {
            Status::Revoked
        } else if self.expires_ms.is_some_and(|at| at <= now_ms) {
            Status::Expired
        } else {
            Status::Active
        }
    }
}

/// Why a key operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("no key `{0}`")]
    NotFound(String),
    #[error("key `{0}` is revoked")]
    Revoked(KeyId),
    #[error("key `{0}` has expired")]
    Expired(KeyId),
    /// A stored row that does not read back (hand-edited or from a newer version).
    #[error("client_keys row `{id}`: {why}")]
    Corrupt { id: String, why: String },
}

const COLUMNS: &str =
    "id, name, team, tasks, salt, hash, created_ms, expires_ms, revoked_ms, rotated_ms, limits";

/// Store a new key; its text (shown once) comes back beside the row.
pub async fn create(store: &Store, new: &NewKey, now_ms: i64) -> Result<(StoredKey, String), KeyError> {
    let expires_ms =
        new.expires_in.map(|d| now_ms.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
    let tasks = serde_json::to_string(&new.tasks).expect("a list of strings is JSON");
    let limits = new.limits.any().then(|| limits_json(&new.limits));
    // 48 random bits of id: a collision is retried with a fresh one.
    for _ in 0..3 {
        let Minted { id, text, hashed } = secret::mint(&mut rand::rngs::OsRng);
        let inserted = sqlx::query(
            "INSERT INTO client_keys (id, name, team, tasks, salt, hash, created_ms, expires_ms, revoked_ms, rotated_ms, limits) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL, $9) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id.to_string())
        .bind(new.name.clone())
        .bind(new.team.clone())
        .bind(tasks.clone())
        .bind(hex::encode(hashed.salt))
        .bind(hex::encode(hashed.hash))
        .bind(now_ms)
        .bind(expires_ms)
        .bind(limits.clone())
        .execute(store.pool())
        .await
        .map_err(StoreError::statement("insert client key"))?;
        if inserted.rows_affected() == 1 {
            let key =
                IssuedKey { id, name: new.name.clone(), team: new.team.clone(), tasks: new.tasks.clone() };
            let row = StoredKey {
                key,
                hashed,
                created_ms: now_ms,
                expires_ms,
                revoked_ms: None,
                rotated_ms: None,
                limits: new.limits.clone(),
            };
            return Ok((row, text));
        }
    }
    Err(KeyError::Corrupt { id: "-".into(), why: "three random ids in a row were taken".into() })
}

/// Every stored key, oldest first.
pub async fn list(store: &Store) -> Result<Vec<StoredKey>, KeyError> {
    let sql = format!("SELECT {COLUMNS} FROM client_keys ORDER BY created_ms, id");
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(store.pool())
        .await
        .map_err(StoreError::statement("list client keys"))?;
    rows.iter().map(row_to_key).collect()
}

/// One key by id.
pub async fn get(store: &Store, id: &KeyId) -> Result<StoredKey, KeyError> {
    let sql = format!("SELECT {COLUMNS} FROM client_keys WHERE id = $1");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id.to_string())
        .fetch_optional(store.pool())
        .await
        .map_err(StoreError::statement("read client key"))?;
    row.as_ref().map(row_to_key).transpose()?.ok_or_else(|| KeyError::NotFound(id.to_string()))
}

/// Revoke a key from now on; a key revoked already keeps its first revocation time.
pub async fn revoke(store: &Store, id: &KeyId, now_ms: i64) -> Result<StoredKey, KeyError> {
    sqlx::query("UPDATE client_keys SET revoked_ms = $1 WHERE id = $2 AND revoked_ms IS NULL")
        .bind(now_ms)
        .bind(id.to_string())
        .execute(store.pool())
        .await
        .map_err(StoreError::statement("revoke client key"))?;
    get(store, id).await
}

/// Give a live key a new secret (the old one is refused from the routers' next refresh); its
/// id, team and tasks stay. A revoked or expired key is not rotated.
pub async fn rotate(store: &Store, id: &KeyId, now_ms: i64) -> Result<(StoredKey, String), KeyError> {
    let current = get(store, id).await?;
    match current.status(now_ms) {
        Status::Revoked => return Err(KeyError::Revoked(id.clone())),
        Status::Expired => return Err(KeyError::Expired(id.clone())),
        Status::Active => {}
    }
    let Minted { text, hashed, .. } = secret::remint(id, &mut rand::rngs::OsRng);
    let updated = sqlx::query(
        "UPDATE client_keys SET salt = $1, hash = $2, rotated_ms = $3 WHERE id = $4 AND revoked_ms IS NULL",
    )
    .bind(hex::encode(hashed.salt))
    .bind(hex::encode(hashed.hash))
    .bind(now_ms)
    .bind(id.to_string())
    .execute(store.pool())
    .await
    .map_err(StoreError::statement("rotate client key"))?;
    if updated.rows_affected() == 0 {
        return Err(KeyError::Revoked(id.clone()));
    }
    Ok((StoredKey { hashed, rotated_ms: Some(now_ms), ..current }, text))
}

fn row_to_key(row: &AnyRow) -> Result<StoredKey, KeyError> {
    let id_text: String = row.try_get("id").map_err(|e| column("id", e))?;
    let corrupt = |why: String| KeyError::Corrupt { id: id_text.clone(), why };
    let text = |col: &str| row.try_get::<String, _>(col).map_err(|e| column(col, e));
    let time = |col: &str| row.try_get::<Option<i64>, _>(col).map_err(|e| column(col, e));
    let id = KeyId::parse(&id_text).ok_or_else(|| corrupt("not a key id".into()))?;
    let tasks: Vec<String> =
        serde_json::from_str(&text("tasks")?).map_err(|e| corrupt(format!("tasks: {e}")))?;
    let salt = hex::decode(text("salt")?).ok().and_then(|b| <[u8; 16]>::try_from(b).ok());
    let hash = hex::decode(text("hash")?).ok().and_then(|b| <[u8; 32]>::try_from(b).ok());
    let (Some(salt), Some(hash)) = (salt, hash) else {
        return Err(corrupt("salt or hash is not hex of the right length".into()));
    };
    Ok(StoredKey {
        key: IssuedKey { id, name: text("name")?, team: text("team")?, tasks },
        hashed: Hashed { salt, hash },
        created_ms: row.try_get("created_ms").map_err(|e| column("created_ms", e))?,
        expires_ms: time("expires_ms")?,
        revoked_ms: time("revoked_ms")?,
        rotated_ms: time("rotated_ms")?,
        limits: match row.try_get::<Option<String>, _>("limits").map_err(|e| column("limits", e))? {
            Some(json) => serde_json::from_str(&json).map_err(|e| corrupt(format!("limits: {e}")))?,
            None => KeyLimits::default(),
        },
    })
}

/// A key's limits as stored: JSON of the fields set, dollars as decimal strings.
fn limits_json(l: &KeyLimits) -> String {
    let usd = |d: Option<rust_decimal::Decimal>| d.map(|d| d.to_string());
    let mut map = serde_json::Map::new();
    let fields = [
        ("rpm", l.rpm.map(serde_json::Value::from)),
        ("tpm", l.tpm.map(serde_json::Value::from)),
        ("concurrent", l.concurrent.map(serde_json::Value::from)),
        ("usd_per_day", usd(l.usd_per_day).map(serde_json::Value::from)),
        ("usd_per_month", usd(l.usd_per_month).map(serde_json::Value::from)),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            map.insert(name.to_string(), v);
        }
    }
    serde_json::Value::Object(map).to_string()
}

fn column(column: &str, source: sqlx::Error) -> KeyError {
    KeyError::Store(StoreError::Column { column: column.to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn temp_store() -> Store {
        let path = std::env::temp_dir().join(format!("spillway-keys-{:016x}.db", rand::random::<u64>()));
        Store::open(&format!("sqlite://{}", path.display())).await.unwrap()
    }

    fn new_key(expires_in: Option<Duration>) -> NewKey {
        NewKey {
            name: "ci".into(),
            team: "search".into(),
            tasks: vec!["summarise".into()],
            expires_in,
            limits: KeyLimits::default(),
        }
    }

    #[tokio::test]
    async fn a_key_is_stored_as_a_hash_and_lives_until_revoked() {
        let store = temp_store().await;
        let (row, text) = create(&store, &new_key(Some(Duration::from_secs(60))), 1_000).await.unwrap();
        assert_eq!(row.expires_ms, Some(61_000));
        let (id, secret) = secret::parse(&text).unwrap();
        assert_eq!(id, row.key.id);
        // Read back: the same row, whose hash checks the secret; the secret is nowhere in it.
        let listed = list(&store).await.unwrap();
        assert_eq!(listed, vec![row.clone()]);
        assert!(secret::verify(&listed[0].hashed, secret));
        assert!(!format!("{listed:?}").contains(secret));
        assert_eq!(listed[0].status(60_999), Status::Active);
        assert_eq!(listed[0].status(61_000), Status::Expired);

        let revoked = revoke(&store, &id, 5_000).await.unwrap();
        assert_eq!((revoked.revoked_ms, revoked.status(5_000)), (Some(5_000), Status::Revoked));
        // Revoking again keeps the first time; a revoked key is not rotated.
        assert_eq!(revoke(&store, &id, 9_000).await.unwrap().revoked_ms, Some(5_000));
        assert!(matches!(rotate(&store, &id, 9_000).await, Err(KeyError::Revoked(_))));
        let unknown = KeyId::parse("000000000000").unwrap();
        assert_eq!(revoke(&store, &unknown, 1).await.unwrap_err().to_string(), "no key `000000000000`");
    }

    #[tokio::test]
    async fn limits_given_at_creation_are_stored_with_the_key() {
        let store = temp_store().await;
        let limits =
            KeyLimits { rpm: Some(60), usd_per_day: Some("5.25".parse().unwrap()), ..KeyLimits::default() };
        let new = NewKey { limits: limits.clone(), ..new_key(None) };
        let (row, _) = create(&store, &new, 1_000).await.unwrap();
        let (plain, _) = create(&store, &new_key(None), 1_001).await.unwrap();
        assert_eq!(get(&store, &row.key.id).await.unwrap().limits, limits);
        assert_eq!(get(&store, &plain.key.id).await.unwrap().limits, KeyLimits::default());
        assert_eq!(limits_json(&limits), r#"{"rpm":60,"usd_per_day":"5.25"}"#);
    }

    #[tokio::test]
    async fn rotation_changes_the_secret_and_keeps_the_identity() {
        let store = temp_store().await;
        let (row, old) = create(&store, &new_key(None), 1_000).await.unwrap();
        let (rotated, new) = rotate(&store, &row.key.id, 2_000).await.unwrap();
        assert_eq!((rotated.key.clone(), rotated.rotated_ms), (row.key.clone(), Some(2_000)));
        let stored = get(&store, &row.key.id).await.unwrap();
        assert_eq!(stored, rotated);
        assert!(secret::verify(&stored.hashed, secret::parse(&new).unwrap().1));
        assert!(!secret::verify(&stored.hashed, secret::parse(&old).unwrap().1));
    }
}
