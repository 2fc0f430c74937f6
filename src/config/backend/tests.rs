//! Tests of backends as written: capabilities by kind, tokenizer files, and the keys each kind
//! takes (a key of another kind is refused with its path and the kinds that take it).

use super::*;
use crate::canonical::Engine;
use crate::config::{load_file, parse};
use serde_json::Value;

const TASKS: &str = "tasks: [{name: t, backends: [b], slo: {ttft_ms: 500}}]\n";

fn backend(yaml: &str) -> Result<BackendConfig, Vec<crate::config::Problem>> {
    parse(&format!("backends:\n  - {yaml}\n{TASKS}")).map(|c| c.backends[0].clone())
}

#[test]
fn capabilities_default_by_kind_and_the_config_overrides_each_key() {
    let b = backend("{name: b, kind: anthropic, model: m}").unwrap();
    assert_eq!(
        b.capabilities(),
        Capabilities { tools: true, vision: true, json_schema: true, max_context: Some(200_000) }
    );
    let b = backend("{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m}").unwrap();
    assert_eq!(
        b.capabilities(),
        Capabilities { tools: false, vision: false, json_schema: true, max_context: None }
    );
    let b = backend(
        "{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m, \
         capabilities: {tools: true, max_context: 8192}}",
    )
    .unwrap();
    assert_eq!(
        b.capabilities(),
        Capabilities { tools: true, vision: false, json_schema: true, max_context: Some(8192) }
    );
    let b = backend("{name: b, kind: openai, model: m, capabilities: {vision: false}}").unwrap();
    assert_eq!(b.capabilities().max_context, Some(128_000));
    assert!(!b.capabilities().vision && b.capabilities().tools);
}

#[test]
fn unknown_capabilities_and_bad_values_are_named() {
    let problems = backend("{name: b, kind: openai, model: m, capabilities: {streaming: true}}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].capabilities.streaming", "{problems:?}");
    assert!(problems[0].message.contains("unknown field `streaming`"), "{problems:?}");
    assert!(problems[0].message.contains("max_context"), "{problems:?}");
    let problems = backend("{name: b, kind: openai, model: m, capabilities: {max_context: 0}}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].capabilities.max_context", "{problems:?}");
    let problems = backend("{name: b, kind: openai, model: m, capabilities: {tools: maybe}}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].capabilities.tools", "{problems:?}");
}

