//! The capacity plan: the worked example of the failover write-up (400 req/min × 3,400
//! tokens = 1.36 M tokens/min, split 70/30, B's quota 500 k), tokenizer conversion, shedding
//! by priority, pools' reserve, profile problems, and the rendered outputs. Assertions are on
//! numbers, never on whitespace.

use std::path::PathBuf;

use spillway::capacity::{
    self, arith, build, parse_profile, BackendCap, Format, PlanArgs, Report, ScenarioResult, TaskLoad,
};
use spillway::config::{self, Config, Priority};

const WORKED: &str = r#"
backends:
  - name: A
    kind: openai
    model: m
    quota: {tpm: 2000000}
  - name: B
    kind: openai
    model: m
    quota: {tpm: 500000}
tasks:
  - name: support
    backends: [A, B]
    slo: {ttft_ms: 800}
"#;

const WORKED_PROFILE: &str = r#"
tasks:
  support:
    requests_per_minute: 400
    input_tokens: 3000
    output_tokens: 400
    split: {A: 0.7, B: 0.3}
"#;

fn cfg(text: &str) -> Config {
    config::parse(text).unwrap_or_else(|p| panic!("{p:?}"))
}

fn report(config: &str, profile: &str) -> Report {
    let config = cfg(config);
    let profile = parse_profile(profile, &config).unwrap_or_else(|p| panic!("{p:?}"));
    build(&config, Some(&profile))
}

fn scenario<'a>(r: &'a Report, lost: Option<&str>) -> &'a ScenarioResult {
    r.scenarios.iter().find(|s| s.lost.as_deref() == lost).unwrap()
}

fn backend<'a>(s: &'a ScenarioResult, name: &str) -> &'a arith::BackendLoad {
    s.backends.iter().find(|b| b.backend == name).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

macro_rules! assert_close {
    ($a:expr, $b:expr) => {
        assert!(close($a, $b), "{} = {} (expected {})", stringify!($a), $a, $b)
    };
}

#[test]
fn the_worked_example_comes_out_right() {
    let r = report(WORKED, WORKED_PROFILE);
    assert_eq!(r.scenarios.len(), 3, "normal, A lost, B lost");

    let normal = scenario(&r, None);
    let (a, b) = (backend(normal, "A"), backend(normal, "B"));
    assert_close!(a.required_tokens + b.required_tokens, 1_360_000.0);
    assert_close!(a.required_tokens, 952_000.0);
    assert_close!(b.required_tokens, 408_000.0);
    assert_close!(b.load.unwrap(), 0.816);
    assert_close!(b.required_requests, 120.0);
    assert_close!(b.carried_tokens, 408_000.0);
    assert!(normal.shed.is_empty());
    assert_close!(b.short_tokens, 0.0);

    let lose_a = scenario(&r, Some("A"));
    assert!(lose_a.backends.iter().all(|l| l.backend != "A"));
    let b = backend(lose_a, "B");
    assert_close!(b.required_tokens, 1_360_000.0);
    assert_close!(b.load.unwrap(), 2.72);
    assert_eq!(format!("{:.1}", b.load.unwrap()), "2.7");
    assert_close!(b.short_tokens, 860_000.0);
    // A standard task may fill B's quota up to its ceiling; the rest is shed.
    let ceiling = Priority::Standard.quota_ceiling();
    assert_close!(b.carried_tokens, 500_000.0 * ceiling);
    assert_eq!(lose_a.shed.len(), 1);
    let shed = &lose_a.shed[0];
    assert_eq!(shed.priority, Priority::Standard);
    assert_close!(shed.shed_tokens, 1_360_000.0 - 500_000.0 * ceiling);
    assert_close!(shed.shed_requests, 400.0 - 500_000.0 * ceiling / 3400.0);

    // Losing B: A has room for all of it.
    let lose_b = scenario(&r, Some("B"));
    let a = backend(lose_b, "A");
    assert_close!(a.required_tokens, 1_360_000.0);
    assert!(lose_b.shed.is_empty());
}

