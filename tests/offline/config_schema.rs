//! The config schema has one source, the config types: `spillway config-schema` prints it, the
//! chart's `values.schema.json` carries it as generated, the example configs pass it, and the
//! "Config reference" (`docs/reference.md`, the README's reference appendix) lists exactly its
//! keys, with its defaults, required keys and ranges (the sections' range tables, which the
//! checks apply and the schema carries), and says which kinds of backend take each backend key
//! (the schema's branches by `kind`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_spillway");
const VALUES_SCHEMA: &str = "helm/spillway/values.schema.json";

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn yaml(path: &str) -> Value {
    serde_yaml_ng::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn config_schema(args: &[&str]) -> Value {
    let out = Command::new(BIN).arg("config-schema").args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("config-schema prints JSON")
}

/// The JSON pointer of the first place where `a` and `b` differ.
fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => first_difference(p, q, format!("{at}/{k}")),
                _ => Some(format!("{at}/{k}")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_difference(p, q, format!("{at}/{i}")))
        }
        _ => (a != b).then_some(at),
    }
}

#[test]
fn the_charts_config_schema_is_the_generated_one() {
    let generated = config_schema(&["--chart"]);
    let values: Value = serde_json::from_str(&read(VALUES_SCHEMA)).unwrap();
    let written = &values["properties"]["config"];
    if let Some(at) = first_difference(written, &generated, String::new()) {
        panic!(
            "the config property of {VALUES_SCHEMA} is not the schema the config types derive (first \
             difference at {at}); rewrite it with `helm/tests/update-config-schema.sh` (it runs \
             `spillway config-schema --chart`)"
        );
    }
}

