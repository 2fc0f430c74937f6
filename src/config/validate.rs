//! Checks that types alone cannot make: names that must exist, ranges, URLs, addresses.
//! Pure: reads the config only, never the environment or the network.

use std::collections::HashSet;
use std::net::SocketAddr;

use super::{AgentAddress, BackendSpec, Config, EmbeddingSpace, KubeResource, PoolSpec, Problem, Strategy};
use crate::canonical::MAX_BREAKPOINTS;

/// Data classes that exist without being listed under `policy.data_classes`.
/// The longest `limits.shutdown_delay_ms` (a pod that waits longer holds up a rollout).
const MAX_SHUTDOWN_DELAY_MS: u64 = 300_000;

pub const BUILTIN_DATA_CLASSES: &[&str] = &["public", "internal"];

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

pub fn validate(config: &Config, undecoded: &Undecoded) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut p = |path: String, message: String| problems.push(Problem::new(path, message));

    if config.listen.parse::<SocketAddr>().is_err() {
        p("listen".into(), format!("`{}` is not an address like 127.0.0.1:8080", config.listen));
    }
    for (i, env) in config.client_keys_env.iter().enumerate() {
        if !is_env_name(env) {
            p(format!("client_keys_env[{i}]"), format!("`{env}` is not an environment variable name"));
        }
    }

    let mut names = HashSet::new();
    for (i, b) in config.backends.iter().enumerate() {
        let at = |key: &str| format!("backends[{i}].{key}");
        if b.name.is_empty() {
            p(at("name"), "must not be empty".into());
        } else if !names.insert(b.name.as_str()) {
            p(at("name"), format!("`{}` is used by another backend", b.name));
        }
        if b.model.is_empty() {
            p(at("model"), "must not be empty".into());
        }
        for (j, url) in b.endpoints().iter().enumerate() {
            if let Some(why) = bad_url(url) {
                p(format!("backends[{i}].endpoints[{j}]"), why);
            }
        }
        if let Some(env) = &b.api_key_env {
            if !is_env_name(env) {
                p(at("api_key_env"), format!("`{env}` is not an environment variable name"));
            }
        }
        if let Some(price) = &b.price {
            let parts = [
                ("input_per_mtok", Some(price.input_per_mtok)),
                ("cached_input_per_mtok", price.cached_input_per_mtok),
                ("output_per_mtok", Some(price.output_per_mtok)),
                ("cache_write_per_mtok", price.cache_write_per_mtok),
            ];
            for (key, value) in parts {
                if value.is_some_and(|v| v.is_sign_negative()) {
                    p(at(&format!("price.{key}")), "must not be negative".into());
                }
            }
        }
        if let Some(cache) = b.prompt_cache.filter(|c| c.last_turns > MAX_BREAKPOINTS) {
            let why = format!(
                "at most {MAX_BREAKPOINTS} (Anthropic takes 4 breakpoints a request), not {}",
                cache.last_turns
            );
            p(at("prompt_cache.last_turns"), why);
        }
        match &b.spec {
            BackendSpec::Local(pool) => check_pool(pool, &at, &mut p),
            BackendSpec::OpenaiCompatible(c) if c.endpoints.is_empty() && c.hosted.base_url.is_none() => {
                p(at("base_url"), "an openai_compatible backend needs base_url or endpoints".into())
            }
            _ => {}
        }
        if let Some(hosted) = b.hosted() {
            if let Some(why) = hosted.base_url.as_deref().and_then(bad_url) {
                p(at("base_url"), why);
            }
            if let Some(q) = &hosted.quota {
                if q.rpm == Some(0) || q.tpm == Some(0) {
                    p(at("quota"), "a limit of 0 would refuse everything; leave it out for no limit".into());
                }
            }
        }
        for (key, why) in b.terms.problems() {
            p(at(&format!("terms.{key}")), why);
        }
        if b.max_inflight_per_node == Some(0) {
            p(at("max_inflight_per_node"), "must be at least 1 (leave it out for no limit)".into());
        }
        if b.capabilities.max_context == Some(0) {
            p(
                at("capabilities.max_context"),
                "must be at least 1 (leave it out for the kind's default)".into(),
            );
        }
        if let Some(space) = &b.embedding_space {
            if space.as_str().trim().is_empty() {
                p(
                    at("embedding_space"),
                    "must not be empty (leave it out for a backend without embeddings)".into(),
                );
            }
        }
        if let Some(file) = &b.tokenizer_file {
            if file.as_os_str().is_empty() {
                p(at("tokenizer_file"), "must not be empty".into());
            } else if b.tokenizer.is_some() {
                p(at("tokenizer"), "set either tokenizer or tokenizer_file, not both".into());
            }
        }
    }

    let mut task_names = HashSet::new();
    for (i, t) in config.tasks.iter().enumerate() {
        let at = |key: &str| format!("tasks[{i}].{key}");
        if t.name.is_empty() {
            p(at("name"), "must not be empty".into());
        } else if !task_names.insert(t.name.as_str()) {
            p(at("name"), format!("`{}` is used by another task", t.name));
        }
        for (j, alias) in t.aliases.iter().enumerate() {
            if alias.is_empty() {
                p(at(&format!("aliases[{j}]")), "must not be empty".into());
            } else if !task_names.insert(alias.as_str()) {
                p(at(&format!("aliases[{j}]")), format!("`{alias}` already names a task or an alias"));
            }
        }
        if t.backends.is_empty() {
            p(at("backends"), "must name at least one backend".into());
        }
        let mut seen = HashSet::new();
        // The first backend of the task with an embedding space, and that space.
        let mut space: Option<(&str, &EmbeddingSpace)> = None;
        for (j, name) in t.backends.iter().enumerate() {
            let Some(backend) = config.backend(name) else {
                if undecoded.may_be_backend(name) {
                    continue;
                }
                p(format!("tasks[{i}].backends[{j}]"), format!("no backend is named `{name}`"));
                continue;
            };
            if !seen.insert(name) {
                p(format!("tasks[{i}].backends[{j}]"), format!("`{name}` is listed twice"));
            }
            match (backend.embedding_space.as_ref(), space) {
                (Some(own), None) => space = Some((name, own)),
                (Some(own), Some((first, first_space))) if own != first_space => p(
                    format!("tasks[{i}].backends[{j}]"),
                    format!(
                        "task `{}` mixes embedding spaces: `{name}` has embedding_space `{}`, `{first}` has `{}`; \
                         vectors of different spaces cannot be compared, so a task's backends must share one",
                        t.name,
                        own.as_str(),
                        first_space.as_str()
                    ),
                ),
                _ => {}
            }
        }
        for (name, weight) in &t.weights {
            if !t.backends.contains(name) {
                p(at(&format!("weights.{name}")), "is not one of this task's backends".into());
            }
            if !(weight.is_finite() && *weight >= 0.0) {
                p(at(&format!("weights.{name}")), "must be a number ≥ 0".into());
            }
        }
        if !t.weights.is_empty() && t.strategy != Strategy::Weighted {
            p(at("weights"), "only used with strategy: weighted".into());
        }
        let known = BUILTIN_DATA_CLASSES.contains(&t.data_class.as_str())
            || config.policy.data_classes.contains_key(&t.data_class);
        if !known && !undecoded.section("policy") {
            let mut all: Vec<&str> = BUILTIN_DATA_CLASSES.to_vec();
            all.extend(config.policy.data_classes.keys().map(String::as_str));
            p(at("data_class"), format!("unknown data class `{}`; known: {}", t.data_class, all.join(", ")));
        }
        if !(0.0..1.0).contains(&t.slo.margin) {
            p(at("slo.margin"), "must be at least 0 and below 1".into());
        }
        for (key, v) in [("slo.objective", t.slo.objective), ("slo.availability", t.slo.availability)] {
            if !(v > 0.0 && v < 1.0) {
                p(at(key), "must be above 0 and below 1 (e.g. 0.99)".into());
            }
        }
        if t.slo.ttft_ms == 0 {
            p(at("slo.ttft_ms"), "must be above 0".into());
        }
        if t.max_output_tokens == Some(0) {
            p(at("max_output_tokens"), "must be at least 1".into());
        }
        for (j, key) in t.allowed_keys.iter().flatten().enumerate() {
            if !config.client_keys_env.contains(key) && !undecoded.section("client_keys_env") {
                p(format!("tasks[{i}].allowed_keys[{j}]"), format!("`{key}` is not in client_keys_env"));
            }
        }
    }

    let d = &config.dispatch;
    if d.ttft_deadline_factor.is_nan() || d.ttft_deadline_factor < 1.0 {
        p("dispatch.ttft_deadline_factor".into(), "must be at least 1".into());
    }
    if d.max_attempts == 0 {
        p("dispatch.max_attempts".into(), "must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&d.retry_budget_ratio) {
        p("dispatch.retry_budget_ratio".into(), "must be between 0 and 1".into());
    }
    if !(0.0..=1.0).contains(&d.breaker.error_rate) || d.breaker.error_rate == 0.0 {
        p("dispatch.breaker.error_rate".into(), "must be above 0 and at most 1".into());
    }
    if d.breaker.consecutive_failures == 0 {
        p("dispatch.breaker.consecutive_failures".into(), "must be at least 1".into());
    }
    if d.backoff_base_ms > d.backoff_max_ms {
        p("dispatch.backoff_base_ms".into(), "must not exceed backoff_max_ms".into());
    }
    let t = &config.telemetry;
    if t.interval_ms < 50 {
        p("telemetry.interval_ms".into(), "must be at least 50".into());
    }
    if !(0.0..=0.5).contains(&t.jitter) {
        p("telemetry.jitter".into(), "must be between 0 and 0.5".into());
    }
    if t.stale_after_ms <= t.interval_ms {
        p("telemetry.stale_after_ms".into(), "must be longer than interval_ms".into());
    }
    if t.gauge_lag_ms > 60_000 {
        p("telemetry.gauge_lag_ms".into(), "must be at most 60000".into());
    }
    if t.startup_wait_ms > 600_000 {
        p("telemetry.startup_wait_ms".into(), "must be at most 600000".into());
    }
    if !(1..=16).contains(&t.scrape_replicas) {
        p("telemetry.scrape_replicas".into(), "must be between 1 and 16".into());
    }
    if config.state.redis_url.is_some() && config.state.redis_url_env.is_some() {
        p("state.redis_url_env".into(), "give redis_url or redis_url_env, not both".into());
    }
    if let Some(url) = &config.state.redis_url {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            p("state.redis_url".into(), format!("`{url}` must start with redis:// or rediss://"));
        }
    }
    let b = &config.balancing;
    if b.interval_secs == 0 {
        p("balancing.interval_secs".into(), "must be at least 1".into());
    }
    if b.affinity_window_secs == 0 {
        p("balancing.affinity_window_secs".into(), "must be at least 1".into());
    }
    if !(b.error_weight.is_finite() && b.error_weight > 0.0) {
        p("balancing.error_weight".into(), "must be above 0".into());
    }
    for (key, gain) in [("kp", b.kp), ("ki", b.ki), ("kd", b.kd), ("slow_weight", b.slow_weight)] {
        if !(gain.is_finite() && gain >= 0.0) {
            p(format!("balancing.{key}"), "must be a number ≥ 0".into());
        }
    }
    let share = b.slow_signal.share;
    if !(share.is_finite() && share > 0.0 && share <= 1.0) {
        p("balancing.slow_signal.share".into(), "must be above 0 and at most 1".into());
    }
    if b.slow_signal.min_slow > 1_000_000 {
        p("balancing.slow_signal.min_slow".into(), "must be at most 1000000".into());
    }
    let s = &b.sticky_spill;
    if !(s.margin.is_finite() && s.margin > 0.0 && s.margin < 1.0) {
        p("balancing.sticky_spill.margin".into(), "must be between 0 and 1".into());
    }
    for (key, rate) in
        [("down_per_sec", s.down_per_sec), ("up_per_sec", s.up_per_sec), ("refused_max", s.refused_max)]
    {
        if !(rate.is_finite() && rate > 0.0 && rate <= 1.0) {
            p(format!("balancing.sticky_spill.{key}"), "must be above 0 and at most 1".into());
        }
    }
    if !(s.return_below.is_finite() && (0.0..=1.0).contains(&s.return_below)) {
        p("balancing.sticky_spill.return_below".into(), "must be between 0 and 1".into());
    }
    let l = &config.ledger;
    if l.url.is_some() && l.url_env.is_some() {
        p("ledger.url_env".into(), "give url or url_env, not both".into());
    }
    if let Some(url) = &l.url {
        if !(url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            p("ledger.url".into(), format!("`{url}` must start with sqlite:// or postgres://"));
        }
    }
    let sp = &l.spool;
    if sp.max_bytes < 1 << 20 {
        p(
            "ledger.spool.max_bytes".into(),
            format!("{} is too small: at least 1048576 (1 MiB)", sp.max_bytes),
        );
    }
    if !(1..=1_000).contains(&sp.fsync_interval_ms) {
        let ms = sp.fsync_interval_ms;
        p("ledger.spool.fsync_interval_ms".into(), format!("{ms} is out of range: 1 to 1000"));
    }
    if sp.dir.as_deref().is_some_and(|d| d.trim().is_empty()) {
        p("ledger.spool.dir".into(), "must not be empty (leave it out for the default)".into());
    }
    for (key, env) in [("ledger.url_env", &l.url_env), ("admin_token_env", &config.admin_token_env)] {
        if let Some(env) = env.as_deref().filter(|e| !is_env_name(e)) {
            p(key.into(), format!("`{env}` is not an environment variable name"));
        }
    }
    if !(100..=5_000).contains(&config.issued_keys.refresh_ms) {
        let ms = config.issued_keys.refresh_ms;
        p(
            "issued_keys.refresh_ms".into(),
            format!("{ms} is out of range: 100 to 5000 (a revocation must reach every replica within 5 s)"),
        );
    }
    if !(100..=10_000).contains(&config.state.operator_poll_ms) {
        let ms = config.state.operator_poll_ms;
        p("state.operator_poll_ms".into(), format!("{ms} is out of range: 100 to 10000"));
    }
    if config.canary.max_tokens == 0 {
        p("canary.max_tokens".into(), "must be at least 1".into());
    }
    if config.canary.prompt.trim().is_empty() {
        p("canary.prompt".into(), "must not be empty".into());
    }
    if config.limits.max_concurrency == 0 {
        p("limits.max_concurrency".into(), "must be at least 1".into());
    }
    if config.limits.max_body_bytes < 1024 {
        p("limits.max_body_bytes".into(), "must be at least 1024".into());
    }
    let limits = &config.limits;
    for (key, ms) in [
        ("limits.header_read_timeout_ms", limits.header_read_timeout_ms),
        ("limits.body_read_timeout_ms", limits.body_read_timeout_ms),
        ("limits.idle_timeout_ms", limits.idle_timeout_ms),
    ] {
        if ms == 0 {
            p(key.into(), "must be at least 1".into());
        }
    }
    // hyper's HTTP/1 parser needs room for at least one 8 KiB read.
    if limits.max_header_bytes < 8192 {
        p("limits.max_header_bytes".into(), "must be at least 8192".into());
    }
    if !(0.0..=1.0).contains(&config.access_log.sample) {
        p("access_log.sample".into(), "must be between 0 and 1".into());
    }
    if limits.shutdown_delay_ms > MAX_SHUTDOWN_DELAY_MS {
        p("limits.shutdown_delay_ms".into(), format!("must be at most {MAX_SHUTDOWN_DELAY_MS} (5 minutes)"));
    }
    if limits.max_headers == 0 {
        p("limits.max_headers".into(), "must be at least 1".into());
    }
    for (i, name) in config.affinity.session_headers.iter().enumerate() {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            p(format!("affinity.session_headers[{i}]"), format!("`{name}` is not an HTTP header name"));
        }
    }
    if !undecoded.section("budgets") {
        let keys: &[String] =
            if undecoded.section("client_keys_env") { &[] } else { &config.client_keys_env };
        let mut found = super::budgets::check(&config.budgets, keys);
        if undecoded.section("client_keys_env") {
            found.retain(|p| !p.message.contains("client_keys_env"));
        }
        problems.extend(found);
    }
    problems
}