#[test]
fn an_interactive_task_may_use_the_whole_quota_so_exactly_the_excess_is_shed() {
    let profile = WORKED_PROFILE.replace("    split:", "    priority: interactive\n    split:");
    let r = report(WORKED, &profile);
    let lose_a = scenario(&r, Some("A"));
    assert_close!(backend(lose_a, "B").carried_tokens, 500_000.0);
    let shed = &lose_a.shed[0];
    assert_eq!(shed.priority, Priority::Interactive);
    assert_close!(shed.shed_tokens, 860_000.0);
    assert_close!(shed.shed_share, 860_000.0 / 1_360_000.0);
}

#[test]
fn a_tokenizer_at_1_1_times_makes_the_same_load_1_496_million_of_bs_tokens() {
    // Through the profile's measured ratio.
    let profile = format!("{WORKED_PROFILE}token_ratios: {{B: 1.1}}\n");
    let r = report(WORKED, &profile);
    assert_close!(r.backends[1].ratio, 1.1);
    assert_close!(backend(scenario(&r, None), "B").required_tokens, 448_800.0);
    let b = backend(scenario(&r, Some("A")), "B");
    assert_close!(b.required_tokens, 1_496_000.0);
    assert_close!(b.load.unwrap(), 2.992);
    // A's tokens are unchanged.
    assert_close!(backend(scenario(&r, None), "A").required_tokens, 952_000.0);

    // And in the pure arithmetic.
    let caps = vec![
        BackendCap { name: "A".into(), local: false, ratio: 1.0, tpm: Some(1.5e6), rpm: None, reserve: 0.0 },
        BackendCap { name: "B".into(), local: false, ratio: 1.1, tpm: Some(5e5), rpm: None, reserve: 0.0 },
    ];
    let tasks = vec![TaskLoad {
        name: "support".into(),
        priority: Priority::Interactive,
        requests_per_minute: 400.0,
        tokens_per_request: 3400.0,
        backends: vec!["A".into(), "B".into()],
        split: vec![("A".into(), 0.7), ("B".into(), 0.3)],
    }];
    let s = arith::scenario(&caps, &tasks, Some("A"));
    let b = &s.backends[0];
    assert_close!(b.required_tokens, 1_496_000.0);
    assert_close!(b.carried_tokens, 500_000.0);
    // Shed in reference tokens: what B could not take, converted back.
    assert_close!(s.shed[0].shed_tokens, 1_360_000.0 - 500_000.0 / 1.1);
}

#[test]
fn a_claude_backend_counts_with_its_estimated_ratio_by_default() {
    let config = WORKED.replace("  - name: B\n    kind: openai", "  - name: B\n    kind: anthropic");
    let r = report(&config, WORKED_PROFILE);
    let ratio = spillway::tokens::TokenCounter::ClaudeEstimate.reference_ratio();
    assert_close!(r.backends[1].ratio, ratio);
    assert!(!r.backends[1].exact);
    assert_close!(backend(scenario(&r, Some("A")), "B").required_tokens, 1_360_000.0 * ratio);
    assert!(r.notes.iter().any(|n| n.contains("estimate")), "{:?}", r.notes);
}