#[test]
fn the_example_configs_pass_the_schema_and_a_misspelt_key_does_not() {
    let file = config_schema(&[]);
    assert_eq!(file["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(file, spillway::config::schema(), "config-schema prints the library's schema");
    let file = jsonschema::validator_for(&file).unwrap();
    let mut configs = vec![
        ("spillway.example.yaml".to_string(), yaml("spillway.example.yaml")),
        ("vllm/deploy/spillway-pool.yaml".to_string(), yaml("vllm/deploy/spillway-pool.yaml")),
    ];
    // Each simulator scenario carries a router config.
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scenarios");
    for entry in std::fs::read_dir(&scenarios).unwrap() {
        let name = format!("tests/fixtures/scenarios/{}", entry.unwrap().file_name().to_string_lossy());
        if name.ends_with(".yaml") {
            let router = yaml(&name)["router"].clone();
            configs.push((format!("{name}: router"), router));
        }
    }
    assert!(configs.len() >= 5, "{} configs", configs.len());
    for (name, config) in &configs {
        let errors: Vec<String> = file.iter_errors(config).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }

    let chart = jsonschema::validator_for(&config_schema(&["--chart"])).unwrap();
    let sets = ["helm/spillway/values.yaml", "tests/fixtures/helm/ha.yaml", "tests/fixtures/helm/agent.yaml"];
    for path in sets {
        let config = &yaml(path)["config"];
        assert!(config.is_object(), "{path} has a config");
        let errors: Vec<String> = chart.iter_errors(config).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{path}: {errors:?}");
    }
    let misspelt = &yaml("tests/fixtures/helm/bad-config-key.yaml")["config"];
    let errors: Vec<String> = chart.iter_errors(misspelt).map(|e| e.to_string()).collect();
    assert!(errors.iter().any(|e| e.contains("max_atempts")), "{errors:?}");
}

/// One key of the schema: its subschema, whether it is a leaf (no keys below it), whether
/// every config must have it (it and every key above it required), and, for a key of an
/// object with a branch per kind (a backend), the kinds whose branch has it.
struct Key {
    schema: Value,
    leaf: bool,
    required: bool,
    kinds: BTreeSet<String>,
}

/// The objects whose keys a subschema has: itself, or each of its branches by `kind` (a
/// backend's `oneOf`, one closed object per kind).
fn objects(schema: &Value) -> Vec<&Value> {
    match schema["oneOf"].as_array() {
        Some(branches) if branches.iter().all(|b| b["properties"]["kind"].is_object()) => {
            branches.iter().collect()
        }
        _ if schema["properties"].is_object() => vec![schema],
        _ => Vec::new(),
    }
}

/// The kinds a branch is for: the values its `kind` may take, less `vllm` (the older name of
/// `local`, which the README names once, not in every row).
fn kinds_of(branch: &Value) -> BTreeSet<String> {
    let kind = &branch["properties"]["kind"];
    let consts = kind["oneOf"].as_array().into_iter().flatten().filter_map(|v| v["const"].as_str());
    let listed = kind["enum"].as_array().into_iter().flatten().filter_map(Value::as_str);
    let names: BTreeSet<String> =
        consts.chain(listed).chain(kind["const"].as_str()).map(String::from).collect();
    assert_eq!(names.contains("vllm"), names.contains("local"), "vllm is local's older name: {names:?}");
    names.into_iter().filter(|k| k != "vllm").collect()
}

/// Every key of `schema` by path: `a.b`, list items as `a[]`, map entries as `a.<key>`; the
/// keys of an object with branches by kind are those of all its branches.
fn keys(schema: &Value, path: &str, required: bool, out: &mut BTreeMap<String, Key>) {
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    let objects = objects(schema);
    let branched = objects.len() > 1;
    if !objects.is_empty() {
        for object in &objects {
            for (name, sub) in object["properties"].as_object().unwrap() {
                let key = join(name);
                // Required when every branch requires it.
                let needed =
                    |o: &&Value| o["required"].as_array().is_some_and(|r| r.iter().any(|n| n == name));
                let required = required && objects.iter().all(needed);
                let kinds = if branched { kinds_of(object) } else { BTreeSet::new() };
                if let Some(known) = out.get_mut(&key) {
                    known.kinds.extend(kinds);
                    continue;
                }
                let leaf = !has_keys(sub);
                out.insert(key.clone(), Key { schema: sub.clone(), leaf, required, kinds });
                keys(sub, &key, required, out);
            }
        }
    } else if has_keys(&schema["items"]) {
        keys(&schema["items"], &format!("{path}[]"), required, out);
    } else if has_keys(&schema["additionalProperties"]) {
        keys(&schema["additionalProperties"], &join("<key>"), false, out);
    }
}

/// Whether keys lie below this subschema: an object's (or its branches'), list items' or map
/// values'.
fn has_keys(schema: &Value) -> bool {
    !objects(schema).is_empty()
        || !objects(&schema["items"]).is_empty()
        || !objects(&schema["additionalProperties"]).is_empty()
}

fn schema_keys() -> BTreeMap<String, Key> {
    let mut out = BTreeMap::new();
    keys(&spillway::config::schema(), "", true, &mut out);
    out
}

/// One row of a Config reference table: its keys (full paths), default cell, kinds cell (in
/// the table of `backends[]`) and whole text.
struct Row {
    keys: Vec<String>,
    default: String,
    kinds: Option<String>,
    text: String,
}

/// The rows of the Config reference (`docs/reference.md`). A table's keys are relative to its
/// heading's backticked key (`backends[]`); `ki` after `balancing.kp` in one cell is
/// `balancing.ki`; an upper-case segment (`NAME`) stands for any map key.
fn readme_rows() -> Vec<Row> {
    let readme = read("docs/reference.md");
    let start = readme.find("\n## Config reference").expect("docs/reference.md has a Config reference");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let ticks = regex::Regex::new(r"`([^`]+)`").unwrap();
    let mut prefix = None;
    let mut columns: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for line in section.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            prefix = Some(ticks.captures(heading).map_or(String::new(), |c| format!("{}.", &c[1])));
            continue;
        }
        let (Some(prefix), Some(row)) = (&prefix, line.strip_prefix('|')) else { continue };
        let cells: Vec<String> = row
            .replace("\\|", "\u{0}")
            .split('|')
            .map(|c| c.replace('\u{0}', "|").trim().to_string())
            .collect();
        if cells[0] == "key" {
            columns = cells.clone();
            continue;
        }
        if cells[0].starts_with("---") {
            continue;
        }
        let cell = |name: &str| columns.iter().position(|c| c == name).map(|i| cells[i].clone());
        let named: Vec<&str> = ticks.captures_iter(&cells[0]).map(|c| c.get(1).unwrap().as_str()).collect();
        assert!(!named.is_empty(), "Config reference: a row names no key: {line}");
        let parent = named[0].rsplit_once('.').map(|(p, _)| p);
        let keys = named
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let key = match parent {
                    Some(parent) if i > 0 && !key.contains('.') => format!("{parent}.{key}"),
                    _ => key.to_string(),
                };
                let placeholder = |s: &str| s.chars().all(|c| c.is_ascii_uppercase() || c == '_');
                let segments: Vec<&str> =
                    key.split('.').map(|s| if placeholder(s) { "<key>" } else { s }).collect();
                format!("{prefix}{}", segments.join("."))
            })
            .collect();
        let default =
            cell("default").unwrap_or_else(|| panic!("Config reference: no default column: {line}"));
        rows.push(Row { keys, default, kinds: cell("kinds"), text: cells[1..].join(" | ") });
    }
    assert!(rows.len() > 50, "only {} rows read from the Config reference", rows.len());
    rows
}

