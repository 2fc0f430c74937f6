//! Typed names: a task, a backend (a local pool is a backend) and a team as the operator named
//! them. A name is the identity that outlives a config reload (a `TaskId` or `BackendId` is a
//! position in one config), so maps of state that lasts (quota windows, availability, gate
//! results, report rows) are keyed by these, never by a bare `String` that could be any name.
//! Each hashes, compares and serializes as its text, so a map keyed by one reads with a `&str`
//! and JSON, labels and SQL stay the same bytes.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! name {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> $name {
                $name(Arc::from(text))
            }
        }

        impl From<&String> for $name {
            fn from(text: &String) -> $name {
                $name(Arc::from(text.as_str()))
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> $name {
                $name(Arc::from(text))
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        /// Read as its text wherever text is wanted (a label, a log field, a lookup by `&str`).
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                String::deserialize(d).map($name::from)
            }
        }
    };
}

name!(
    /// A task's name (`summarise-ticket`).
    TaskName
);
name!(
    /// A backend's name: a hosted provider's or a local pool's.
    BackendName
);
name!(
    /// The team an issued key's spend is counted to.
    TeamName
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_name_reads_compares_and_serializes_as_its_text() {
        let map = BTreeMap::from([(BackendName::from("pool"), 1), (BackendName::from("oa"), 2)]);
        assert_eq!(map.get("pool"), Some(&1));
        assert_eq!(serde_json::to_string(&map).unwrap(), r#"{"oa":2,"pool":1}"#);
        let back: BTreeMap<BackendName, u32> = serde_json::from_str(r#"{"oa":2,"pool":1}"#).unwrap();
        assert_eq!(back, map);
        assert_eq!(TaskName::from("t"), "t");
        assert_eq!(
            format!("{} {:?}", TeamName::from("search"), TeamName::from("search")),
            r#"search "search""#
        );
    }
}
