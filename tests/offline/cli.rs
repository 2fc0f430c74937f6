//! The command line as a user meets it: help text, check-config's report and exit code, and
//! the demo followed by a cost report of what it served.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_spillway");

#[test]
fn every_command_has_help() {
    for cmd in [
        vec!["--help"],
        vec!["serve", "--help"],
        vec!["check-config", "--help"],
        vec!["demo", "--help"],
        vec!["sim", "--help"],
        vec!["agent", "--help"],
        vec!["plan", "--help"],
        vec!["simulate", "--help"],
        vec!["report", "--help"],
    ] {
        let out = Command::new(BIN).args(&cmd).output().unwrap();
        assert!(out.status.success(), "{cmd:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage:"), "{cmd:?}: {text}");
    }
    let sim = Command::new(BIN).args(["sim", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&sim.stdout);
    for flag in
        ["--kind", "--engine", "--max-num-seqs", "--error-rate", "--drop-after", "--legacy-metrics", "--rpm"]
    {
        assert!(text.contains(flag), "sim --help lacks {flag}");
    }
}

#[test]
fn check_config_accepts_the_example() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/spillway.example.yaml");
    let out = Command::new(BIN).args(["check-config", example]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (3 backends, 2 tasks)"));
    // With --env, the unset secrets are problems.
    let out = Command::new(BIN)
        .args(["check-config", "--env", example])
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("SPILLWAY_KEY_SUPPORT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("OPENAI_API_KEY is not set"), "{err}");
}

#[test]
fn check_config_prints_every_problem_with_its_path_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("spillway-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "listen: 127.0.0.1:1\nbackends:\n  - {name: a, kind: vllm, model: m, endpoints: [http://x:1], weight: 3}\n  - {name: b, kind: openai, model: m, price: {input_per_mtok: free, output_per_mtok: 1}}\ntasks:\n  - {name: t, backends: [a], slo: {ttft_ms: 100}, strategy: fastest}\n",
    )
    .unwrap();
    let out = Command::new(BIN).args(["check-config"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("backends[0].weight: unknown field `weight`"), "{err}");
    assert!(err.contains("backends[1].price.input_per_mtok:"), "{err}");
    assert!(err.contains("tasks[0].strategy: unknown variant `fastest`"), "{err}");
    assert!(err.contains("3 problem(s) found"), "{err}");
    let missing = Command::new(BIN).args(["check-config", "/nonexistent.yaml"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
}

#[test]
fn check_config_reports_structural_and_semantic_problems_together() {
    let dir = std::env::temp_dir().join(format!("spillway-cli-both-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("both.yaml");
    std::fs::write(
        &file,
        r#"listen: nowhere
colour: blue
backends:
  - {name: a, kind: vllm, model: m, endpoints: [http://x:1], weight: 3, reserve: 1.5}
  - {name: b, kind: martian, model: m}
  - {name: c, kind: openai, model: "", base_url: "ftp://x", price: {input_per_mtok: free, output_per_mtok: -1}}
tasks:
  - {name: t, backends: [a, b, ghost], slo: {ttft_ms: 0, margin: wide}, strategy: fastest}
  - {name: u, backends: [], slo: {ttft_ms: 100}, data_class: secret}
dispatch: {max_attempts: 0, retries: 1}
"#,
    )
    .unwrap();
    let out = Command::new(BIN).args(["check-config"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = [
        // Structural: unknown keys and wrong types, each at its key path.
        "colour: unknown key",
        "backends[0].weight: unknown field `weight`",
        "backends[1].kind: unknown variant `martian`",
        "backends[2].price.input_per_mtok: invalid value",
        "tasks[0].slo.margin: invalid type",
        "tasks[0].strategy: unknown variant `fastest`",
        "dispatch.retries: unknown field `retries`",
        // Semantic, in the same report.
        "listen: `nowhere` is not an address",
        "backends[0].reserve: must be at least 0 and below 1",
        "backends[2].model: must not be empty",
        "backends[2].base_url: `ftp://x`: scheme",
        "tasks[0].backends[2]: no backend is named `ghost`",
        "tasks[0].slo.ttft_ms: must be above 0",
        "tasks[1].backends: must name at least one backend",
        "tasks[1].data_class: unknown data class `secret`",
        "dispatch.max_attempts: must be at least 1",
    ];
    for line in expected {
        assert!(err.contains(&format!("{}: {line}", file.display())), "missing {line:?} in {err}");
    }
    // One line a problem; `b` did not decode, so a task naming it is not a second problem.
    assert!(!err.contains("no backend is named `b`"), "{err}");
    assert!(err.contains(&format!("{} problem(s) found", expected.len())), "{err}");
}

#[test]
fn a_missing_required_key_is_reported_beside_other_structural_problems() {
    let dir = std::env::temp_dir().join(format!("spillway-cli-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("missing.yaml");
    std::fs::write(
        &file,
        r#"backends:
  - {name: a, kind: openai, model: m, price: {input_per_mtok: free, output_per_mtok: 1}}
tasks:
  - {name: t, backends: [a], slo: {ttft_ms: 100}, strategy: fastest}
  - {name: u, backends: [a, 7]}
dispatch: {max_attempts: lots}
"#,
    )
    .unwrap();
    let out = Command::new(BIN).args(["check-config"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = [
        "backends[0].price.input_per_mtok: invalid value",
        "tasks[0].strategy: unknown variant `fastest`",
        "tasks[1].backends[1]: invalid type",
        // Reported although the same task has a structural problem of another kind.
        "tasks[1].slo: missing (required)",
        "dispatch.max_attempts: invalid type",
    ];
    for line in expected {
        assert!(err.contains(&format!("{}: {line}", file.display())), "missing {line:?} in {err}");
    }
    assert!(err.contains(&format!("{} problem(s) found", expected.len())), "{err}");
}

#[test]
fn serve_refuses_an_invalid_config_with_the_problems() {
    let dir = std::env::temp_dir().join(format!("spillway-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "backends: []\ntasks:\n  - {name: t, backends: [ghost], slo: {ttft_ms: 100}}\n")
        .unwrap();
    let out = Command::new(BIN).args(["serve", "--config"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tasks[0].backends[0]: no backend is named `ghost`"), "{err}");
}

#[test]
fn the_agent_starts_without_a_gpu_driver_and_says_why() {
    use std::io::{BufRead, Read, Write};
    let mut agent = Command::new(BIN)
        .args(["agent", "--listen", "127.0.0.1:0", "--interval-ms", "100"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its first line says where it listens (and whether NVML is up).
    let mut said = String::new();
    std::io::BufReader::new(agent.stdout.take().unwrap()).read_line(&mut said).unwrap();
    let addr = said
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {said:?}"))
        .to_string();
    let mut body = String::new();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    conn.read_to_string(&mut body).unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    if body.lines().any(|l| l == "spillway_nvml_up 1") {
        // A machine with a GPU driver: then it must report GPUs.
        assert!(body.contains("spillway_gpu_memory_total_bytes{"), "{body}");
    } else {
        assert!(body.lines().any(|l| l == "spillway_nvml_up 0"), "{body}");
        assert!(body.contains("spillway_nvml_info{reason="), "{body}");
    }
}

#[test]
fn the_demo_ledgers_its_traffic_and_report_prices_it() {
    let dir = std::env::temp_dir().join(format!("spillway_demo_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ledger = format!("sqlite://{}", dir.join("demo.db").display());
    let config = dir.join("demo.yaml");
    let config = config.to_str().unwrap();
    let demo = Command::new(BIN)
        .args(["demo", "--listen", "127.0.0.1:0", "--load", "15", "--duration-secs", "7"])
        .args(["--ledger", &ledger, "--write-config", config])
        .arg("--log-file")
        .arg(dir.join("demo.log"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(demo.status.success(), "{}", String::from_utf8_lossy(&demo.stderr));
    let stdout = String::from_utf8_lossy(&demo.stdout);
    assert!(stdout.contains("spillway report --config"));
    assert!(stdout.contains("sglang node b"), "the demo's pool mixes engines: {stdout}");
    assert!(stdout.contains("last 5s:"), "the five-second summary is on the terminal: {stdout}");
    // The two lines that point the coding agents at the demo, whose config aliases their
    // default model ids (those of tests/fixtures/agents/) to a task with tools on the fleet.
    assert!(stdout.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:"), "{stdout}");
    assert!(stdout.contains(r#"wire_api="responses""#), "{stdout}");
    let written = std::fs::read_to_string(config).unwrap();
    assert!(written.contains("aliases: [claude-opus-5-5, gpt-6.2-sol]"), "{written}");
    // The third seed's chain, one Claude model from three providers, with how to try it.
    assert!(written.contains("backends: [anthropic-capped, bedrock-claude, vertex-claude]"), "{written}");
    assert!(stdout.contains(r#""model":"claude-anywhere""#), "{stdout}");
    // The terminal gets warnings only; every line goes to the log file the demo names.
    let stderr = String::from_utf8_lossy(&demo.stderr);
    assert!(!stderr.contains("INFO"), "info lines on the demo's terminal: {stderr}");
    assert!(stdout.contains(&format!("{}", dir.join("demo.log").display())), "{stdout}");
    let log = std::fs::read_to_string(dir.join("demo.log")).unwrap();
    assert!(log.lines().filter(|l| l.contains("INFO")).count() > 20, "the full log is in the file: {log}");
    let checked = Command::new(BIN).args(["check-config", config]).output().unwrap();
    assert!(
        checked.status.success(),
        "the written config is valid: {}",
        String::from_utf8_lossy(&checked.stderr)
    );

    let report = |format: &str| {
        let out = Command::new(BIN)
            .args(["report", "--config", config, "--from", "-1h", "--format", format])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    let requests = json["totals"]["requests"].as_u64().unwrap();
    assert!(requests >= 40, "about 15 req/s for 7 s were ledgered: {requests}");
    let pool = &json["pools"][0];
    // Both nodes, the vLLM one and the SGLang one, were read and paid for.
    assert_eq!((pool["pool"].as_str(), pool["nodes"].as_u64()), (Some("local-llama"), Some(2)));
    let gpu: f64 = json["totals"]["gpu_usd"].as_str().unwrap().parse().unwrap();
    assert!(gpu > 0.0, "two priced nodes were paid for: {json}");
    eprintln!("demo pool: {pool}");
    // 16 slots a node and a load that keeps a few of them running: utilisation is the share of
    // slots that ran, not the busy-minute share (every minute of the run was busy).
    let (utilisation, busy_share) =
        (pool["utilisation"].as_f64().unwrap(), pool["busy_share"].as_f64().unwrap());
    assert_eq!(pool["utilisation_basis"], "capacity", "{pool}");
    // Every node-minute with traffic was busy. A 7 s run may cross a minute boundary (two
    // minutes a node, one GPU each), and a node whose only sample in one of them came before
    // the load or after it has that minute idle: at most one of its two.
    let gpu_hours = |k: &str| pool[k].as_str().unwrap().parse::<f64>().unwrap();
    let node_minutes = (gpu_hours("gpu_hours_busy") + gpu_hours("gpu_hours_idle")) * 60.0;
    let straddled = (node_minutes - 4.0).abs() < 0.01 && busy_share >= 0.5;
    assert!(busy_share > 0.99 || straddled, "every node-minute with traffic was busy: {pool}");
    assert!((0.1..0.6).contains(&utilisation), "4 to 6 of 16 slots running, not 100 %: {pool}");
    assert!(report("table").contains("summarise-ticket"));

    let bad = Command::new(BIN).args(["report", "--config", config, "--group-by", "node"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("group-by `node` is not one of task, backend, key"));
    let _ = std::fs::remove_dir_all(&dir);
}