#[test]
fn every_key_the_readme_lists_is_a_config_key() {
    let schema = schema_keys();
    let rows = readme_rows();
    let mut unknown = Vec::new();
    for key in rows.iter().flat_map(|r| &r.keys) {
        match key.strip_suffix(".*") {
            // `dispatch.*`: the keys below are in the table headed `dispatch`.
            Some(section) => {
                assert!(schema.get(section).is_some_and(|k| !k.leaf), "{key}: no such section");
                let table = format!("{section}.");
                assert!(rows.iter().any(|r| r.keys.iter().any(|k| k.starts_with(&table))), "{key}: no table");
            }
            None if !schema.contains_key(key) => unknown.push(key.clone()),
            None => {}
        }
    }
    assert!(unknown.is_empty(), "the Config reference lists keys the config does not have: {unknown:?}");
}

#[test]
fn every_config_key_is_in_the_readme() {
    let rows = readme_rows();
    let row_of = |key: &str| rows.iter().find(|r| r.keys.iter().any(|k| k == key));
    let mut missing = Vec::new();
    for (key, _) in schema_keys().iter().filter(|(_, k)| k.leaf) {
        if row_of(key).is_some() {
            continue;
        }
        // A row for an object may name its keys in its text: `price` with `{input_per_mtok, …}`.
        let (name, mut above) = (key.rsplit('.').next().unwrap(), key.as_str());
        let word = regex::Regex::new(&format!(r"\b{}\b", regex::escape(name))).unwrap();
        let mut covered = false;
        while let Some((parent, _)) = above.rsplit_once('.') {
            above = parent;
            if let Some(row) = row_of(parent) {
                covered = word.is_match(&row.text);
                break;
            }
        }
        if !covered {
            missing.push(key.clone());
        }
    }
    assert!(missing.is_empty(), "config keys without a row in the Config reference: {missing:?}");
}

#[test]
fn the_readme_gives_the_schemas_defaults_and_required_keys() {
    let schema = schema_keys();
    let literal = regex::Regex::new(r"^`([^`]*)`( \(.*\))?$").unwrap();
    let mut compared = 0;
    for row in readme_rows() {
        let parts: Vec<&str> =
            if row.keys.len() == 1 { vec![row.default.as_str()] } else { row.default.split(", ").collect() };
        for (i, key) in row.keys.iter().enumerate() {
            let Some(k) = schema.get(key) else { continue };
            let says_required = row.default == "required";
            assert_eq!(says_required, k.required, "{key}: the Config reference says {:?}", row.default);
            let default = k.schema.get("default").filter(|d| !d.is_null());
            let written =
                parts.get(i).filter(|_| parts.len() == row.keys.len()).and_then(|p| literal.captures(p));
            let (Some(default), Some(written)) = (default, written) else { continue };
            let written: Value = serde_yaml_ng::from_str(&written[1]).unwrap();
            let same = match (written.as_f64(), default.as_f64()) {
                (Some(a), Some(b)) => a == b,
                _ => &written == default,
            };
            assert!(
                same,
                "{key}: the Config reference says the default is {written}, the config types {default}"
            );
            compared += 1;
        }
    }
    assert!(compared > 40, "only {compared} defaults compared");
}

