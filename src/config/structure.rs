//! The structural pass of loading: the YAML tree decoded one top-level key and one list item
//! at a time, so that one bad item does not hide the problems of the next. Within an item,
//! each offending key is noted and taken out of the tree before decoding again, and a
//! required key that is missing (or was taken out) gets a stand-in, so every unknown key,
//! wrong type and missing key of the item is found, not only the first. An item that needed a
//! stand-in is reported and left undecoded: no semantic check runs on a stand-in. Pure: reads
//! the tree only.

use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

use super::backend::written::{self, Refusal};
use super::tree::{insert, join, remove, steps, Step};
use super::validate::Undecoded;
use super::Problem;

pub(super) const TOP_KEYS: &[&str] = &[
    "listen",
    "client_keys_env",
    "issued_keys",
    "backends",
    "tasks",
    "policy",
    "dispatch",
    "limits",
    "telemetry",
    "queue",
    "state",
    "balancing",
    "affinity",
    "ledger",
    "batch",
    "tls",
    "admin_token_env",
    "canary",
    "access_log",
    "budgets",
];

/// The structural pass: every problem found, the key paths taken out of the tree to find the
/// next one, what could not be decoded at all, and where each decoded list item sits in the
/// file.
#[derive(Default)]
pub(super) struct Structure {
    pub problems: Vec<Problem>,
    pub peeled: Vec<String>,
    pub undecoded: Undecoded,
    pub backend_at: Vec<usize>,
    pub task_at: Vec<usize>,
}

/// At most this many problems are peeled from one item: a safeguard, as each peel takes a key
/// out of a finite tree (or puts a stand-in where one was missing).
const MAX_PEELS: usize = 64;

/// What a missing key is tried with, in turn, until the item reads past it.
fn stand_ins() -> [Value; 5] {
    [Value::Mapping(Mapping::new()), Value::Sequence(Vec::new()), "".into(), 0.into(), false.into()]
}

impl Structure {
    /// Read the config's top-level mapping: the structure found, and what decodes of it (the
    /// required lists empty where they did not).
    pub fn read(map: Mapping) -> (Structure, Mapping) {
        let mut s = Structure::default();
        let mut clean = Mapping::new();
        for (key, value) in map {
            let Some(name) = key.as_str() else {
                s.problems.push(Problem::new("", format!("keys must be strings, found {key:?}")));
                continue;
            };
            if !TOP_KEYS.contains(&name) {
                let why = format!("unknown key; expected one of {}", TOP_KEYS.join(", "));
                s.problems.push(Problem::new(name, why));
                continue;
            }
            let before = s.problems.len();
            let decoded = s.key(name, value);
            // A list keeps its decoded items (`list` notes the rest); any other key with a
            // problem may be standing on defaults.
            if s.problems.len() > before && !matches!(name, "backends" | "tasks") {
                s.undecoded.sections.insert(name.to_string());
            }
            if let Some(value) = decoded {
                clean.insert(Value::String(name.to_string()), value);
            }
        }
        for required in ["backends", "tasks"] {
            if !clean.contains_key(required) {
                if !s.problems.iter().any(|p| p.path.starts_with(required)) {
                    s.problems.push(Problem::new(required, "missing (required)"));
                }
                s.undecoded.sections.insert(required.to_string());
                clean.insert(Value::String(required.to_string()), Value::Sequence(Vec::new()));
            }
        }
        (s, clean)
    }

    /// Decode one top-level key by its type.
    fn key(&mut self, name: &str, value: Value) -> Option<Value> {
        use super::*;
        match name {
            "backends" => self.list(name, value, backend),
            "tasks" => self.list(name, value, serde::<TaskConfig>),
            "listen" => self.peel(name, value, serde::<String>),
            "client_keys_env" => self.peel(name, value, serde::<Vec<String>>),
            "issued_keys" => self.peel(name, value, serde::<IssuedKeysConfig>),
            "policy" => self.peel(name, value, serde::<PolicyConfig>),
            "dispatch" => self.peel(name, value, serde::<DispatchConfig>),
            "limits" => self.peel(name, value, serde::<LimitsConfig>),
            "telemetry" => self.peel(name, value, serde::<TelemetryConfig>),
            "queue" => self.peel(name, value, serde::<QueueConfig>),
            "state" => self.peel(name, value, serde::<StateConfig>),
            "ledger" => self.peel(name, value, serde::<LedgerConfig>),
            "batch" => self.peel(name, value, serde::<BatchConfig>),
            "tls" => self.peel(name, value, serde::<TlsConfig>),
            "canary" => self.peel(name, value, serde::<CanaryConfig>),
            "affinity" => self.peel(name, value, serde::<AffinityConfig>),
            "access_log" => self.peel(name, value, serde::<AccessLogConfig>),
            "budgets" => self.peel(name, value, serde::<BudgetsConfig>),
            "admin_token_env" => self.peel(name, value, serde::<Option<String>>),
            _ => self.peel(name, value, serde::<BalancingConfig>),
        }
    }

