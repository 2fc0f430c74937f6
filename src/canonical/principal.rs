//! Who a request authenticated as: a static key (named by the environment variable that holds
//! it) or a key issued through `spillway keys` (its id, team and allowed tasks). Typed so that
//! later parts (limits, budgets, ledger columns) key by identity, never by a formatted string.
//! Nothing here ever holds a key's secret.

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// The id of an issued client key: 12 lowercase hex digits. It is the non-secret part of the
/// key (`sk-spw-<id>-<secret>`), so it may be logged, listed and stored.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(Arc<str>);

impl KeyId {
    /// How many hex digits an id has.
    pub(crate) const LEN: usize = 12;

    /// An id from its text: exactly [`KeyId::LEN`] lowercase hex digits, else `None`.
    pub fn parse(text: &str) -> Option<KeyId> {
        let ok = text.len() == Self::LEN && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| KeyId(Arc::from(text)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({})", self.0)
    }
}

impl Serialize for KeyId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// An issued key as the request path knows it (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedKey {
    pub id: KeyId,
    pub name: String,
    /// The owner the key's spend is counted to.
    pub team: String,
    /// The tasks it may use; empty: every task open to all keys (no `allowed_keys`).
    pub tasks: Vec<String>,
}

/// The identity a request authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A key from `client_keys_env`, named by its environment variable.
    Static { env: String },
    /// A key issued through `spillway keys` or `/admin/keys`.
    Issued(Arc<IssuedKey>),
}

impl Principal {
    /// The key's name in records, logs and affinity: the environment variable of a static
    /// key, the id of an issued one.
    pub fn name(&self) -> &str {
        match self {
            Principal::Static { env } => env,
            Principal::Issued(key) => key.id.as_str(),
        }
    }

    /// The issued key's team; `None` for a static key.
    pub fn team(&self) -> Option<&str> {
        match self {
            Principal::Static { .. } => None,
            Principal::Issued(key) => Some(&key.team),
        }
    }

    /// The issued key's id; `None` for a static key.
    pub fn key_id(&self) -> Option<&KeyId> {
        match self {
            Principal::Static { .. } => None,
            Principal::Issued(key) => Some(&key.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_twelve_lowercase_hex_digits() {
        assert_eq!(KeyId::parse("0123456789ab").map(|id| id.to_string()), Some("0123456789ab".into()));
        for bad in ["0123456789a", "0123456789abc", "0123456789AB", "0123456789ag", ""] {
            assert_eq!(KeyId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_principal_is_named_by_env_or_id() {
        let issued = Principal::Issued(Arc::new(IssuedKey {
            id: KeyId::parse("00000000000f").unwrap(),
            name: "ci".into(),
            team: "search".into(),
            tasks: vec![],
        }));
        assert_eq!((issued.name(), issued.team()), ("00000000000f", Some("search")));
        let env = Principal::Static { env: "TEAM_A".into() };
        assert_eq!((env.name(), env.team(), env.key_id()), ("TEAM_A", None, None));
    }
}