#[test]
fn a_tokenizer_file_is_read_relative_to_the_config_file_and_counts_exactly() {
    let dir = std::env::temp_dir().join(format!("spillway-tok-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(dir.join("models")).unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/tokenizer.json");
    std::fs::copy(&fixture, dir.join("models/tokenizer.json")).unwrap();
    let yaml = format!(
        "backends:\n  - {{name: b, kind: vllm, endpoints: ['http://10.0.0.5:8000'], model: m, \
         tokenizer_file: models/tokenizer.json}}\n{TASKS}"
    );
    std::fs::write(dir.join("spillway.yaml"), &yaml).unwrap();
    let config = load_file(&dir.join("spillway.yaml")).unwrap_or_else(|p| panic!("{p:?}"));
    let b = &config.backends[0];
    assert_eq!(b.tokenizer_file.as_deref(), Some(dir.join("models/tokenizer.json").as_path()));
    let counter = crate::adapter::provider::counter(b);
    assert_eq!(counter.name(), "tokenizer_file");
    assert_eq!(counter.count_text("hello world"), 9);

    // Parsed without a file, the same relative path is looked up from the working
    // directory, where it is not: the problem names the key and the path.
    let problems = parse(&yaml).unwrap_err();
    assert_eq!(problems[0].path, "backends[0].tokenizer_file", "{problems:?}");
    assert!(problems[0].message.contains("models/tokenizer.json"), "{problems:?}");
    // Both ways of counting at once is a mistake.
    let both = yaml.replace("tokenizer_file:", "tokenizer: llama_estimate, tokenizer_file:");
    std::fs::write(dir.join("both.yaml"), both).unwrap();
    let problems = load_file(&dir.join("both.yaml")).unwrap_err();
    assert!(problems.iter().any(|p| p.path == "backends[0].tokenizer"), "{problems:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A valid value of every key only some kinds take.
const SPEC_KEYS: &[(&str, &str)] = &[
    ("endpoints", "['http://10.0.0.5:8000']"),
    ("engine", "llamacpp"),
    ("base_url", "'http://10.0.0.5:8000/v1'"),
    ("agent_port", "9400"),
    ("agent_address", "pod"),
    ("reserve", "0.1"),
    ("max_running", "8"),
    ("pin", "{engine: '0.9'}"),
    ("discovery", "{kubernetes: {namespace: llm, selector: app=vllm}}"),
    ("quota", "{rpm: 10}"),
    ("gpu_count", "2"),
    ("gpu_hourly_usd", "'2.50'"),
    ("version", "'2026-01'"),
    ("messages", "native"),
    ("embedding_space", "e5-large"),
    ("prompt_cache", "{last_turns: 1}"),
    ("deployment", "chat"),
    ("api_version", "2024-10-21"),
    ("project", "my-project"),
    ("location", "us-east5"),
    ("publisher", "anthropic"),
    ("credentials_file", "sa.json"),
];

#[test]
fn a_pool_key_on_a_hosted_backend_is_refused_at_its_path_with_the_kinds_that_take_it() {
    let text = format!(
        "backends:\n  - {{name: p, kind: vllm, model: m, endpoints: ['http://10.0.0.5:8000']}}\n  \
         - {{name: b, kind: openai, model: m, reserve: 0.1}}\n{TASKS}"
    );
    let problems = parse(&text).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "backends[1].reserve", "{problems:?}");
    assert_eq!(problems[0].message, "`reserve` does not apply to kind openai; only kind local takes it");
    // Every such key of one backend, each at its path; `endpoints` names both kinds taking it.
    let problems =
        backend("{name: b, kind: anthropic, model: m, endpoints: ['http://h:1'], gpu_hourly_usd: 1, pin: ~}")
            .unwrap_err();
    let found: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        found,
        [
            "backends[0].endpoints: `endpoints` does not apply to kind anthropic; only kinds local, \
             openai_compatible take it",
            "backends[0].pin: `pin` does not apply to kind anthropic; only kind local takes it",
            "backends[0].gpu_hourly_usd: `gpu_hourly_usd` does not apply to kind anthropic; only kind local \
             takes it",
        ]
    );
}

#[test]
fn a_hosted_key_on_a_pool_is_refused_at_its_path_with_the_kinds_that_take_it() {
    let hosted =
        "only kinds openai, anthropic, gemini, openai_compatible, azure_openai, bedrock, vertex take it";
    for (key, value) in [("quota", "{rpm: 10}"), ("version", "'2026-01'"), ("base_url", "'http://h:1/v1'")] {
        // `kind` need not come first.
        let problems =
            backend(&format!("{{{key}: {value}, name: b, model: m, endpoints: ['http://h:1'], kind: vllm}}"))
                .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, format!("backends[0].{key}"), "{problems:?}");
        assert!(
            problems[0].message.starts_with(&format!("`{key}` does not apply to kind local; {hosted}")),
            "{problems:?}"
        );
    }
    let problems =
        backend("{name: b, kind: vllm, model: m, discovery: ~, base_url: 'http://h:1'}").unwrap_err();
    assert!(
        problems[0].message.ends_with("(a local backend lists its nodes under endpoints)"),
        "{problems:?}"
    );
    // Read on its own (no loader), the backend is refused too, and the message names the key.
    let err = serde_yaml_ng::from_str::<BackendConfig>("{name: b, kind: vllm, model: m, quota: {rpm: 1}}")
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("`quota` does not apply to kind local; {hosted}")), "{err}");
}

#[test]
fn problems_inside_a_kinds_keys_keep_their_paths() {
    let problems = backend(
        "{name: b, kind: vllm, model: m, discovery: {kubernetes: {namespace: llm, selector: a=b, \
         resource: services}}, pin: {digest: x}, reserve: lots}",
    )
    .unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        ["backends[0].discovery.kubernetes.resource", "backends[0].pin.digest", "backends[0].reserve"],
        "{problems:?}"
    );
    assert!(problems[1].message.contains("unknown field `digest`"), "{problems:?}");
    // A key no kind takes is still serde's unknown field, listing the keys.
    let problems = backend("{name: b, kind: gemini, model: m, weight: 3}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].weight", "{problems:?}");
    assert!(problems[0].message.contains("unknown field `weight`, expected one of"), "{problems:?}");
}

