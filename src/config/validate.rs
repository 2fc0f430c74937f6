//! Checks where the sections meet: what a task names in another section (its backends, their
//! embedding spaces, its data class, its client keys), what the budgets name, and the top-level
//! keys; `validate` runs every section's own check beside them. Each section keeps its types,
//! defaults, ranges and own check in its file. Pure: reads the config only, never the
//! environment or the network.

use std::collections::HashSet;
use std::net::SocketAddr;

use super::check::env_name;
use super::{BackendConfig, Config, EmbeddingSpace, Problem, TaskConfig, BUILTIN_DATA_CLASSES};

/// What the structural pass could not decode (its problems are reported already): checks that
/// refer to it are skipped instead of being reported a second time, on a stand-in default.
#[derive(Debug, Default)]
pub struct Undecoded {
    /// Top-level keys with a structural problem (`policy`, `ledger`); `backends` too when a
    /// backend without a readable name did not decode.
    pub sections: HashSet<String>,
    /// (list, name) of each list item that did not decode: `("backends", "b")`.
    pub names: HashSet<(String, String)>,
}

impl Undecoded {
    pub fn section(&self, key: &str) -> bool {
        self.sections.contains(key)
    }

    /// Whether `name` may be a backend that did not decode.
    pub fn may_be_backend(&self, name: &str) -> bool {
        self.section("backends") || self.names.contains(&("backends".to_string(), name.to_string()))
    }

    /// Whether some backend did not decode (its name and kind are then unknown).
    pub fn some_backend(&self) -> bool {
        self.section("backends") || self.names.iter().any(|(list, _)| list == "backends")
    }
}

/// Every semantic problem of `config`; what refers to something `undecoded` is left out.
pub fn validate(config: &Config, undecoded: &Undecoded) -> Vec<Problem> {
    let mut problems = top_level(config);
    problems.extend(super::backend::check::all(&config.backends));
    problems.extend(super::task::check::all(&config.tasks));
    for (i, task) in config.tasks.iter().enumerate() {
        problems.extend(task_references(config, undecoded, i, task));
    }
    problems.extend(config.dispatch.check());
    problems.extend(config.telemetry.check());
    problems.extend(config.queue.check());
    problems.extend(config.state.check());
    problems.extend(config.balancing.check());
    problems.extend(config.ledger.check());
    problems.extend(config.batch.check());
    problems.extend(config.issued_keys.check());
    problems.extend(config.canary.check());
    problems.extend(config.limits.check());
    problems.extend(config.access_log.check());
    problems.extend(config.affinity.check());
    problems.extend(budgets(config, undecoded));
    problems
}

/// The address to listen on and the env names given at the top level.
fn top_level(config: &Config) -> Vec<Problem> {
    let mut problems = Vec::new();
    if config.listen.parse::<SocketAddr>().is_err() {
        let why = format!("`{}` is not an address like 127.0.0.1:8080", config.listen);
        problems.push(Problem::new("listen", why));
    }
    for (i, env) in config.client_keys_env.iter().enumerate() {
        problems.extend(env_name(&format!("client_keys_env[{i}]"), env));
    }
    problems.extend(config.admin_token_env.as_deref().and_then(|env| env_name("admin_token_env", env)));
    problems
}

/// What task `i` names elsewhere: backends (once each, one embedding space among them), a
/// known data class, client keys in `client_keys_env`.
fn task_references(config: &Config, undecoded: &Undecoded, i: usize, t: &TaskConfig) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut p =
        |key: String, message: String| problems.push(Problem::new(format!("tasks[{i}].{key}"), message));
    let mut seen = HashSet::new();
    // The first backend of the task with an embedding space, and that space.
    let mut space: Option<(&str, &EmbeddingSpace)> = None;
    for (j, name) in t.backends.iter().enumerate() {
        let Some(backend) = config.backend(name) else {
            if !undecoded.may_be_backend(name) {
                p(format!("backends[{j}]"), format!("no backend is named `{name}`"));
            }
            continue;
        };
        if !seen.insert(name) {
            p(format!("backends[{j}]"), format!("`{name}` is listed twice"));
        }
        match (backend.embedding_space.as_ref(), space) {
            (Some(own), None) => space = Some((name, own)),
            (Some(own), Some((first, first_space))) if own != first_space => {
                p(format!("backends[{j}]"), mixed_spaces(t, backend, first, first_space))
            }
            _ => {}
        }
    }
    let known = BUILTIN_DATA_CLASSES.contains(&t.data_class.as_str())
        || config.policy.data_classes.contains_key(&t.data_class);
    if !known && !undecoded.section("policy") {
        let mut all: Vec<&str> = BUILTIN_DATA_CLASSES.to_vec();
        all.extend(config.policy.data_classes.keys().map(String::as_str));
        p("data_class".into(), format!("unknown data class `{}`; known: {}", t.data_class, all.join(", ")));
    }
    for (j, key) in t.allowed_keys.iter().flatten().enumerate() {
        if !config.client_keys_env.contains(key) && !undecoded.section("client_keys_env") {
            p(format!("allowed_keys[{j}]"), format!("`{key}` is not in client_keys_env"));
        }
    }
    problems
}

fn mixed_spaces(
    t: &TaskConfig,
    backend: &BackendConfig,
    first: &str,
    first_space: &EmbeddingSpace,
) -> String {
    let own = backend.embedding_space.as_ref().map_or("", |s| s.as_str());
    format!(
        "task `{}` mixes embedding spaces: `{}` has embedding_space `{own}`, `{first}` has `{}`; \
         vectors of different spaces cannot be compared, so a task's backends must share one",
        t.name,
        backend.name,
        first_space.as_str()
    )
}