    /// Decode each item of the list at `path` on its own, noting each decoded item's index in
    /// the file. A backend that does not decode is remembered by name, so that a task naming it
    /// is not reported a second time.
    fn list(&mut self, path: &str, value: Value, decode: Decode) -> Option<Value> {
        let Value::Sequence(items) = value else {
            self.problems.push(Problem::new(path, "expected a list"));
            self.undecoded.sections.insert(path.to_string());
            return None;
        };
        let mut decoded = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let name = item.get("name").and_then(Value::as_str).map(str::to_string);
            match self.peel(&format!("{path}[{i}]"), item, decode) {
                Some(item) => {
                    decoded.push(item);
                    match path {
                        "backends" => self.backend_at.push(i),
                        _ => self.task_at.push(i),
                    }
                }
                None => match name {
                    Some(name) => {
                        self.undecoded.names.insert((path.to_string(), name));
                    }
                    None => {
                        self.undecoded.sections.insert(path.to_string());
                    }
                },
            }
        }
        Some(Value::Sequence(decoded))
    }

    /// Decode `value` with `decode`; on each error, note the problem, take the offending key
    /// out of the tree and try again, so every unknown key and wrong type of one item is
    /// reported, not only the first. A required key taken out (or missing) takes its parent
    /// with it; at the item's top it gets a stand-in instead, and reading goes on.
    /// `Some`: what is left decodes. `None`: the item itself is unusable.
    fn peel(&mut self, prefix: &str, mut value: Value, decode: Decode) -> Option<Value> {
        let mut removed: Vec<Vec<Step>> = Vec::new();
        // The keys that got a stand-in: the item is reported and left undecoded.
        let mut stood_in: Vec<Vec<Step>> = Vec::new();
        for _ in 0..MAX_PEELS {
            let (mut at, message) = match decode(value.clone()) {
                Ok(()) => return stood_in.is_empty().then_some(value),
                Err(err) => err,
            };
            let inside_stand_in = stood_in.iter().any(|s| at.starts_with(s));
            // serde's fixed wording is the only place a missing field is named.
            if let Some(field) = message.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
                let mut full = at.clone();
                full.push(Step::Key(field.to_string()));
                if !removed.contains(&full) && !inside_stand_in {
                    self.problems.push(Problem::new(join(prefix, &full), "missing (required)"));
                }
                if at.is_empty() || inside_stand_in {
                    if !stand_in(&mut value, &full, decode) {
                        return None;
                    }
                    stood_in.push(full);
                    continue;
                }
            } else if inside_stand_in {
                return None;
            } else {
                self.problems.push(problem(join(prefix, &at), message));
            }
            // A bad list element takes its whole list out: the later elements' indices stay true.
            if let Some(seq) = at.iter().position(|s| matches!(s, Step::Index(_))) {
                at.truncate(seq);
            }
            if at.is_empty() || !remove(&mut value, &at) {
                return None;
            }
            self.peeled.push(join(prefix, &at));
            removed.push(at);
        }
        None
    }
}

/// Put the first stand-in under which `value` reads past the key `at` (no error at or below
/// it other than a key missing inside the stand-in); false if none does.
fn stand_in(value: &mut Value, at: &[Step], decode: Decode) -> bool {
    for candidate in stand_ins() {
        let mut tried = value.clone();
        if !insert(&mut tried, at, candidate) {
            return false;
        }
        let fits = match decode(tried.clone()) {
            Ok(()) => true,
            Err((path, message)) => !path.starts_with(at) || message.starts_with("missing field `"),
        };
        if fits {
            *value = tried;
            return true;
        }
    }
    false
}

/// How one item is decoded: `Err` has the path of its first problem within it, and the problem.
type Decode = fn(Value) -> Result<(), (Vec<Step>, String)>;

/// Decode as `T` (serde, with the path of the error).
fn serde<T: DeserializeOwned>(value: Value) -> Result<(), (Vec<Step>, String)> {
    serde_path_to_error::deserialize::<_, T>(value)
        .map(drop)
        .map_err(|err| (steps(err.path()), err.into_inner().to_string()))
}

/// Decode a backend: as serde would, but a key its kind does not take is named by its path.
fn backend(value: Value) -> Result<(), (Vec<Step>, String)> {
    match written::decode(value) {
        Ok(_) => Ok(()),
        Err(Refusal::Serde(err)) => Err((steps(err.path()), err.into_inner().to_string())),
        Err(Refusal::Misplaced(m)) => Err((vec![Step::Key(m.key.to_string())], m.message)),
    }
}

/// A structural problem, with a hint where the mistake is a common one.
pub(super) fn problem(path: String, mut message: String) -> Problem {
    if message.contains("unknown field `api_key`") {
        message.push_str("; secrets are never written in the config: name the environment variable that holds it with api_key_env");
    }
    if message.contains("unknown field `claim_secs`") {
        message.push_str("; a line's claim is now a lease its replica renews every batch.heartbeat_secs (default 5) and that lapses after three missed heartbeats: remove claim_secs");
    }
    Problem::new(path, message)
}
