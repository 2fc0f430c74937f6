//! The adapters let upstream text out only through the redactor: every function in
//! `src/adapter` whose result can carry an upstream's words (an error, an event stream, a
//! body) is visible only inside the adapter module, except the few entries named here, and each
//! entry goes through a [`super::CallRedactor`]. The same holds for the one caller of upstreams
//! outside it, the providers' batch client (`src/batch/provider_api.rs`, a batch's results). A new way out (a wire
//! function made `pub(crate)` for another module to call, a new entry) fails this test until it
//! is scrubbed and listed.

use std::path::{Path, PathBuf};

/// Types whose values carry an upstream's words.
const UPSTREAM_TEXT: [&str; 6] =
    ["UpstreamError", "EventStream", "ByteStream", "Answer", "Polled", "LineResult"];

/// The ways out: (file below `src/adapter`, function), each scrubbing what it returns.
const ENTRIES: [(&str, &str); 4] = [
    ("mod.rs", "send"),
    ("mod.rs", "count_tokens"),
    ("../batch/provider_api.rs", "poll"),
    // The relay bench's reading of an answer's bytes.
    ("wire/openai/stream.rs", "events_of"),
];

/// Visibilities that keep an item inside `crate::adapter`.
fn stays_inside(visibility: &str) -> bool {
    visibility.is_empty()
        || visibility == "pub(super)"
        || visibility == "pub(self)"
        || visibility == "pub(in crate::adapter)"
        || visibility.starts_with("pub(in crate::adapter::")
}

/// One function item: its visibility, name, signature and body.
struct Item {
    visibility: String,
    name: String,
    signature: String,
    body: String,
}

/// The `.rs` files below `dir`, tests left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if path.is_dir() && name != "tests" {
            sources(&path, out);
        } else if name.ends_with(".rs") && !name.ends_with("tests.rs") {
            out.push(path);
        }
    }
}

/// `text` without its test code: each item under `#[cfg(test)]` (a `mod tests;` line, or an
/// item up to its closing brace), wherever it stands.
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let end = match (after.find(';'), after.find('{')) {
            (Some(semi), Some(open)) if semi < open => semi + 1,
            (_, Some(open)) => open + block(&after[open..]).len(),
            (Some(semi), None) => semi + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The function items of `text`, its test code left out.
fn items(text: &str) -> Vec<Item> {
    let text = without_tests(text);
    let mut found = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = find_fn(rest) {
        let line_start = rest[..at].rfind('\n').map_or(0, |n| n + 1);
        let head =
            rest[line_start..at].trim().trim_end_matches("async").trim().trim_end_matches("const").trim();
        let after = &rest[at + 3..];
        let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let open = after.find(['{', ';']).unwrap_or(after.len());
        let signature = after[name.len()..open].to_string();
        let body = match after[open..].starts_with('{') {
            true => block(&after[open..]).to_string(),
            false => String::new(),
        };
        found.push(Item { visibility: head.to_string(), name, signature, body });
        rest = &after[open..];
    }
    found
}

/// Where the next `fn ` item starts in `text` (at a line's start, after its visibility).
fn find_fn(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find("fn ").map(|n| n + from) {
        let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
        let head = text[line_start..at].trim();
        // A restricted visibility (`pub(in crate::adapter)`) is one word here.
        let head = match head.strip_prefix("pub(").and_then(|h| h.split_once(')')) {
            Some((_, rest)) => rest,
            None => head,
        };
        if head.split_whitespace().all(|w| matches!(w, "pub" | "async" | "const" | "unsafe")) {
            return Some(at);
        }
        from = at + 3;
    }
    None
}

/// The `{…}` block `text` starts with.
fn block(text: &str) -> &str {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[..=i];
                }
            }
            _ => {}
        }
    }
    text
}

/// Whether `signature`'s result names a type that carries upstream text.
fn returns_upstream_text(signature: &str) -> bool {
    let Some((_, result)) = signature.rsplit_once("->") else { return false };
    result.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| UPSTREAM_TEXT.contains(&word))
}

#[test]
fn upstream_text_leaves_the_adapters_only_through_the_redactor() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/adapter");
    let mut files = vec![root.join("../batch/provider_api.rs")];
    sources(&root, &mut files);
    let mut ways_out = Vec::new();
    let mut entries_seen = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        if relative.starts_with("redact/") {
            continue; // The redactor itself.
        }
        let text = std::fs::read_to_string(file).unwrap();
        for item in items(&text).into_iter().filter(|i| returns_upstream_text(&i.signature)) {
            let entry = ENTRIES.contains(&(relative.as_str(), item.name.as_str()));
            if entry {
                entries_seen.push((relative.clone(), item.name.clone()));
                assert!(
                    ["CallRedactor::of(", "CallRedactor::new("].iter().any(|call| item.body.contains(call)),
                    "{relative}: `{}` lets upstream text out, so it must go through a CallRedactor",
                    item.name
                );
            } else if !stays_inside(&item.visibility) {
                ways_out.push(format!(
                    "{relative}: {} fn {}{}",
                    item.visibility,
                    item.name,
                    item.signature.trim()
                ));
            }
        }
    }
    assert!(
        ways_out.is_empty(),
        "these let upstream text out of src/adapter without the redactor; make them pub(in crate::adapter) \
         or scrub them and list them in ENTRIES:\n{}",
        ways_out.join("\n")
    );
    for (file, name) in ENTRIES {
        assert!(
            entries_seen.iter().any(|(f, n)| f == file && n == name),
            "{file}: `{name}` is listed as a way out but was not found"
        );
    }
}

#[test]
fn the_scan_sees_visibilities_signatures_and_bodies() {
    let text = "/// fn in a comment\npub(crate) fn classify(status: u16) -> UpstreamError {\n    if x { y }\n}\n\
                pub(in crate::adapter) async fn send(a: &str)\n    -> Result<EventStream, UpstreamError> {\n    CallRedactor::of(a)\n}\n\
                #[cfg(test)]\nmod tests;\n\
                fn private() -> Answer;\npub fn other() -> Answered {}\n#[cfg(test)]\npub fn hidden() -> UpstreamError { x }\n\
                pub fn after_the_tests() -> UpstreamError {}";
    let found = items(text);
    let names: Vec<&str> = found.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        ["classify", "send", "private", "other", "after_the_tests"],
        "test code is skipped, not the rest"
    );
    assert_eq!(found[0].visibility, "pub(crate)");
    assert!(!stays_inside(&found[0].visibility) && returns_upstream_text(&found[0].signature));
    assert_eq!(found[0].body, "{\n    if x { y }\n}");
    assert!(stays_inside(&found[1].visibility) && returns_upstream_text(&found[1].signature));
    assert!(found[1].body.contains("CallRedactor"));
    assert!(stays_inside(&found[2].visibility) && returns_upstream_text(&found[2].signature));
    assert!(!returns_upstream_text(&found[3].signature), "Answered is another word");
}