/// The budgets' own check, with the client keys they may name; nothing when the section (or
/// the keys' list) did not decode.
fn budgets(config: &Config, undecoded: &Undecoded) -> Vec<Problem> {
    if undecoded.section("budgets") {
        return Vec::new();
    }
    let keys_undecoded = undecoded.section("client_keys_env");
    let keys: &[String] = if keys_undecoded { &[] } else { &config.client_keys_env };
    let mut found = super::budgets::check(&config.budgets, keys);
    if keys_undecoded {
        found.retain(|p| !p.message.contains("client_keys_env"));
    }
    found
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    #[test]
    fn semantic_problems_are_all_reported() {
        let text = r#"
listen: not-an-address
backends:
  - {name: a, kind: vllm, model: m}
  - {name: a, kind: openai, model: m, base_url: "ftp://x", price: {input_per_mtok: -1, output_per_mtok: 1}}
tasks:
  - {name: t, backends: [a, ghost], data_class: secret, slo: {ttft_ms: 0}}
dispatch: {max_attempts: 0}
affinity: {session_headers: [X-Session-Id, "x session"]}
issued_keys: {refresh_ms: 6000}
state: {operator_poll_ms: 50}
limits: {shutdown_delay_ms: 300001}
ledger: {spool: {max_bytes: 1000, fsync_interval_ms: 0, dir: " "}}
balancing: {slow_signal: {min_slow: 1000001, share: 0}, sticky_spill: {return_below: 1.5}}
"#;
        let problems = parse(text).unwrap_err();
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        for expected in [
            "listen: `not-an-address`",
            "backends[0].endpoints: a local backend needs",
            "backends[1].name: `a` is used by another backend",
            "backends[1].base_url: `ftp://x`: scheme",
            "backends[1].price.input_per_mtok: must not be negative",
            "tasks[0].backends[1]: no backend is named `ghost`",
            "tasks[0].data_class: unknown data class `secret`",
            "tasks[0].slo.ttft_ms: must be above 0",
            "dispatch.max_attempts: must be at least 1",
            "affinity.session_headers[1]: `x session` is not an HTTP header name",
            "issued_keys.refresh_ms: 6000 is out of range: 100 to 5000",
            "state.operator_poll_ms: 50 is out of range: 100 to 10000",
            "limits.shutdown_delay_ms: must be at most 300000 (5 minutes)",
            "ledger.spool.max_bytes: 1000 is too small",
            "ledger.spool.fsync_interval_ms: 0 is out of range: 1 to 1000",
            "ledger.spool.dir: must not be empty",
            "balancing.slow_signal.share: must be above 0 and at most 1",
            "balancing.slow_signal.min_slow: must be at most 1000000",
            "balancing.sticky_spill.return_below: must be between 0 and 1",
        ] {
            assert!(text.iter().any(|t| t.starts_with(expected)), "missing {expected:?} in {text:#?}");
        }
        assert!(!text.iter().any(|t| t.starts_with("affinity.session_headers[0]")), "any case: {text:#?}");
    }

    #[test]
    fn a_task_may_not_mix_embedding_spaces_and_only_openai_wire_kinds_have_one() {
        let config = |spaces: [&str; 3]| {
            let backend = |name: &str, kind: &str, space: &str| {
                match space {
                "" => format!("  - {{name: {name}, kind: {kind}, model: m, base_url: \"http://h:1/v1\"}}\n"),
                space => format!(
                    "  - {{name: {name}, kind: {kind}, model: m, base_url: \"http://h:1/v1\", embedding_space: {space}}}\n"
                ),
            }
            };
            format!(
                "backends:\n{}{}{}tasks:\n  - {{name: search, backends: [a, b, c], slo: {{ttft_ms: 500}}}}\n",
                backend("a", "openai_compatible", spaces[0]),
                backend("b", "openai", spaces[1]),
                backend("c", "openai_compatible", spaces[2]),
            )
        };
        // One space, and a backend without embeddings beside it: fine.
        assert!(parse(&config(["e5", "e5", ""])).is_ok());
        let problems = parse(&config(["e5", "", "bge"])).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:#?}");
        let text = problems[0].to_string();
        assert!(text.starts_with("tasks[0].backends[2]: task `search` mixes embedding spaces"), "{text}");
        assert!(text.contains("`c` has embedding_space `bge`, `a` has `e5`"), "{text}");

        let problems = parse(
            "backends: [{name: a, kind: anthropic, model: m, embedding_space: e5}]\n\
             tasks: [{name: t, backends: [a], slo: {ttft_ms: 500}}]\n",
        )
        .unwrap_err();
        assert_eq!(
            problems[0].to_string(),
            "backends[0].embedding_space: `embedding_space` does not apply to kind anthropic; \
             only kinds local, openai, openai_compatible, azure_openai take it"
        );
    }

    #[test]
    fn an_agent_on_the_host_needs_pod_discovery() {
        let with = |discovery: &str| {
            crate::config::parse(&format!(
                "backends: [{{name: p, kind: vllm, model: m, endpoints: [\"http://10.0.0.1:8000\"], agent_port: 9400, \
                 agent_address: host{discovery}}}]\ntasks: [{{name: t, backends: [p], slo: {{ttft_ms: 500}}}}]\n"
            ))
        };
        let problems = with("").unwrap_err();
        assert!(problems[0].to_string().contains("backends[0].agent_address"), "{problems:?}");
        assert!(with(
            ", discovery: {kubernetes: {namespace: llm, selector: app=vllm, resource: endpointslices}}"
        )
        .is_err());
        assert!(with(", discovery: {kubernetes: {namespace: llm, selector: app=vllm}}").is_ok());
    }
}
