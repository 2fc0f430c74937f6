//! The loader against whole config texts: structural and semantic problems reported together,
//! each once, with its key path.

use super::*;

const EXAMPLE: &str = include_str!("../../spillway.example.yaml");

#[test]
fn the_example_config_loads() {
    let config = parse(EXAMPLE).unwrap_or_else(|p| panic!("{p:?}"));
    assert_eq!(config.backends.len(), 3);
    assert_eq!(config.tasks[0].backends, ["local-llama", "anthropic", "openai"]);
    assert_eq!(config.listen, "127.0.0.1:8080");
}

#[test]
fn every_structural_problem_is_reported_with_its_path() {
    let text = r#"
listen: 127.0.0.1:8080
colour: blue
backends:
  - name: a
    kind: vllm
    endpoints: [http://127.0.0.1:1]
    model: m
    price: {input_per_mtok: cheap, output_per_mtok: 1}
  - name: b
    kind: martian
    model: m
  - name: c
    kind: openai
    model: m
    api_key: sk-inline-secret
tasks:
  - name: t
    backends: [a]
    slo: {ttft_ms: 800}
"#;
    let problems = parse(text).unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"colour"), "{problems:?}");
    assert!(paths.contains(&"backends[0].price.input_per_mtok"), "{problems:?}");
    assert!(paths.contains(&"backends[1].kind"), "{problems:?}");
    let secret = problems.iter().find(|p| p.path == "backends[2].api_key").unwrap();
    assert!(secret.message.contains("api_key_env"), "{secret}");
}

#[test]
fn structural_and_semantic_problems_are_reported_together() {
    let text = r#"
listen: not-an-address
colour: blue
backends:
  - name: a
    kind: vllm
    model: m
    weight: 3
    reserve: lots
    gpu_count: 0
    price: {input_per_mtok: -1, output_per_mtok: 1}
    endpoints: [7, "http://127.0.0.1:1"]
  - name: b
    kind: martian
    model: m
  - {name: c, kind: openai, model: "", api_key: sk-inline, base_url: "ftp://x"}
  - {name: c, kind: anthropic, model: m, gpu_count: 0, temperature: 1}
tasks:
  - name: t
    backends: [a, b, ghost]
    slo: {ttft_ms: 100, margin: wide, objective: 2}
    data_class: secret
    colour: red
  - {name: t, backends: [c], slo: {ttft_ms: 0}, max_output_tokens: 0}
  - {backends: [a], slo: {ttft_ms: 100}}
dispatch: {max_attempts: 0, retries: 2}
telemetry: {jitter: 0.9, scrape_replicas: 0}
"#;
    let problems: Vec<String> = parse(text).unwrap_err().iter().map(|p| p.to_string()).collect();
    let structural = [
        "colour: unknown key",
        "backends[0].weight: unknown field `weight`",
        "backends[0].reserve: invalid type",
        "backends[0].endpoints[0]: invalid type",
        "backends[1].kind: unknown variant `martian`",
        "backends[2].api_key: unknown field `api_key`",
        "backends[3].temperature: unknown field",
        "backends[3].gpu_count: `gpu_count` does not apply to kind anthropic; only kind local takes it",
        "tasks[0].slo.margin: invalid type",
        "tasks[0].colour: unknown field",
        "tasks[2].name: missing (required)",
        "dispatch.retries: unknown field",
    ];
    let semantic = [
        "listen: `not-an-address`",
        "backends[0].price.input_per_mtok: must not be negative",
        "backends[2].model: must not be empty",
        "backends[2].base_url: `ftp://x`: scheme",
        "backends[3].name: `c` is used by another backend",
        "backends[0].gpu_count: must be at least 1",
        "tasks[0].backends[2]: no backend is named `ghost`",
        "tasks[0].data_class: unknown data class `secret`",
        "tasks[0].slo.objective: must be above 0 and below 1",
        "tasks[1].name: `t` is used by another task",
        "tasks[1].slo.ttft_ms: must be above 0",
        "tasks[1].max_output_tokens: must be at least 1",
        "dispatch.max_attempts: must be at least 1",
        "telemetry.jitter: must be between 0 and 0.5",
        "telemetry.scrape_replicas: must be between 1 and 16",
    ];
    for expected in structural.iter().chain(&semantic) {
        assert!(problems.iter().any(|p| p.starts_with(expected)), "missing {expected:?} in {problems:#?}");
    }
    // Nothing twice, and nothing about a key already reported or its stand-in default:
    // the backend that did not decode is not also "no backend named b", the bad endpoint
    // does not make "needs at least one node address", the bad reserve no range problem.
    assert_eq!(problems.len(), structural.len() + semantic.len(), "{problems:#?}");
}

#[test]
fn a_missing_required_key_is_reported_beside_other_structural_problems() {
    let text = r#"
backends:
  - {name: a, kind: openai, model: m}
  - {kind: anthropic, price: {input_per_mtok: cheap, output_per_mtok: 1}}
tasks:
  - {name: t, backends: [a], slo: {ttft_ms: 100}, strategy: fastest}
  - {name: u, backends: [a, 7]}
  - {backends: 7, slo: {margin: 0.1}}
dispatch: {max_attempts: lots}
"#;
    let problems: Vec<String> = parse(text).unwrap_err().iter().map(|p| p.to_string()).collect();
    let expected = [
        "backends[1].price.input_per_mtok: invalid value",
        "backends[1].name: missing (required)",
        "backends[1].model: missing (required)",
        "tasks[0].strategy: unknown variant `fastest`",
        // A bad element takes `backends` out; `slo` is still missing beside it.
        "tasks[1].backends[1]: invalid type",
        "tasks[1].slo: missing (required)",
        "tasks[2].backends: invalid type",
        "tasks[2].slo.ttft_ms: missing (required)",
        "tasks[2].name: missing (required)",
        "dispatch.max_attempts: invalid type",
    ];
    for line in expected {
        assert!(problems.iter().any(|p| p.starts_with(line)), "missing {line:?} in {problems:#?}");
    }
    // Nothing about a stand-in: no `tasks[1].backends: missing`, no `must be above 0`.
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
}

#[test]
fn bad_yaml_and_missing_sections_are_problems_not_panics() {
    assert!(parse("listen: [unclosed").unwrap_err()[0].message.contains("YAML"));
    let problems = parse("listen: 127.0.0.1:1").unwrap_err();
    assert_eq!(problems.len(), 2);
    assert_eq!(problems[0].to_string(), "backends: missing (required)");
    assert!(parse("- a\n- b").is_err());
}

#[test]
fn an_old_batch_claim_secs_says_what_replaced_it() {
    let text = "backends: [{name: a, kind: openai, model: m, api_key_env: K}]\n\
                tasks: [{name: t, backends: [a], slo: {ttft_ms: 100}}]\n\
                batch: {claim_secs: 600}\n";
    let problems = parse(text).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let line = problems[0].to_string();
    assert!(line.starts_with("batch.claim_secs: unknown field `claim_secs`"), "{line}");
    assert!(line.contains("batch.heartbeat_secs"), "{line}");
}
