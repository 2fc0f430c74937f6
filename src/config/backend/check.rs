//! What types cannot say about the backends: unique names, URLs, env names, prices, and the
//! ranges of each backend's numbers (by kind: a pool's capacity, an Anthropic cache's marks).
//! Pure: reads the config only. What refers to a backend from elsewhere (a task) is checked
//! where the sections meet (`validate`).

use std::collections::HashSet;

use super::super::check::{bad_url, env_name};
use super::super::range::{self, Bound, Range, Says};
use super::{AgentAddress, BackendConfig, BackendSpec, KubeResource, PoolSpec};
use crate::canonical::MAX_BREAKPOINTS;
use crate::config::Problem;

impl BackendConfig {
    /// The ranges of a backend's numbers (keys below `backends[]`); each applies to the kinds
    /// that have the key.
    pub const RANGES: &'static [Range] = &[
        Range::at_least("max_inflight_per_node", 1.0).note(" (leave it out for no limit)"),
        Range::at_least("capabilities.max_context", 1.0).note(" (leave it out for the kind's default)"),
        Range::new("prompt_cache.last_turns", Bound::Open, Bound::Incl(MAX_BREAKPOINTS as f64))
            .says(Says::AtMostNot)
            .note(" (Anthropic takes 4 breakpoints a request)"),
        Range::new("reserve", Bound::Incl(0.0), Bound::Excl(1.0)),
        Range::at_least("gpu_count", 1.0),
        Range::at_least("max_running", 1.0),
        Range::at_least("quota.output_token_weight", 1.0),
    ];
}

/// Every backend's problems, and names used twice.
pub fn all(backends: &[BackendConfig]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    for (i, b) in backends.iter().enumerate() {
        let at = format!("backends[{i}]");
        if b.name.is_empty() {
            problems.push(Problem::new(format!("{at}.name"), "must not be empty"));
        } else if !names.insert(b.name.as_str()) {
            problems
                .push(Problem::new(format!("{at}.name"), format!("`{}` is used by another backend", b.name)));
        }
        problems.extend(check(b, &at));
    }
    problems
}

/// One backend's problems, each at `at.KEY`.
fn check(b: &BackendConfig, at: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut p = |key: &str, message: String| problems.push(Problem::new(format!("{at}.{key}"), message));
    if b.model.is_empty() {
        p("model", "must not be empty".into());
    }
    for (j, url) in b.endpoints().iter().enumerate() {
        if let Some(why) = bad_url(url) {
            p(&format!("endpoints[{j}]"), why);
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
                p(&format!("price.{key}"), "must not be negative".into());
            }
        }
    }
    if let BackendSpec::OpenaiCompatible(c) = &b.spec {
        if c.endpoints.is_empty() && c.hosted.base_url.is_none() {
            p("base_url", "an openai_compatible backend needs base_url or endpoints".into());
        }
    }
    if let BackendSpec::AzureOpenai(a) = &b.spec {
        if a.hosted.base_url.is_none() {
            p("base_url", "an azure_openai backend needs base_url: its resource's v1 API (https://NAME.openai.azure.com/openai/v1), or the resource with deployment and api_version".into());
        }
        match (&a.deployment, &a.api_version) {
            (Some(d), _) if d.is_empty() => p("deployment", "must not be empty".into()),
            (Some(_), None) => {
                p("api_version", "a legacy deployment needs api_version (e.g. 2024-10-21)".into())
            }
            (_, Some(v)) if v.is_empty() => p("api_version", "must not be empty".into()),
            _ => {}
        }
    }
    match &b.spec {
        BackendSpec::Bedrock(_) if b.region.as_deref().is_none_or(str::is_empty) => p(
            "region",
            "a bedrock backend needs region: the AWS region it calls and signs for (e.g. us-east-1)".into(),
        ),
        BackendSpec::Vertex(v) => {
            if v.project.is_empty() {
                p("project", "a vertex backend needs project: the Google Cloud project it bills".into());
            }
            if v.location.is_empty() {
                p("location", "a vertex backend needs location: its region (e.g. us-east5) or global".into());
            }
        }
        _ => {}
    }
    if let Some(hosted) = b.hosted() {
        if let Some(why) = hosted.base_url.as_deref().and_then(bad_url) {
            p("base_url", why);
        }
        if hosted.quota.as_ref().is_some_and(|q| q.rpm == Some(0) || q.tpm == Some(0)) {
            p("quota", "a limit of 0 would refuse everything; leave it out for no limit".into());
        }
    }
    for (key, why) in b.terms.problems() {
        p(&format!("terms.{key}"), why);
    }
    if b.embedding_space.as_ref().is_some_and(|space| space.as_str().trim().is_empty()) {
        p("embedding_space", "must not be empty (leave it out for a backend without embeddings)".into());
    }
    if let Some(file) = &b.tokenizer_file {
        if file.as_os_str().is_empty() {
            p("tokenizer_file", "must not be empty".into());
        } else if b.tokenizer.is_some() {
            p("tokenizer", "set either tokenizer or tokenizer_file, not both".into());
        }
    }
    problems.extend(b.api_key_env.as_deref().and_then(|env| env_name(&format!("{at}.api_key_env"), env)));
    problems.extend(range::check(at, BackendConfig::RANGES, &ranged(b)));
    if let Some(pool) = b.pool() {
        problems.extend(check_pool(pool, at));
    }
    problems
}

/// The backend's values that have a range, where its kind has the key and it is set.
fn ranged(b: &BackendConfig) -> Vec<(&'static str, f64)> {
    let mut values = Vec::new();
    values.extend(b.max_inflight_per_node.map(|n| ("max_inflight_per_node", n as f64)));
    values.extend(b.capabilities.max_context.map(|n| ("capabilities.max_context", n as f64)));
    values.extend(b.prompt_cache.map(|c| ("prompt_cache.last_turns", c.last_turns as f64)));
    let weight = b.hosted().and_then(|h| h.quota.as_ref()).and_then(|q| q.output_token_weight);
    values.extend(weight.map(|w| ("quota.output_token_weight", w as f64)));
    if let Some(pool) = b.pool() {
        values.push(("reserve", pool.reserve));
        values.push(("gpu_count", pool.gpu_count as f64));
        values.push(("max_running", pool.max_running as f64));
    }
    values
}

/// What types cannot say about a pool: that it has nodes, and how its agent is reached.
fn check_pool(pool: &PoolSpec, at: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut p = |key: &str, message: &str| problems.push(Problem::new(format!("{at}.{key}"), message));
    if pool.endpoints.is_empty() && pool.discovery.is_none() {
        p("endpoints", "a local backend needs at least one node address (or discovery)");
    }
    if pool.gpu_hourly_usd.is_some_and(|v| v.is_sign_negative()) {
        p("gpu_hourly_usd", "must not be negative");
    }
    let pods = pool.discovery.as_ref().is_some_and(|d| d.kubernetes.resource == KubeResource::Pods);
    if pool.agent_address == AgentAddress::Host && !pods {
        p("agent_address", "`host` needs discovery.kubernetes with resource: pods (it reads status.hostIP)");
    }
    if let Some(k) = pool.discovery.as_ref().map(|d| &d.kubernetes) {
        if k.namespace.is_empty() {
            p("discovery.kubernetes.namespace", "must not be empty");
        }
        if k.selector.is_empty() {
            p("discovery.kubernetes.selector", "must not be empty (it would select every pod)");
        }
    }
    problems
}
