//! The router's view of the keys clients may send: the static keys read from the environment
//! (`client_keys_env`) and the issued keys last read from the store. Checking a presented key
//! is pure and constant time in the secret: an issued key is found by the id it carries and
//! its hash compared with `subtle`; any other key is compared (as a SHA-256 digest) with every
//! static key, without stopping at a match. Unknown, revoked and expired keys are one answer,
//! [`Refused`], so a client learns nothing about which it was. Holds no secret of an issued
//! key, and logs nothing.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::secret::{self, Hashed};
use super::store::StoredKey;
use crate::canonical::{IssuedKey, KeyId, Principal};

/// A presented key that is not accepted (unknown, revoked or expired: never said which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// One issued key as checked per request.
#[derive(Debug)]
struct Issued {
    key: Arc<IssuedKey>,
    hashed: Hashed,
    expires_ms: Option<i64>,
    revoked: bool,
    limits: crate::config::KeyLimits,
}

/// The issued keys of one read of the store.
#[derive(Debug, Default)]
pub(crate) struct IssuedKeys {
    by_id: HashMap<KeyId, Issued>,
}

impl IssuedKeys {
    /// The view of a read of the whole table.
    pub(crate) fn from_rows(rows: Vec<StoredKey>) -> IssuedKeys {
        let by_id = rows
            .into_iter()
            .map(|row| {
                let revoked = row.revoked_ms.is_some();
                let issued = Issued {
                    key: Arc::new(row.key),
                    hashed: row.hashed,
                    expires_ms: row.expires_ms,
                    revoked,
                    limits: row.limits,
                };
                (issued.key.id.clone(), issued)
            })
            .collect();
        IssuedKeys { by_id }
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// Static keys as digests, each with the environment variable it came from.
#[derive(Debug, Default)]
pub struct StaticKeys(Vec<([u8; 32], String)>);

impl StaticKeys {
    /// From key value → environment variable name (`config::secrets`).
    pub fn new(values: &HashMap<String, String>) -> StaticKeys {
        StaticKeys(values.iter().map(|(value, env)| (secret::digest(value), env.clone())).collect())
    }
}

/// Both kinds of keys, swapped whole when the config reloads or the store is read again.
#[derive(Default)]
pub struct KeyBoard {
    statics: ArcSwap<StaticKeys>,
    issued: ArcSwap<IssuedKeys>,
    /// When the issued keys were last read from the store (`None`: never).
    read_at: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl KeyBoard {
    pub fn new(statics: StaticKeys) -> KeyBoard {
        KeyBoard {
            statics: ArcSwap::from_pointee(statics),
            issued: ArcSwap::default(),
            read_at: Default::default(),
        }
    }

    /// The issued keys were read from the store at `at`.
    pub(crate) fn mark_read(&self, at: tokio::time::Instant) {
        *self.read_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    /// How long ago the issued keys were last read from the store (`None`: never).
    pub(crate) fn read_age(&self, now: tokio::time::Instant) -> Option<std::time::Duration> {
        self.read_at.lock().unwrap_or_else(|e| e.into_inner()).map(|at| now.saturating_duration_since(at))
    }

    pub(crate) fn set_static(&self, statics: StaticKeys) {
        self.statics.store(Arc::new(statics));
    }

    pub(crate) fn set_issued(&self, issued: IssuedKeys) {
        self.issued.store(Arc::new(issued));
    }

    /// The limits issued key `id` was created with (none set when it has none, or is unknown).
    pub fn limits(&self, id: &KeyId) -> crate::config::KeyLimits {
        self.issued.load().by_id.get(id).map(|k| k.limits.clone()).unwrap_or_default()
    }

    /// How many issued keys (of any status) the last read of the store held.
    pub(crate) fn issued_count(&self) -> usize {
        self.issued.load().len()
    }

    /// Whether clients must send a key: some static key is configured, or the store holds an
    /// issued key (revoked and expired ones too: revoking the last key never opens the door).
    pub fn required(&self) -> bool {
        !self.statics.load().0.is_empty() || !self.issued.load().is_empty()
    }

    /// The key named `name` (a static key's variable, an issued key's id) if it may still be
    /// used at `now_ms`: how a batch job's lines run as the key that created it.
    pub fn named(&self, name: &str, now_ms: i64) -> Option<Principal> {
        if let Some(id) = KeyId::parse(name) {
            let issued = self.issued.load();
            if let Some(key) = issued.by_id.get(&id) {
                let live = !key.revoked && key.expires_ms.is_none_or(|at| now_ms < at);
                return live.then(|| Principal::Issued(Arc::clone(&key.key)));
            }
        }
        let statics = self.statics.load();
        statics.0.iter().any(|(_, env)| env == name).then(|| Principal::Static { env: name.to_string() })
    }

    /// Who `presented` is, at unix milliseconds `now_ms`.
    pub fn check(&self, presented: &str, now_ms: i64) -> Result<Principal, Refused> {
        if let Some((id, secret)) = secret::parse(presented) {
            let issued = self.issued.load();
            if let Some(key) = issued.by_id.get(&id) {
                let matches = secret::verify(&key.hashed, secret);
                let live = !key.revoked && key.expires_ms.is_none_or(|at| now_ms < at);
                return if matches && live {
                    Ok(Principal::Issued(Arc::clone(&key.key)))
                } else {
                    Err(Refused)
                };
            }
        }
        let digest = secret::digest(presented);
        let statics = self.statics.load();
        // Every static key is compared, match or not.
        let mut found = None;
        for (stored, env) in statics.0.iter() {
            if secret::same(stored, &digest) {
                found = Some(env);
            }
        }
        found.map(|env| Principal::Static { env: env.clone() }).ok_or(Refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn stored(expires_ms: Option<i64>, revoked_ms: Option<i64>, seed: u64) -> (StoredKey, String) {
        let minted = secret::mint(&mut rand::rngs::StdRng::seed_from_u64(seed));
        let key = IssuedKey { id: minted.id, name: "ci".into(), team: "search".into(), tasks: vec![] };
        let row = StoredKey {
            key,
            hashed: minted.hashed,
            created_ms: 0,
            expires_ms,
            revoked_ms,
            rotated_ms: None,
            limits: Default::default(),
        };
        (row, minted.text)
    }

    #[tokio::test(start_paused = true)]
    async fn the_board_knows_how_old_its_view_of_the_store_is() {
        let board = KeyBoard::new(StaticKeys::default());
        let start = tokio::time::Instant::now();
        assert_eq!(board.read_age(start), None, "never read");
        board.mark_read(start);
        tokio::time::advance(std::time::Duration::from_millis(2500)).await;
        assert_eq!(board.read_age(tokio::time::Instant::now()), Some(std::time::Duration::from_millis(2500)));
    }

    #[test]
    fn issued_keys_are_refused_alike_when_unknown_revoked_or_expired() {
        let (live, live_text) = stored(Some(10_000), None, 1);
        let (revoked, revoked_text) = stored(None, Some(5), 2);
        let (_, unknown_text) = stored(None, None, 3);
        let board = KeyBoard::default();
        assert!(!board.required(), "no keys of either kind: no auth");
        board.set_issued(IssuedKeys::from_rows(vec![live.clone(), revoked]));
        assert!(board.required());
        assert_eq!(board.issued_count(), 2);

        let who = board.check(&live_text, 9_999).unwrap();
        assert_eq!((who.name(), who.team()), (live.key.id.as_str(), Some("search")));
        assert_eq!(board.check(&live_text, 10_000), Err(Refused), "expired at its time");
        assert_eq!(board.check(&revoked_text, 0), Err(Refused));
        assert_eq!(board.check(&unknown_text, 0), Err(Refused));
        // The right id with another secret.
        let forged = format!("{}{}-{}", secret::PREFIX, live.key.id, "0".repeat(64));
        assert_eq!(board.check(&forged, 0), Err(Refused));
    }

    #[test]
    fn static_keys_keep_working_beside_issued_ones() {
        let values = HashMap::from([("team-a-secret".to_string(), "TEAM_A".to_string())]);
        let board = KeyBoard::new(StaticKeys::new(&values));
        assert!(board.required());
        assert_eq!(board.check("team-a-secret", 0), Ok(Principal::Static { env: "TEAM_A".into() }));
        assert_eq!(board.check("team-a-secre", 0), Err(Refused));
        // A static key that happens to look like an issued one, with no such id stored.
        let odd = "sk-spw-0123456789ab-cafe".to_string();
        board.set_static(StaticKeys::new(&HashMap::from([(odd.clone(), "ODD".to_string())])));
        assert_eq!(board.check(&odd, 0).map(|p| p.name().to_string()), Ok("ODD".into()));
        assert_eq!(board.check("team-a-secret", 0), Err(Refused), "the reload replaced the old keys");
    }
}
