//! Tests of the config schema: it accepts what serde accepts and refuses what serde refuses,
//! it stands alone (draft-07, no references), and the chart's variant differs where it says.

use rust_decimal::Decimal;
use serde_json::{json, Value};

use super::{chart_schema, schema, DecimalSchema};
use crate::config::Config;

const BACKEND: &str = "{name: b, kind: openai, model: m}";
const TASK: &str = "{name: t, backends: [b], slo: {ttft_ms: 800}}";
const EXAMPLE: &str = include_str!("../../spillway.example.yaml");

/// A config with one backend and one task: `backend` and `task` are keys inside their braces
/// (the required keys they leave out are filled in), `extra` more top-level lines.
fn config(backend: &str, task: &str, extra: &str) -> String {
    let with = |keys: &str, required: &[(&str, &str)]| {
        let mut map: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(&format!("{{{keys}}}")).unwrap();
        for (key, value) in required {
            if !map.contains_key(*key) {
                map.insert((*key).into(), serde_yaml_ng::from_str(value).unwrap());
            }
        }
        serde_json::to_string(&map).unwrap()
    };
    let backend = with(backend, &[("name", "b"), ("kind", "openai"), ("model", "m")]);
    let task = with(task, &[("name", "t"), ("backends", "[b]"), ("slo", "{ttft_ms: 800}")]);
    format!("backends: [{backend}]\ntasks: [{task}]\n{extra}\n")
}

fn json_of(yaml: &str) -> Value {
    serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("not YAML: {e}\n{yaml}"))
}

/// Every config text below, with whether serde decodes it: the schema must agree on each.
fn corpus() -> Vec<String> {
    let b = |s: &str| config(s, "", "");
    let t = |s: &str| config("", s, "");
    let top = |s: &str| config("", "", s);
    vec![
        config("", "", ""),
        EXAMPLE.to_string(),
        format!("backends: [{BACKEND}]\n"),
        format!("tasks: [{TASK}]\n"),
        "backends: {b: {kind: openai}}\ntasks: []\n".into(),
        top("colour: blue"),
        top("listen: 0.0.0.0:9000\nclient_keys_env: [TEAM_A]\nadmin_token_env: ~"),
        top("client_keys_env: TEAM_A"),
        top("dispatch: {max_attempts: 2, breaker: {open_secs: 3, error_rate: 0.4}}"),
        top("dispatch: {breaker: {open_sec: 3}}"),
        top("dispatch: {max_attempts: -1}"),
        top("limits: {max_body_bytes: 2048, drain_timeout_ms: 1000}"),
        top("limits: {max_body_bytes: big}"),
        top("telemetry: {interval_ms: 100, jitter: 0.2}"),
        top("state: {redis_url: 'redis://r:6379'}"),
        top("state: {redis: 'redis://r:6379'}"),
        top("balancing: {kp: 0.1, ki: 0, kd: 0.01}"),
        top("ledger: {enabled: false, url: 'sqlite://x.db'}"),
        top("canary: {interval_secs: 0, prompt: hi}"),
        top("access_log: {level: off, sample: 0.5}"),
        top("access_log: {level: warn}"),
        top("policy: {data_classes: {pii: {regions: [eu-west-1], allow_hosted: false}}}"),
        top("policy: {data_classes: {pii: {region: eu-west-1}}}"),
        top("policy: {data_classes: [pii]}"),
        b("kind: VLLM"),
        b("kind: openai_compatible, base_url: 'http://x:1'"),
        b("price: {input_per_mtok: 3, cached_input_per_mtok: 0.3, output_per_mtok: 15}"),
        b("price: {input_per_mtok: '0.15', output_per_mtok: '1e-3'}"),
        b("price: {input_per_mtok: cheap, output_per_mtok: 1}"),
        b("price: {input_per_mtok: 1}"),
        b("price: ~"),
        b("kind: vllm, gpu_hourly_usd: '2.50'"),
        b("kind: vllm, max_running: -1"),
        b("kind: vllm, agent_port: 70000"),
        b("kind: vllm, agent_port: 9400, agent_address: host"),
        b("kind: vllm, agent_address: node"),
        b("kind: vllm, reserve: '0.2'"),
        b("quota: {rpm: 10, tpm: 1000}"),
        b("quota: {rpd: 10}"),
        b("capabilities: {tools: true, max_context: 8192}"),
        b("capabilities: {streaming: true}"),
        b("tokenizer: o200k_base"),
        b("tokenizer: gpt2"),
        b("tokenizer_file: models/tokenizer.json, version: '2026-01'"),
        b("kind: vllm, pin: {weights: 'sha256:ab', engine: v1}"),
        b("kind: vllm, pin: {digest: x}"),
        b("kind: vllm, discovery: {kubernetes: {namespace: llm, selector: app=vllm, port: 8000, resource: endpointslices}}"),
        b("kind: vllm, discovery: {kubernetes: {namespace: llm, selector: app=vllm, resource: services}}"),
        b("kind: vllm, discovery: {kubernetes: {selector: app=vllm}}"),
        b("kind: vllm, endpoints: 'http://x:1'"),
        b("kind: vllm, endpoints: ['http://x:1'], reserve: 0.1, gpu_count: 2, pin: ~"),
        b("kind: openai_compatible, endpoints: ['http://x:1'], quota: {rpm: 1}, version: v1"),
        b("kind: gemini, base_url: 'http://x:1', quota: {tpm: 5}"),
        // A key of another kind.
        b("reserve: 0.1"),
        b("kind: anthropic, endpoints: ['http://x:1']"),
        b("kind: gemini, pin: ~"),
        b("kind: vllm, quota: {rpm: 10}"),
        b("kind: vllm, version: '2026-01'"),
        b("kind: vllm, base_url: 'http://x:1'"),
        b("kind: openai_compatible, max_running: 8"),
        t("strategy: weighted, weights: {b: 2}"),
        t("strategy: fastest"),
        t("weights: [1, 2]"),
        t("priority: batch, data_class: pii, max_output_tokens: 100, allowed_keys: [TEAM_A]"),
        t("priority: urgent"),
        t("slo: {ttft_ms: 800, margin: 0.1, objective: 0.99, availability: 0.999}"),
        "backends: []\ntasks: [{name: t, backends: [b], slo: {margin: 0.1}}]\n".into(),
        t("backends: b"),
        t("gate: {golden: g.jsonl, min_pass: 0.8, required: false, concurrency: 2, judge: b}"),
        t("gate: {min_pass: 0.8}"),
        t("shadow: {rate: 0.1, backends: [b], grader: {type: similar, min: 0.4}}"),
        t("shadow: {rate: 0.1, grader: {type: judge, rubric: kind}}"),
        t("shadow: {rate: 0.1, grader: {type: json_schema, schema: {type: object}}}"),
        t("shadow: {rate: 0.1, grader: {type: fuzzy}}"),
        t("shadow: {rate: 0.1, grader: {type: regex}}"),
        t("shadow: {rate: 0.1, grader: {type: exact, expected: x, tolerance: 1}}"),
        t("shadow: {rate: 0.1, grader: ~}"),
        t("prompt_variants: {vllm: llama.txt, b: b.txt}"),
        t("prompt_variants: [llama.txt]"),
    ]
}

