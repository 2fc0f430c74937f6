//! An issued key's text and its hash, pure: `sk-spw-<id>-<secret>`, where the id (12 hex
//! digits) finds the stored row and the secret (64 hex digits, 256 random bits) is checked
//! against `SHA-256(salt || secret)` with a per-key 16-byte salt. Comparisons run in constant
//! time. Nothing here logs, stores or keeps a secret: callers show it once and drop it.

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::canonical::KeyId;

/// What every issued key starts with.
pub const PREFIX: &str = "sk-spw-";

/// Random bytes in a key's secret.
const SECRET_BYTES: usize = 32;

/// A key's salt and the hash of its secret, as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct Hashed {
    pub salt: [u8; 16],
    pub hash: [u8; 32],
}

impl std::fmt::Debug for Hashed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hashed(..)")
    }
}

/// A freshly made key: its id, the full text to hand the client once, and what to store.
pub(crate) struct Minted {
    pub id: KeyId,
    pub text: String,
    pub hashed: Hashed,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Minted({}, ..)", self.id)
    }
}

/// A new key with a new id.
pub(crate) fn mint(rng: &mut impl RngCore) -> Minted {
    let mut id = [0u8; KeyId::LEN / 2];
    rng.fill_bytes(&mut id);
    let id = KeyId::parse(&hex::encode(id)).expect("12 hex digits are an id");
    remint(&id, rng)
}

/// A new secret for the key `id` (rotation keeps the id).
pub(crate) fn remint(id: &KeyId, rng: &mut impl RngCore) -> Minted {
    let mut secret = [0u8; SECRET_BYTES];
    rng.fill_bytes(&mut secret);
    let secret = hex::encode(secret);
    let mut salt = [0u8; 16];
    rng.fill_bytes(&mut salt);
    let hashed = Hashed { salt, hash: hash(&salt, &secret) };
    Minted { id: id.clone(), text: format!("{PREFIX}{id}-{secret}"), hashed }
}

/// The id and secret of a key's text, if it has an issued key's shape.
pub fn parse(text: &str) -> Option<(KeyId, &str)> {
    let rest = text.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('-')?;
    let id = KeyId::parse(id)?;
    (!secret.is_empty()).then_some((id, secret))
}

/// `SHA-256(salt || secret)`.
pub fn hash(salt: &[u8; 16], secret: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(secret.as_bytes());
    h.finalize().into()
}

/// Whether `secret` is the one `stored` was made from, in time that does not depend on where
/// the two hashes differ.
pub(crate) fn verify(stored: &Hashed, secret: &str) -> bool {
    bool::from(hash(&stored.salt, secret).ct_eq(&stored.hash))
}

/// The digest a static key is compared by: equal-length values, so the comparison time says
/// nothing about the key's length or its first differing byte.
pub fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// Constant-time equality of two digests.
pub fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_minted_key_parses_back_and_verifies() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let key = mint(&mut rng);
        assert!(key.text.starts_with("sk-spw-"));
        assert_eq!(key.text.len(), PREFIX.len() + 12 + 1 + 64);
        let (id, secret) = parse(&key.text).unwrap();
        assert_eq!(id, key.id);
        assert!(verify(&key.hashed, secret));
        assert!(!verify(&key.hashed, &secret.replace(&secret[..1], "x")));
        // A rotated key keeps its id and gets a new secret and salt.
        let rotated = remint(&key.id, &mut rng);
        assert_eq!(rotated.id, key.id);
        assert_ne!(rotated.text, key.text);
        assert!(!verify(&rotated.hashed, secret));
    }

    #[test]
    fn the_hash_is_sha256_of_salt_then_secret() {
        // SHA-256 over the salt's 16 bytes, then the secret's: "0123456789abcdef" + "s3cret".
        let salt = *b"0123456789abcdef";
        assert_eq!(
            hex::encode(hash(&salt, "s3cret")),
            "ff4396e4d59bfa3aa29828bc8c5b75cc371e4ab1262d7c59f6a42c66012c64e4"
        );
        assert_eq!(
            hex::encode(digest("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn only_the_issued_shape_parses() {
        let ok = "sk-spw-0123456789ab-deadbeef";
        assert_eq!(parse(ok).map(|(id, s)| (id.to_string(), s)), Some(("0123456789ab".into(), "deadbeef")));
        // The secret may hold dashes; the id may not.
        assert_eq!(parse("sk-spw-0123456789ab-de-ad").map(|(_, s)| s), Some("de-ad"));
        for bad in ["sk-spw-0123456789ab-", "sk-spw-0123456789a-beef", "sk-0123456789ab-beef", "TEAM_A_KEY"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn digests_compare_equal_only_when_equal() {
        assert!(same(&digest("k1"), &digest("k1")));
        assert!(!same(&digest("k1"), &digest("k2")));
    }
}