#[test]
fn batch_is_shed_before_interactive_and_tasks_only_move_to_backends_they_list() {
    let config = cfg(r#"
backends:
  - name: A
    kind: openai
    model: m
    quota: {tpm: 1000000}
  - name: B
    kind: openai
    model: m
    quota: {tpm: 100000, rpm: 1000}
tasks:
  - name: chat
    backends: [A, B]
    slo: {ttft_ms: 800}
    priority: interactive
  - name: digest
    backends: [A, B]
    slo: {ttft_ms: 800}
  - name: only-a
    backends: [A]
    slo: {ttft_ms: 800}
"#);
    let profile = parse_profile(
        r#"
tasks:
  chat: {requests_per_minute: 60, input_tokens: 900, output_tokens: 100}
  digest: {requests_per_minute: 60, input_tokens: 900, output_tokens: 100, priority: batch}
  only-a: {requests_per_minute: 10, input_tokens: 100, output_tokens: 0}
"#,
        &config,
    )
    .unwrap();
    let r = build(&config, Some(&profile));
    let s = scenario(&r, Some("A"));
    let b = backend(s, "B");
    assert_close!(b.required_tokens, 120_000.0);
    // Interactive fills first (60 k); batch may fill B only up to its ceiling.
    let batch_room = 100_000.0 * Priority::Batch.quota_ceiling() - 60_000.0;
    assert_close!(b.carried_tokens, 60_000.0 + batch_room);
    let task = |name: &str| s.tasks.iter().find(|t| t.task == name).unwrap();
    assert_close!(task("chat").shed_requests, 0.0);
    assert_close!(task("digest").shed_tokens, 60_000.0 - batch_room);
    // only-a may not move to B, though B has room for it.
    assert_close!(task("only-a").shed_requests, 10.0);
    assert!(task("only-a").served.is_empty());
    let order: Vec<Priority> = s.shed.iter().map(|c| c.priority).collect();
    assert_eq!(order, [Priority::Batch, Priority::Standard], "batch is listed (and shed) first");
    assert!(s.shed.iter().all(|c| c.priority != Priority::Interactive));
}

#[test]
fn overflow_walks_the_preference_order_and_requests_per_minute_bind_too() {
    let config = cfg(r#"
backends:
  - name: A
    kind: openai
    model: m
    quota: {rpm: 50}
  - name: B
    kind: openai
    model: m
  - name: C
    kind: openai
    model: m
tasks:
  - name: t
    backends: [A, B, C]
    slo: {ttft_ms: 800}
    priority: interactive
"#);
    let profile =
        parse_profile("tasks: {t: {requests_per_minute: 80, input_tokens: 10, output_tokens: 0}}", &config)
            .unwrap();
    let r = build(&config, Some(&profile));
    let normal = scenario(&r, None);
    let a = backend(normal, "A");
    assert_close!(a.required_requests, 80.0);
    assert_close!(a.load.unwrap(), 80.0 / 50.0);
    assert_close!(a.short_requests, 30.0);
    assert_close!(a.carried_requests, 50.0);
    // The 30 that do not fit on A go to B, the next in preference order; nothing is shed.
    assert_eq!(normal.tasks[0].served, vec![("A".to_string(), 50.0), ("B".to_string(), 30.0)]);
    assert!(normal.shed.is_empty());
    assert!(r.notes.iter().any(|n| n.contains("B: no quota")), "{:?}", r.notes);
}

#[test]
fn a_pool_keeps_its_reserve_until_a_hosted_backend_is_lost() {
    let config = cfg(r#"
backends:
  - name: fleet
    kind: vllm
    endpoints: [http://10.0.0.1:8000, http://10.0.0.2:8000]
    model: llama
    max_running: 128
    reserve: 0.2
    tokenizer: o200k_base
  - name: hosted
    kind: openai
    model: m
    quota: {tpm: 300000}
tasks:
  - name: t
    backends: [fleet, hosted]
    slo: {ttft_ms: 800}
"#);
    let profile = parse_profile(
        r#"
tasks:
  t: {requests_per_minute: 300, input_tokens: 2500, output_tokens: 500, split: {fleet: 0.5, hosted: 0.5}}
pools:
  fleet: {tokens_per_minute: 1000000}
"#,
        &config,
    )
    .unwrap();
    let r = build(&config, Some(&profile));
    assert_eq!(r.backends[0].concurrency, Some(256));
    assert_eq!(r.backends[0].reserve, Some(0.2));
    let normal = scenario(&r, None);
    let fleet = backend(normal, "fleet");
    assert_close!(fleet.limit_tokens.unwrap(), 800_000.0);
    assert_close!(fleet.required_tokens, 450_000.0);
    assert!(!normal.reserve_released);
    // The hosted backend is lost: its traffic comes home into the released reserve.
    let lost = scenario(&r, Some("hosted"));
    assert!(lost.reserve_released);
    let fleet = backend(lost, "fleet");
    assert_close!(fleet.limit_tokens.unwrap(), 1_000_000.0);
    assert_close!(fleet.required_tokens, 900_000.0);
    assert_close!(fleet.carried_tokens, 900_000.0);
    assert!(lost.shed.is_empty());
    // The fleet is lost: hosted must take 900 k against 300 k.
    let b = backend(scenario(&r, Some("fleet")), "hosted");
    assert_close!(b.load.unwrap(), 3.0);
}

#[test]
fn without_a_profile_the_plan_shows_capacities_and_asks_for_one() {
    let config = cfg(&WORKED.replace(
        "tasks:",
        "  - name: local\n    kind: vllm\n    endpoints: [http://10.0.0.1:8000]\n    model: llama\ntasks:",
    ));
    let r = build(&config, None);
    assert!(r.scenarios.is_empty());
    assert_eq!(r.backends.len(), 3);
    assert_eq!(r.backends[1].tokens_per_minute, Some(500_000.0));
    assert_eq!(r.backends[2].tokens_per_minute, None);
    assert_eq!(r.backends[2].concurrency, Some(256));
    assert!(r.notes.iter().any(|n| n.contains("pools.local.tokens_per_minute")), "{:?}", r.notes);
    assert!(r.notes.iter().any(|n| n.contains("profile")), "{:?}", r.notes);
}

#[test]
fn profile_problems_are_reported_with_their_key_paths() {
    let config = cfg(&WORKED.replace(
        "tasks:",
        "  - name: fleet\n    kind: vllm\n    endpoints: [http://10.0.0.1:8000]\n    model: llama\ntasks:",
    ));
    let problems = parse_profile(
        r#"
colour: blue
tasks:
  support:
    requests_per_minute: 400
    input_tokens: 3000
    output_tokens: lots
  missing: {requests_per_minute: 1, input_tokens: 1, output_tokens: 1}
pools:
  B: {tokens_per_minute: 5}
  fleet: {tokens_per_minute: 5, gpus: 8}
token_ratios: {A: -1, nope: 1.1}
"#,
        &config,
    )
    .unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    for expected in [
        "colour",
        "tasks.support.output_tokens",
        "tasks.missing",
        "pools.B",
        "pools.fleet.gpus",
        "token_ratios.A",
        "token_ratios.nope",
    ] {
        assert!(paths.contains(&expected), "{expected} not in {problems:?}");
    }
    let problems = parse_profile(
        "tasks: {support: {requests_per_minute: 1, input_tokens: 1, output_tokens: 1, split: {A: 0.5, C: 0.3}}}",
        &config,
    )
    .unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"tasks.support.split.C"), "{problems:?}");
    assert!(paths.contains(&"tasks.support.split"), "{problems:?}");
    assert!(problems.iter().any(|p| p.message.contains("add up to")), "{problems:?}");
}

fn temp(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("spillway-capacity-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn run_renders_json_and_a_table_from_files() {
    let config = temp("config.yaml", WORKED);
    let profile = temp("profile.yaml", WORKED_PROFILE);
    let json = capacity::run(&PlanArgs {
        config: config.clone(),
        profile: Some(profile.clone()),
        format: Format::Json,
    })
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let lose_a = v["scenarios"].as_array().unwrap().iter().find(|s| s["lost"] == "A").unwrap();
    let b = &lose_a["backends"][0];
    assert_eq!(b["backend"], "B");
    assert!(close(b["required_tokens"].as_f64().unwrap(), 1_360_000.0));
    assert!(close(b["load"].as_f64().unwrap(), 2.72));
    assert_eq!(lose_a["shed"][0]["priority"], "standard");

    let table = capacity::run(&PlanArgs {
        config: config.clone(),
        profile: Some(profile.clone()),
        format: Format::Table,
    })
    .unwrap();
    assert!(table.contains("1,360,000") && table.contains("2.72×") && table.contains("81.6%"), "{table}");
    assert!(table.contains("shed: standard"), "{table}");

    let bare =
        capacity::run(&PlanArgs { config: config.clone(), profile: None, format: Format::Table }).unwrap();
    assert!(bare.contains("500,000") && bare.contains("--profile"), "{bare}");

    let bad = temp("bad-profile.yaml", "tasks: {nope: {requests_per_minute: 1}}");
    let err = capacity::run(&PlanArgs {
        config: config.clone(),
        profile: Some(bad.clone()),
        format: Format::Table,
    })
    .unwrap_err();
    assert!(err.contains("tasks.nope"), "{err}");
    for p in [config, profile, bad] {
        let _ = std::fs::remove_file(p);
    }
}