/// Where serde is more lenient: YAML reads a plain scalar such as `8080` as a string where a
/// string is wanted. The schema asks for a string (quote it), as YAML editors and Helm see a
/// number there.
fn lenient() -> Vec<String> {
    vec![
        config("", "", "listen: 8080"),
        config("region: 3.5, version: 2026", "", ""),
        config("", "data_class: true", ""),
    ]
}

#[test]
fn the_schema_accepts_what_serde_accepts_and_nothing_else() {
    let validator = jsonschema::validator_for(&schema()).expect("the schema compiles");
    let (mut accepted, mut refused) = (0, 0);
    for text in corpus() {
        let serde = serde_yaml_ng::from_str::<Config>(&text).map(|_| ()).map_err(|e| e.to_string());
        let instance = json_of(&text);
        let errors: Vec<String> = validator.iter_errors(&instance).map(|e| e.to_string()).collect();
        assert_eq!(serde.is_ok(), errors.is_empty(), "serde: {serde:?}, schema: {errors:?}, for\n{text}");
        if serde.is_ok() {
            accepted += 1
        } else {
            refused += 1
        }
    }
    assert!(accepted >= 20 && refused >= 20, "{accepted} accepted, {refused} refused");
    for text in lenient() {
        let serde = serde_yaml_ng::from_str::<Config>(&text).map(|_| ());
        assert!(serde.is_ok() && !validator.is_valid(&json_of(&text)), "{serde:?}\n{text}");
    }
}