#[test]
fn each_kind_gets_its_own_settings_with_their_defaults() {
    let b = backend("{name: b, kind: vllm, model: m, endpoints: ['http://h:1'], gpu_count: 2}").unwrap();
    let pool = b.pool().unwrap();
    assert_eq!((pool.reserve, pool.max_running, pool.gpu_count), (0.2, 256, 2));
    assert_eq!(pool.agent_address, AgentAddress::Pod);
    assert_eq!(b.endpoints(), ["http://h:1"]);
    assert!(b.hosted().is_none());
    let b = backend("{name: b, kind: gemini, model: m, quota: {tpm: 5}, version: v2}").unwrap();
    assert_eq!(b.kind(), BackendKind::Gemini);
    assert!(b.pool().is_none() && b.endpoints().is_empty());
    let hosted = b.hosted().unwrap();
    assert_eq!((hosted.quota.as_ref().unwrap().tpm, hosted.version.as_deref()), (Some(5), Some("v2")));
    let b =
        backend("{name: b, kind: openai_compatible, model: m, endpoints: ['http://h:1'], quota: {rpm: 3}}")
            .unwrap();
    assert_eq!(b.endpoints(), ["http://h:1"]);
    assert_eq!(b.hosted().and_then(|h| h.quota.as_ref()).and_then(|q| q.rpm), Some(3));
    let BackendSpec::OpenaiCompatible(compatible) = &b.spec else { panic!("{b:?}") };
    assert!(compatible.hosted.base_url.is_none());
}

#[test]
fn a_local_pool_is_also_written_vllm_and_names_its_engine_or_detects_it() {
    for kind in ["local", "vllm"] {
        let b = backend(&format!("{{name: b, kind: {kind}, model: m, endpoints: ['http://h:1']}}")).unwrap();
        assert_eq!(b.kind(), BackendKind::Local);
        assert_eq!(b.pool().unwrap().engine, EngineSetting::Auto, "{kind}");
    }
    for engine in Engine::ALL {
        let yaml = format!("{{name: b, kind: local, model: m, endpoints: ['http://h:1'], engine: {engine}}}");
        assert_eq!(backend(&yaml).unwrap().pool().unwrap().engine, EngineSetting::Is(engine));
    }
    let problems =
        backend("{name: b, kind: local, model: m, endpoints: ['http://h:1'], engine: ollama}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].engine", "{problems:?}");
    assert!(
        problems[0]
            .message
            .contains("unknown engine `ollama`, expected auto, vllm, sglang, llamacpp, trtllm, tgi"),
        "{problems:?}"
    );
    let problems = backend("{name: b, kind: openai, model: m, engine: vllm}").unwrap_err();
    assert!(problems[0].message.starts_with("`engine` does not apply to kind openai; only kind local"));
    // The schema takes both names of the kind, and every engine.
    let schema = crate::config::schema();
    let branches = schema["properties"]["backends"]["items"]["oneOf"].as_array().unwrap();
    let local = branches.iter().find(|b| b["properties"].get("engine").is_some()).unwrap();
    let kinds: Vec<&Value> =
        local["properties"]["kind"]["oneOf"].as_array().unwrap().iter().map(|v| &v["const"]).collect();
    assert_eq!(kinds, ["local", "vllm"]);
    let engines = local["properties"]["engine"]["enum"].as_array().unwrap();
    assert_eq!(engines.len(), 6);
}

/// The kind-specific keys of each branch of the schema, by kind.
fn schema_spec_keys() -> Vec<(BackendKind, Vec<String>)> {
    let schema = crate::config::schema();
    let branches = schema["properties"]["backends"]["items"]["oneOf"].as_array().unwrap().clone();
    let common =
        ["name", "kind", "model", "api_key_env", "region", "terms", "price", "max_inflight_per_node"];
    let common = [&common[..], &["stream_upstream", "tokenizer", "tokenizer_file", "capabilities"]].concat();
    BackendKind::ALL
        .iter()
        .map(|kind| {
            let branch = branches
                .iter()
                .find(|b| b.to_string().contains(&format!("\"const\":\"{}\"", kind.as_str())))
                .unwrap_or_else(|| panic!("no branch for {kind:?}"));
            let keys = branch["properties"].as_object().unwrap().keys();
            (*kind, keys.filter(|k| !common.contains(&k.as_str())).cloned().collect())
        })
        .collect()
}

