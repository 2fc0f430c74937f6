//! The docs against the code: the error-code table and the metric families table in
//! `docs/reference.md` are rendered here from the code (`ErrorCode::table`, the router's metric
//! registry) and must be written there exactly; every relative link between the docs resolves.
//!
//! When a table differs, the test prints the rendered one: paste it over the old.

use std::collections::BTreeSet;
use std::path::Path;

use spillway::canonical::ErrorClass;
use spillway::guard::budget::{Limit, ScopeKind};
use spillway::serve::error::ErrorCode;

const REFERENCE: &str = "docs/reference.md";
/// Every Markdown file whose links are checked.
const DOCS: &[&str] = &["README.md", REFERENCE, "helm/README.md", "vllm/README.md", "benches/README.md"];

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// When a client gets the code.
fn when(code: ErrorCode) -> String {
    use ErrorCode::*;
    let text = match code {
        InvalidRequest => "any other invalid request, an admin route's bad body or parameter included; the message (and `param`, where there is one) names what is wrong",
        InvalidJson => "the body is not one JSON object: a syntax error, bytes after the object, nesting over 128 levels, invalid UTF-8",
        InvalidType => "a field of the wrong type; `param` names it (`messages[0].role`, `stream`, `stop[1]`)",
        InvalidValue => "a value out of range (`max_tokens: 1e400`) or of the wrong shape: a `response_format` whose schema does not compile, a message without content, a `tool_choice` naming no tool; `param` names it",
        MissingField => "a required field is missing (`param: model`)",
        InvalidBody => "the body broke off, or its chunked framing is bad",
        RequestTooLarge => "the body is over `limits.max_body_bytes`",
        BodyTimeout => "the body did not arrive within `limits.body_read_timeout_ms`",
        UnsupportedMediaType => "a `content-type` that is not JSON (none at all is taken as JSON)",
        ContextLengthExceeded => "the prompt plus `max_tokens` fits no eligible backend's `max_context` (the message names the count and the largest window), or an upstream said so",
        UnsupportedCapability => "no eligible backend has what the request needs (`param`: `tools`, `messages`, `response_format`; `model` when none serves the route: embeddings, legacy completions)",
        ContentPolicyViolation => "an upstream refused the content (not failed over)",
        ModelNotFound => "no task or alias is called `model`",
        InvalidApiKey => "a missing, unknown, revoked or expired client key (never which)",
        PermissionDenied => "the key may not use this task (`allowed_keys`, an issued key's tasks)",
        RouterOverloaded => "the router is at `limits.max_concurrency` (`Retry-After: 1`)",
        Shed => "no local node has headroom for the request and every hosted backend is over its quota for its priority",
        UpstreamRateLimited => "every upstream answered 429 (`Retry-After`: the shortest wait one asked for, else 1)",
        NoEligibleBackend => "the policy leaves the task no backend; the message says why for each",
        RetryBudgetExhausted => "the retry budget is spent",
        AllBackendsFailed => "every target failed, each attempt listed (`Retry-After` as for `upstream_rate_limited`)",
        UpstreamRejected => "an upstream's own 4xx, with its status (not failed over; its reason in the message)",
        UpstreamAuth => "an upstream refused Spillway's credentials",
        Timeout => "an upstream timeout that was not failed over",
        Upstream(class) => match class {
            ErrorClass::RateLimited => "an upstream rate limit the client sees (after the answer started, non-streamed)",
            ErrorClass::Overloaded => "an upstream overload the client sees",
            ErrorClass::ServerError => "an upstream 5xx the client sees",
            ErrorClass::Connect => "the upstream connection failed or broke",
            ErrorClass::StreamBroken => "the upstream's answer broke after it started (non-streamed)",
            ErrorClass::InvalidOutput => "every answer broke the request's `response_format`",
            ErrorClass::Timeout
            | ErrorClass::Late
            | ErrorClass::InvalidRequest
            | ErrorClass::Auth
            | ErrorClass::ContentPolicy
            | ErrorClass::ContextLength => panic!("{class:?} has a code of its own"),
        },
        Route(row) => row.when,
        OverLimit(scope, limit) => {
            let whose = match scope {
                ScopeKind::Key => "the key's",
                ScopeKind::Team => "the team's",
            };
            let retry = match limit {
                _ if limit.is_budget() => "not retried",
                Limit::Concurrent => "`Retry-After: 1`",
                _ => "`Retry-After` until the next minute",
            };
            return format!("over {whose} `{}` ({retry})", limit.as_str());
        }
        LimitStateUnavailable { budget: true } => "Redis is down and `budgets.when_redis_down.budgets` is `closed`",
        LimitStateUnavailable { budget: false } => "Redis is down and `budgets.when_redis_down.rate_limits` is `closed`",
    };
    text.to_string()
}