#[test]
fn a_decimal_string_the_schema_allows_is_one_rust_decimal_reads() {
    let validator = jsonschema::validator_for(&schemars::schema_for!(DecimalSchema).to_value()).unwrap();
    let reads = |v: &Value| serde_json::from_value::<Decimal>(v.clone()).is_ok();
    for s in ["0", "0.15", "2.50", "-1", "+2.5", ".5", "5.", "1e3", "1.5E-3", "007", "1_000", ""] {
        let v = json!(s);
        assert!(
            !validator.is_valid(&v) || reads(&v),
            "the schema allows {s:?}, rust_decimal does not read it"
        );
    }
    for s in ["abc", "1.2.3", "1e", "--1", " 1", "1,5", "0x10", "NaN"] {
        assert!(!validator.is_valid(&json!(s)), "the schema allows {s:?}");
    }
    for v in [json!("0.15"), json!("-1"), json!("1e-3"), json!(3), json!(0.25)] {
        assert!(validator.is_valid(&v) && reads(&v), "{v} is an ordinary decimal");
    }
    assert!(!validator.is_valid(&json!(true)) && !reads(&json!(true)));
}

/// The branch of a backend's schema for `kind: vllm`.
fn pool_branch(schema: &Value) -> &Value {
    let branches = schema["properties"]["backends"]["items"]["oneOf"].as_array().expect("a branch per kind");
    branches.iter().find(|b| b["properties"].get("reserve").is_some()).expect("a vllm branch")
}

/// Every subschema of `value` that has `properties`, with its JSON pointer.
fn objects<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    match value {
        Value::Object(map) => {
            if map.contains_key("properties") {
                out.push((at.clone(), value));
            }
            for (key, child) in map {
                objects(child, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                objects(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_schema_is_draft_07_with_no_references_and_closed_objects() {
    let schema = schema();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let text = schema.to_string();
    for word in ["\"$ref\"", "\"definitions\"", "\"$defs\""] {
        assert!(!text.contains(word), "{word} in the schema: every subschema is inlined");
    }
    let mut found = Vec::new();
    objects(&schema, String::new(), &mut found);
    // The config structs and the graders' variants all deny unknown fields.
    assert!(found.len() > 25, "{} object schemas", found.len());
    for (at, object) in found {
        assert_eq!(object["additionalProperties"], json!(false), "{at} accepts unknown keys");
    }
    let b = &pool_branch(&schema)["properties"];
    assert!(b["name"]["description"].as_str().is_some_and(|d| !d.contains('\n')), "{}", b["name"]);
    assert_eq!(b["reserve"]["default"], json!(0.2));
    assert_eq!(schema["properties"]["tasks"]["items"]["properties"]["strategy"]["default"], "adaptive");
}

#[test]
fn the_chart_schema_lets_the_chart_fill_in_the_namespace_and_nothing_else() {
    let file = jsonschema::validator_for(&schema()).unwrap();
    let chart = chart_schema();
    assert!(chart.get("$schema").is_none(), "a subschema of values.schema.json carries no $schema");
    let chart = jsonschema::validator_for(&chart).unwrap();
    let no_namespace = json_of(&config("kind: vllm, discovery: {kubernetes: {selector: app=vllm}}", "", ""));
    assert!(!file.is_valid(&no_namespace) && chart.is_valid(&no_namespace));
    let namespace_left_out = |t: &&String| t.contains("\"kubernetes\"") && !t.contains("\"namespace\"");
    for text in corpus().iter().filter(|t| !namespace_left_out(t)) {
        let instance = json_of(text);
        assert_eq!(file.is_valid(&instance), chart.is_valid(&instance), "{text}");
    }
}

#[test]
fn the_schema_refuses_a_key_of_another_kind_as_the_loader_does() {
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let pool = "name: b, kind: vllm, model: m, endpoints: ['http://10.0.0.5:8000']";
    let pairs = [
        // (valid, the same with a key its kind does not take)
        (
            "name: b, kind: openai, model: m".to_string(),
            "name: b, kind: openai, model: m, reserve: 0.1".to_string(),
        ),
        (format!("{pool}, reserve: 0.1"), format!("{pool}, quota: {{rpm: 10}}")),
        (format!("{pool}, gpu_count: 2"), format!("{pool}, version: '2026-01'")),
        (pool.to_string(), format!("{pool}, base_url: 'http://10.0.0.5:8000/v1'")),
        (
            "name: b, kind: anthropic, model: m, version: v".into(),
            "name: b, kind: anthropic, model: m, agent_port: 1".into(),
        ),
    ];
    for (valid, wrong) in pairs {
        let text = |backend: &str| config(backend, "", "");
        assert!(crate::config::parse(&text(&valid)).is_ok(), "{valid}");
        let instance = json_of(&text(&valid));
        let errors: Vec<String> = validator.iter_errors(&instance).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{valid}: {errors:?}");
        let problems = crate::config::parse(&text(&wrong)).unwrap_err();
        assert!(problems[0].message.contains("does not apply to kind"), "{wrong}: {problems:?}");
        assert!(!validator.is_valid(&json_of(&text(&wrong))), "the schema accepts {wrong}");
    }
}