#[test]
fn the_keys_each_kind_takes_are_the_keys_of_its_schema_branch() {
    let by_kind = schema_spec_keys();
    let mut all: Vec<&String> = by_kind.iter().flat_map(|(_, keys)| keys).collect();
    all.sort();
    all.dedup();
    let mut listed: Vec<&str> = SPEC_KEYS.iter().map(|(k, _)| *k).collect();
    listed.sort();
    assert_eq!(all, listed, "SPEC_KEYS lists every kind-specific key of the schema");
    for (kind, keys) in &by_kind {
        for (key, value) in SPEC_KEYS {
            let in_branch = keys.iter().any(|k| k == key);
            assert_eq!(written::takes(*kind, key), in_branch, "{kind:?} {key}");
            let yaml = format!("{{name: b, kind: {}, model: m, {key}: {value}}}", kind.as_str());
            let read = serde_yaml_ng::from_str::<BackendConfig>(&yaml);
            assert_eq!(read.is_ok(), in_branch, "{yaml}: {read:?}");
        }
    }
}

#[test]
fn anthropic_places_breakpoints_by_default_and_quotas_count_cache_reads_as_the_provider_does() {
    use crate::canonical::CachePlacement;
    let b = backend("{name: b, kind: anthropic, model: m}").unwrap();
    assert_eq!(b.cache_placement(), Some(CachePlacement { system: true, tools: true, last_turns: 2 }));
    assert!(!b.quota_counts_cached(), "Anthropic's input limits leave cache reads out");
    let b =
        backend("{name: b, kind: anthropic, model: m, prompt_cache: {tools: false, last_turns: 1}}").unwrap();
    assert_eq!(b.cache_placement(), Some(CachePlacement { system: true, tools: false, last_turns: 1 }));
    let b = backend(
        "{name: b, kind: anthropic, model: m, prompt_cache: {system: false, tools: false, last_turns: 0}, \
         quota: {tpm: 1000, count_cached_tokens: true}}",
    )
    .unwrap();
    assert_eq!(b.cache_placement(), None, "all off places none");
    assert!(b.quota_counts_cached());
    let b = backend("{name: b, kind: openai, model: m}").unwrap();
    assert_eq!((b.cache_placement(), b.quota_counts_cached()), (None, true));

    let problems =
        backend("{name: b, kind: anthropic, model: m, prompt_cache: {last_turns: 5}}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].prompt_cache.last_turns", "{problems:?}");
    assert!(problems[0].message.starts_with("at most 4"), "{problems:?}");
    let problems = backend("{name: b, kind: anthropic, model: m, prompt_cache: {turns: 1}}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].prompt_cache.turns", "{problems:?}");
    let problems = backend("{name: b, kind: gemini, model: m, prompt_cache: {}}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].prompt_cache", "{problems:?}");
    assert_eq!(
        problems[0].message,
        "`prompt_cache` does not apply to kind gemini; only kinds anthropic, bedrock, vertex take it"
    );
    let problems = backend(
        "{name: b, kind: anthropic, model: m, price: {input_per_mtok: 3, output_per_mtok: 15, cache_write_per_mtok: -1}}",
    )
    .unwrap_err();
    assert_eq!(problems[0].path, "backends[0].price.cache_write_per_mtok", "{problems:?}");
}

#[test]
fn an_azure_backend_calls_its_v1_api_or_a_legacy_deployment_and_says_what_it_lacks() {
    let b = backend(
        "{name: b, kind: azure_openai, model: gpt, base_url: 'https://r.openai.azure.com/openai/v1/'}",
    )
    .unwrap();
    let BackendSpec::AzureOpenai(azure) = &b.spec else { panic!("{b:?}") };
    assert_eq!(azure.calls_base().as_deref(), Some("https://r.openai.azure.com/openai/v1"));
    assert_eq!(azure.query(), None);
    let b = backend(
        "{name: b, kind: azure_openai, model: gpt, base_url: 'https://r.openai.azure.com', \
         deployment: 'my deploy/1', api_version: 2024-10-21}",
    )
    .unwrap();
    let BackendSpec::AzureOpenai(azure) = &b.spec else { panic!("{b:?}") };
    assert_eq!(
        azure.calls_base().as_deref(),
        Some("https://r.openai.azure.com/openai/deployments/my%20deploy%2F1")
    );
    assert_eq!(azure.query().as_deref(), Some("api-version=2024-10-21"));

    let problems = backend("{name: b, kind: azure_openai, model: gpt}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].base_url", "{problems:?}");
    let problems = backend(
        "{name: b, kind: azure_openai, model: gpt, base_url: 'https://r.openai.azure.com', deployment: d}",
    )
    .unwrap_err();
    assert_eq!(problems[0].path, "backends[0].api_version", "{problems:?}");
    assert!(problems[0].message.contains("2024-10-21"), "{problems:?}");
    let problems = backend("{name: b, kind: openai, model: gpt, deployment: d}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].deployment", "{problems:?}");
    assert!(problems[0].message.contains("only kind azure_openai takes it"), "{problems:?}");
}

