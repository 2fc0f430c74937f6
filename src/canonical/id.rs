//! Typed identity of a node: built once when the snapshot builder meets the node, cheap to
//! clone (one shared allocation) and to hash, so that breakers, load counters, telemetry and
//! records are keyed by one type and never by a string formatted again at each use.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// A node's stable identity across snapshots: `backend/model@base_url`. It hashes and compares
/// as that text, so a map keyed by it can be read with the text an operator sends (`&str`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NodeKey(Arc<str>);

impl NodeKey {
    /// The key of the node at `base_url` (the adapter's base URL) of `backend` serving `model`.
    pub fn new(backend: &str, model: &str, base_url: &str) -> NodeKey {
        NodeKey(Arc::from(format!("{backend}/{model}@{base_url}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A key as text, for tests and for keys read back from storage or an operator's request.
impl From<&str> for NodeKey {
    fn from(text: &str) -> NodeKey {
        NodeKey(Arc::from(text))
    }
}

impl Borrow<str> for NodeKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Read as its text wherever text is wanted (a log field, a label, a lookup by `&str`).
impl std::ops::Deref for NodeKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for NodeKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for NodeKey {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for NodeKey {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl Serialize for NodeKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_key_reads_as_its_text_and_clones_share_it() {
        let key = NodeKey::new("pool", "llama", "http://10.0.0.5:8000/v1");
        assert_eq!(key.as_str(), "pool/llama@http://10.0.0.5:8000/v1");
        let copy = key.clone();
        assert!(std::ptr::eq(key.as_str(), copy.as_str()), "a clone shares the text");
        let map = HashMap::from([(key, 1)]);
        assert_eq!(map.get("pool/llama@http://10.0.0.5:8000/v1"), Some(&1));
        assert_eq!(serde_json::to_string(&copy).unwrap(), "\"pool/llama@http://10.0.0.5:8000/v1\"");
    }
}