#[test]
fn the_readme_says_which_kinds_take_each_backend_key() {
    let schema = schema_keys();
    let all = schema["backends[].kind"].kinds.clone();
    assert_eq!(all.len(), 8, "a branch for each kind: {all:?}");
    let hosted: BTreeSet<String> = all.iter().filter(|k| *k != "local").cloned().collect();
    let ticks = regex::Regex::new(r"`([^`]+)`").unwrap();
    let mut compared = 0;
    for row in readme_rows().iter().filter(|r| r.keys[0].starts_with("backends[].")) {
        let cell = row
            .kinds
            .as_deref()
            .unwrap_or_else(|| panic!("{:?}: the backends[] table has no kinds", row.keys));
        let said: BTreeSet<String> = match cell {
            "all" => all.clone(),
            "hosted" => hosted.clone(),
            _ => ticks.captures_iter(cell).map(|c| c[1].to_string()).collect(),
        };
        for key in &row.keys {
            // A key below a backend's key (`discovery.kubernetes`) goes with the kinds of that key.
            let top = key.strip_prefix("backends[].").unwrap().split('.').next().unwrap();
            let taken = &schema[&format!("backends[].{top}")].kinds;
            assert_eq!(
                &said, taken,
                "{key}: the Config reference says {cell:?}, the schema's branches {taken:?}"
            );
            compared += 1;
        }
    }
    assert!(compared >= 25, "only {compared} backend keys compared");
    // Each kind-specific key is named for some kinds, not all.
    assert!(schema["backends[].reserve"].kinds == BTreeSet::from(["local".to_string()]));
    assert!(schema["backends[].quota"].kinds == hosted);
}

/// One end of a range: its value and whether the value itself is allowed.
type End = Option<(f64, bool)>;

/// The ends of a key's range in the schema: `minimum` or `exclusiveMinimum`, and the same at
/// the top.
fn schema_range(schema: &Value) -> (End, End) {
    let end = |incl: &str, excl: &str| {
        (schema[incl].as_f64().map(|v| (v, true))).or(schema[excl].as_f64().map(|v| (v, false)))
    };
    (end("minimum", "exclusiveMinimum"), end("maximum", "exclusiveMaximum"))
}

/// The range ends a row's text states: `(100 to 5000)`, `0–4`, `between 0 and 1`, `at most
/// 60000`, `at least 1048576`, `above 0`, `below 1`.
fn stated_range(text: &str) -> (End, End) {
    let num = r"(-?\d+(?:\.\d+)?)";
    let both =
        regex::Regex::new(&format!(r"(?:between {num} and {num})|(?:\b{num}(?: to |–){num}\b)")).unwrap();
    let one = regex::Regex::new(&format!(r"\b(at most|at least|above|below) {num}\b")).unwrap();
    let (mut min, mut max) = (None, None);
    for c in both.captures_iter(text) {
        let (a, b) = (c.get(1).or(c.get(3)).unwrap(), c.get(2).or(c.get(4)).unwrap());
        min = Some((a.as_str().parse().unwrap(), true));
        max = Some((b.as_str().parse().unwrap(), true));
    }
    for c in one.captures_iter(text) {
        let v: f64 = c[2].parse().unwrap();
        match &c[1] {
            "at most" => max = Some((v, true)),
            "below" => max = Some((v, false)),
            "at least" => min = Some((v, true)),
            _ => min = Some((v, false)),
        }
    }
    (min, max)
}

#[test]
fn the_ranges_the_checks_apply_are_the_schemas_and_the_references() {
    let schema = schema_keys();
    let rows = readme_rows();
    let mut compared = 0;
    for (section, ranges) in spillway::config::ranges() {
        for range in ranges {
            let key = format!("{section}.{}", range.key);
            let k = schema.get(&key).unwrap_or_else(|| panic!("{key}: a range for a key the schema lacks"));
            // The schema carries the check's bounds.
            for (keyword, bound) in range.schema_keywords() {
                assert_eq!(k.schema[keyword].as_f64(), Some(bound), "{key}: the schema's {keyword}");
            }
            // The reference states them in the key's row (an object's row, `prompt_cache`, may
            // leave its keys' ranges to the schema).
            let Some(row) = rows.iter().find(|r| r.keys.contains(&key)) else { continue };
            let (min, max) = stated_range(&row.text);
            let (schema_min, schema_max) = schema_range(&k.schema);
            if range.max != spillway::config::Bound::Open {
                assert!(max.is_some(), "{key}: the Config reference does not state its range: {}", row.text);
            }
            if let Some(max) = max {
                assert_eq!(Some(max), schema_max, "{key}: the Config reference says at most {max:?}");
                compared += 1;
            }
            if let Some(min) = min {
                assert_eq!(Some(min), schema_min, "{key}: the Config reference says at least {min:?}");
                compared += 1;
            }
        }
    }
    assert!(compared >= 30, "only {compared} range ends compared with the Config reference");
}