#[test]
fn the_clouds_call_their_regions_and_say_what_they_lack() {
    let b =
        backend("{name: b, kind: bedrock, model: us.anthropic.claude-sonnet-4-6-v1:0, region: eu-west-1}")
            .unwrap();
    assert_eq!(b.base_url().as_deref(), Some("https://bedrock-runtime.eu-west-1.amazonaws.com"));
    assert!(b.cache_placement().is_some(), "Claude on Bedrock caches where told to");
    assert!(!b.quota_counts_cached());
    let b = backend(
        "{name: b, kind: bedrock, model: m, region: us-east-1, base_url: 'https://vpce-1.example.com/'}",
    )
    .unwrap();
    assert_eq!(b.base_url().as_deref(), Some("https://vpce-1.example.com"), "a PrivateLink endpoint");
    let problems = backend("{name: b, kind: bedrock, model: m}").unwrap_err();
    assert_eq!(problems[0].path, "backends[0].region", "{problems:?}");

    let read = |yaml: &str| backend(yaml).unwrap();
    let b =
        read("{name: b, kind: vertex, model: claude-sonnet-4-6, project: my-project, location: us-east5}");
    let BackendSpec::Vertex(v) = &b.spec else { panic!("{b:?}") };
    assert_eq!(b.region.as_deref(), Some("us-east5"), "the location is the policy region");
    assert_eq!(
        v.calls_base(&b.base_url().unwrap(), &b.model),
        "https://us-east5-aiplatform.googleapis.com/v1/projects/my-project/locations/us-east5/publishers/anthropic"
    );
    let b = read("{name: b, kind: vertex, model: gemini-2.5-pro, project: p, location: global, region: eu}");
    let BackendSpec::Vertex(v) = &b.spec else { panic!("{b:?}") };
    assert_eq!(b.region.as_deref(), Some("eu"), "region as written wins");
    assert_eq!(
        v.calls_base(&b.base_url().unwrap(), &b.model),
        "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google"
    );
    let problems = backend("{name: b, kind: vertex, model: m}").unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["backends[0].project", "backends[0].location"], "{problems:?}");
}

#[test]
fn a_vertex_backend_may_name_its_own_service_account_file_read_from_the_config_directory() {
    let dir = std::env::temp_dir().join(format!("spillway-gcp-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("sa.json"), r#"{"type": "service_account", "client_email": "a@b"}"#).unwrap();
    std::fs::write(dir.join("user.json"), r#"{"type": "authorized_user"}"#).unwrap();
    let yaml = |file: &str| {
        format!(
            "backends:\n  - {{name: b, kind: vertex, project: p, location: global, model: claude-x, \
             credentials_file: {file}}}\n{TASKS}"
        )
    };
    std::fs::write(dir.join("good.yaml"), yaml("sa.json")).unwrap();
    let config = load_file(&dir.join("good.yaml")).unwrap_or_else(|p| panic!("{p:?}"));
    let BackendSpec::Vertex(v) = &config.backends[0].spec else { panic!() };
    assert_eq!(v.credentials_file.as_deref(), Some(dir.join("sa.json").as_path()));
    for (file, says) in [("user.json", "is not a service account"), ("gone.json", "cannot read")] {
        std::fs::write(dir.join("bad.yaml"), yaml(file)).unwrap();
        let problems = load_file(&dir.join("bad.yaml")).unwrap_err();
        assert_eq!(problems[0].path, "backends[0].credentials_file", "{problems:?}");
        assert!(problems[0].message.contains(says), "{problems:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
