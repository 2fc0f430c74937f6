//! Key paths into a YAML tree, as the structural pass of loading walks it: serde's error
//! paths turned into steps, steps written as a config key path (`tasks[1].slo`), and a key
//! taken out of the tree or put into it. Pure: the tree only.

use serde_yaml_ng::Value;

/// One step of a key path into the YAML tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// The steps of serde's path, up to the first one that is neither a key nor an index.
pub fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    use serde_path_to_error::Segment;
    path.iter()
        .map_while(|segment| match segment {
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

pub fn join(prefix: &str, steps: &[Step]) -> String {
    let mut path = prefix.to_string();
    for step in steps {
        match step {
            Step::Key(key) if path.is_empty() => path.push_str(key),
            Step::Key(key) => {
                path.push('.');
                path.push_str(key);
            }
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

/// The node at `at` (keys and indices) in `value`.
fn node<'a>(mut node: &'a mut Value, at: &[Step]) -> Option<&'a mut Value> {
    for step in at {
        node = match step {
            Step::Key(key) => node.get_mut(key.as_str())?,
            Step::Index(i) => node.get_mut(*i)?,
        };
    }
    Some(node)
}

/// Take the key at `at` (keys only) out of `value`; false if it is not there.
pub fn remove(value: &mut Value, at: &[Step]) -> bool {
    let Some((Step::Key(last), parents)) = at.split_last() else { return false };
    if parents.iter().any(|s| matches!(s, Step::Index(_))) {
        return false;
    }
    node(value, parents).and_then(Value::as_mapping_mut).and_then(|m| m.remove(last.as_str())).is_some()
}

/// Put `new` at the key `at` of `value`; false if its parent is not a mapping.
pub fn insert(value: &mut Value, at: &[Step], new: Value) -> bool {
    let Some((Step::Key(last), parents)) = at.split_last() else { return false };
    let Some(map) = node(value, parents).and_then(Value::as_mapping_mut) else { return false };
    map.insert(Value::String(last.clone()), new);
    true
}