fn error_table() -> String {
    let mut out = String::from("| status | `type` | `code` | when |\n|---|---|---|---|\n");
    let mut codes = all_codes();
    codes.sort_by_key(|c| c.table().0);
    for code in codes {
        let (status, kind, name) = code.table();
        let name = name.map_or("—".to_string(), |n| format!("`{n}`"));
        out += &format!("| {status} | `{kind}` | {name} | {} |\n", when(code));
    }
    out
}

fn metrics_table() -> String {
    let mut out = String::from("| family | type | labels | help |\n|---|---|---|---|\n");
    for f in spillway::metrics::Metrics::new().families() {
        let labels = if f.labels.is_empty() { "—".to_string() } else { f.labels.join(", ") };
        out += &format!("| `{}` | {} | {labels} | {} |\n", f.name, f.kind, f.help.replace('|', "\\|"));
    }
    out
}

/// The pipeline's codes, then the routes' outside it.
fn all_codes() -> Vec<ErrorCode> {
    let mut codes = ErrorCode::all();
    codes.extend(spillway::api::codes::ALL);
    codes
}

#[test]
fn the_error_code_table_is_the_enums() {
    let codes = all_codes();
    let names: Vec<_> = codes.iter().filter_map(|c| c.as_str()).collect();
    assert_eq!(names.len(), names.iter().collect::<BTreeSet<_>>().len(), "a code listed twice");
    let table = error_table();
    assert!(
        read(REFERENCE).contains(&table),
        "{REFERENCE}'s error-code table is not the one ErrorCode renders; write this one:\n\n{table}"
    );
}

#[test]
fn the_metric_families_table_is_the_registrys() {
    let families = spillway::metrics::Metrics::new().families();
    assert!(families.len() > 40, "only {} families registered", families.len());
    let table = metrics_table();
    assert!(
        read(REFERENCE).contains(&table),
        "{REFERENCE}'s metric families table is not the registry's; write this one:\n\n{table}"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors a Markdown file has: its headings' and its `<a id>`s.
fn anchors(text: &str) -> BTreeSet<String> {
    let id = regex::Regex::new(r#"<a id="([^"]+)">"#).unwrap();
    let mut out: BTreeSet<String> = id.captures_iter(text).map(|c| c[1].to_string()).collect();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_between_the_docs_resolves() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for doc in DOCS {
        let text = read(doc);
        let dir = Path::new(doc).parent().unwrap();
        let mut fenced = false;
        for line in text.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for target in link.captures_iter(line).map(|c| c[1].to_string()) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let file = if path.is_empty() {
                    doc.to_string()
                } else {
                    dir.join(path).to_string_lossy().into_owned()
                };
                let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(&file);
                if !full.exists() {
                    broken.push(format!("{doc}: {target} (no {file})"));
                } else if !anchor.is_empty() && !anchors(&read(&file)).contains(anchor) {
                    broken.push(format!("{doc}: {target} (no anchor #{anchor} in {file})"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links that do not resolve:\n{}", broken.join("\n"));
}