/// What types cannot say about a pool: that it has nodes, and the ranges of its numbers.
fn check_pool(pool: &PoolSpec, at: &dyn Fn(&str) -> String, p: &mut dyn FnMut(String, String)) {
    if pool.endpoints.is_empty() && pool.discovery.is_none() {
        p(at("endpoints"), "a local backend needs at least one node address (or discovery)".into());
    }
    if !(0.0..1.0).contains(&pool.reserve) {
        p(at("reserve"), "must be at least 0 and below 1".into());
    }
    if pool.gpu_count == 0 {
        p(at("gpu_count"), "must be at least 1".into());
    }
    if pool.gpu_hourly_usd.is_some_and(|v| v.is_sign_negative()) {
        p(at("gpu_hourly_usd"), "must not be negative".into());
    }
    if pool.max_running == 0 {
        p(at("max_running"), "must be at least 1".into());
    }
    if pool.agent_address == AgentAddress::Host
        && !pool.discovery.as_ref().is_some_and(|d| d.kubernetes.resource == KubeResource::Pods)
    {
        p(
            at("agent_address"),
            "`host` needs discovery.kubernetes with resource: pods (it reads status.hostIP)".into(),
        );
    }
    if let Some(k) = pool.discovery.as_ref().map(|d| &d.kubernetes) {
        if k.namespace.is_empty() {
            p(at("discovery.kubernetes.namespace"), "must not be empty".into());
        }
        if k.selector.is_empty() {
            p(at("discovery.kubernetes.selector"), "must not be empty (it would select every pod)".into());
        }
    }
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn bad_url(url: &str) -> Option<String> {
    match reqwest::Url::parse(url) {
        Ok(u) if u.scheme() == "http" || u.scheme() == "https" => None,
        Ok(u) => Some(format!("`{url}`: scheme must be http or https, not {}", u.scheme())),
        Err(e) => Some(format!("`{url}` is not a URL: {e}")),
    }
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
    fn the_spool_sits_beside_a_sqlite_ledger_unless_told() {
        use std::path::PathBuf;
        let spool = crate::config::SpoolSettings::default();
        assert_eq!(
            spool.dir_for("sqlite:///var/lib/s/l.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/s/l.db.spool"))
        );
        let pg = spool.dir_for("postgres://db/ledger").unwrap();
        assert!(pg.starts_with(std::env::temp_dir()), "{pg:?}");
        let name = pg.file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("spillway-spool-") && name.len() == 31, "{name}: no password in a path");
        assert_ne!(spool.dir_for("postgres://db/other"), Some(pg), "one spool per store");
        assert_eq!(spool.dir_for("sqlite::memory:"), None);
        let set = crate::config::SpoolSettings { dir: Some("/spool".into()), ..spool.clone() };
        assert_eq!(set.dir_for("postgres://db/ledger"), Some(PathBuf::from("/spool")));
        let off = crate::config::SpoolSettings { enabled: false, ..spool };
        assert_eq!(off.dir_for("sqlite://l.db"), None);
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
             only kinds local, openai, openai_compatible take it"
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
