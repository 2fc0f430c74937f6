//! The dashboard JSON from a small hand-written exposition: numbers land where the page reads
//! them, non-finite values become null, requests split into local and hosted by backend kind.

use super::*;

const CONFIG: &str = r#"
backends:
  - {name: pool, kind: vllm, endpoints: ["http://127.0.0.1:1"], model: llama, max_running: 8}
  - {name: claude, kind: anthropic, base_url: "http://127.0.0.1:2", model: claude, price: {input_per_mtok: 3, output_per_mtok: 15}}
tasks:
  - {name: chat, backends: [pool, claude], slo: {ttft_ms: 800, objective: 0.9}}
  - {name: idle, backends: [claude], slo: {ttft_ms: 2000}}
"#;

const EXPOSITION: &str = r#"# HELP spillway_requests_total Finished requests.
# TYPE spillway_requests_total counter
spillway_requests_total{backend="pool",outcome="completed",task="chat"} 30
spillway_requests_total{backend="claude",outcome="completed",task="chat"} 10
spillway_requests_total{backend="",outcome="shed",task="chat"} 2
# TYPE spillway_spills_total counter
spillway_spills_total{reason="no_headroom",task="chat"} 7
spillway_spills_total{reason="stale",task="chat"} 3
# TYPE spillway_shed_total counter
spillway_shed_total{priority="batch",task="chat"} 2
# TYPE spillway_ttft_percentile_seconds gauge
spillway_ttft_percentile_seconds{percentile="p50",task="chat"} 0.12
spillway_ttft_percentile_seconds{percentile="p95",task="chat"} 0.4
spillway_ttft_percentile_seconds{percentile="p99",task="chat"} NaN
# TYPE spillway_slo_attainment_ratio gauge
spillway_slo_attainment_ratio{slo="ttft",task="chat",window="5m"} 0.95
spillway_slo_attainment_ratio{slo="ttft",task="chat",window="6h"} 0.96
spillway_slo_attainment_ratio{slo="availability",task="chat",window="6h"} 0.99
# TYPE spillway_slo_burn_rate gauge
spillway_slo_burn_rate{slo="ttft",task="chat",window="1h"} 0.5
spillway_slo_burn_rate{slo="availability",task="chat",window="1h"} +Inf
# TYPE spillway_node_running gauge
spillway_node_running{backend="pool",node="pool/a"} 3
# TYPE spillway_node_waiting gauge
spillway_node_waiting{backend="pool",node="pool/a"} 1
# TYPE spillway_node_kv_usage_ratio gauge
spillway_node_kv_usage_ratio{backend="pool",node="pool/a"} 0.25
# TYPE spillway_node_headroom gauge
spillway_node_headroom{backend="pool",node="pool/a"} 2.4
spillway_node_headroom{backend="pool",node="pool/b"} 6.4
# TYPE spillway_node_telemetry_age_seconds gauge
spillway_node_telemetry_age_seconds{backend="pool",node="pool/a"} 0.3
spillway_node_telemetry_age_seconds{backend="pool",node="pool/b"} +Inf
# TYPE spillway_node_quarantined gauge
spillway_node_quarantined{backend="pool",node="pool/a"} 0
spillway_node_quarantined{backend="pool",node="pool/b"} 1
# TYPE spillway_node_held gauge
spillway_node_held{backend="pool",node="pool/a"} 1
spillway_node_held{backend="pool",node="pool/b"} 0
# TYPE spillway_gpu_utilization_ratio gauge
spillway_gpu_utilization_ratio{backend="pool",gpu="0",node="pool/a"} 0.5
spillway_gpu_utilization_ratio{backend="pool",gpu="1",node="pool/a"} 0.7
# TYPE spillway_breaker_state gauge
spillway_breaker_state{backend="pool",node="pool/a"} 0
spillway_breaker_state{backend="pool",node="pool/b"} 2
spillway_breaker_state{backend="claude",node="claude"} 1
# TYPE spillway_backend_availability gauge
spillway_backend_availability{backend="claude"} 0.75
# TYPE spillway_backend_weight gauge
spillway_backend_weight{backend="pool",task="chat"} 1
spillway_backend_weight{backend="claude",task="chat"} 0
# TYPE spillway_gate_passing gauge
spillway_gate_passing{backend="pool",task="chat"} 0
spillway_gate_passing{backend="claude",task="chat"} 1
spillway_gate_passing{backend="claude",task="idle"} 0
# TYPE spillway_gate_failed gauge
spillway_gate_failed{backend="pool",task="chat"} 1
spillway_gate_failed{backend="claude",task="chat"} 0
spillway_gate_failed{backend="claude",task="idle"} 0
# TYPE spillway_pool_occupancy_ratio gauge
spillway_pool_occupancy_ratio{backend="pool",priority="interactive"} 0.25
spillway_pool_occupancy_ratio{backend="pool",priority="batch"} 0.5
# TYPE spillway_batch_lines gauge
spillway_batch_lines{state="queued"} 40
spillway_batch_lines{state="running"} 4
"#;

fn built() -> Value {
    let config = crate::config::parse(CONFIG).unwrap_or_else(|p| panic!("{p:#?}"));
    build(EXPOSITION, &config, 1_700_000_000_000, &[])
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-9)
}

#[test]
fn tasks_come_from_the_config_with_their_slo_numbers() {
    let d = built();
    assert_eq!(d["now_ms"], 1_700_000_000_000_i64);
    assert!(close(&d["telemetry_stale_after_s"], 5.0));
    let names: Vec<&str> =
        d["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["chat", "idle"], "every configured task, in config order");
    let chat = &d["tasks"][0];
    assert!(close(&chat["ttft_target_s"], 0.8) && close(&chat["objective"], 0.9));
    assert!(close(&chat["p50_s"], 0.12) && close(&chat["p95_s"], 0.4));
    assert!(chat["p99_s"].is_null(), "NaN percentile is null");
    assert!(close(&chat["attainment"]["ttft"]["5m"], 0.95));
    assert!(chat["attainment"]["ttft"]["1h"].is_null(), "missing window is null");
    assert!(close(&chat["burn"]["ttft"]["1h"], 0.5));
    assert!(chat["burn"]["availability"]["1h"].is_null(), "+Inf burn rate is null");
    // 6h: 4 % missed of a 10 % budget leaves 60 %; 1 % missed of a 0.1 % budget leaves none.
    assert!(close(&chat["budget_left"]["ttft"], 0.6), "{}", chat["budget_left"]);
    assert!(close(&chat["budget_left"]["availability"], 0.0));
    assert!(close(&chat["requests"], 42.0) && close(&chat["spills"], 10.0) && close(&chat["shed"], 2.0));
    assert!(close(&chat["requests_by_outcome"]["completed"], 40.0));
    let idle = &d["tasks"][1];
    assert!(
        close(&idle["requests"], 0.0) && idle["p50_s"].is_null() && idle["budget_left"]["ttft"].is_null()
    );
    assert!(close(&idle["availability_objective"], 0.999));
}

#[test]
fn nodes_carry_load_telemetry_gpus_and_quarantine() {
    let d = built();
    let nodes = d["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let (a, b) = (&nodes[0], &nodes[1]);
    assert_eq!((a["backend"].as_str(), a["node"].as_str()), (Some("pool"), Some("pool/a")));
    assert!(close(&a["running"], 3.0) && close(&a["waiting"], 1.0) && close(&a["kv_usage"], 0.25));
    assert!(close(&a["gpu_util"], 0.6) && a["gpus"] == 2 && a["quarantined"] == false);
    assert!(a["held"] == true && b["held"] == false, "drained by an operator");
    assert_eq!(a["breaker"], "closed");
    assert!(b["telemetry_age_s"].is_null(), "never scraped: infinite age is null");
    assert!(b["running"].is_null() && b["gpu_util"].is_null() && b["quarantined"] == true);
    assert_eq!(b["breaker"], "open");
}

#[test]
fn backends_and_counters_split_local_from_hosted() {
    let d = built();
    let pool = &d["backends"][0];
    assert_eq!((pool["backend"].as_str(), pool["local"].as_bool()), (Some("pool"), Some(true)));
    assert_eq!(pool["breakers"], json!({"closed": 1, "half_open": 0, "open": 1}));
    assert!(pool["availability"].is_null() && pool["quarantined"] == 1);
    let claude = &d["backends"][1];
    assert!(close(&claude["availability"], 0.75) && close(&claude["weight"]["chat"], 0.0));
    assert_eq!(claude["breakers"]["half_open"], 1);
    assert_eq!(pool["gate"], json!({"chat": "fail"}));
    assert_eq!(claude["gate"], json!({"chat": "pass", "idle": "untested"}));
    let c = &d["counters"];
    assert!(close(&c["local_requests"], 30.0) && close(&c["hosted_requests"], 10.0));
    assert!(close(&c["unserved_requests"], 2.0) && close(&c["requests_total"], 42.0));
    assert_eq!(c["requests_by_backend"], json!({"claude": 10.0, "pool": 30.0}));
    assert_eq!(c["spills_by_reason"], json!({"no_headroom": 7.0, "stale": 3.0}));
    assert!(close(&c["shed_total"], 2.0));
}

#[test]
fn helpers_and_empty_input() {
    assert_eq!(num(f64::NAN), Value::Null);
    assert_eq!(num(f64::NEG_INFINITY), Value::Null);
    assert_eq!(num(-0.0).to_string(), "0.0", "an empty sum is plain zero");
    assert_eq!(budget_left(1.0, 1.0), 1.0);
    assert_eq!(budget_left(0.5, 0.99), 0.0);
    let config = crate::config::parse(CONFIG).unwrap();
    let d = build("", &config, 0, &[]);
    assert_eq!(d["tasks"].as_array().unwrap().len(), 2);
    assert!(d["nodes"].as_array().unwrap().is_empty());
    assert!(close(&d["counters"]["requests_total"], 0.0));
}

#[test]
fn batch_work_shows_beside_interactive_occupancy_with_each_jobs_plan() {
    use crate::batch::job::{Counts, Dialect, Status};
    let config = crate::config::parse(CONFIG).unwrap();
    let job = crate::batch::store::JobRow {
        id: "batch_1".into(),
        dialect: Dialect::OpenAi,
        endpoint: "/v1/chat/completions".into(),
        input_file_id: Some("file-1".into()),
        output_file_id: None,
        error_file_id: None,
        status: Status::InProgress,
        owner: Some("secret-owner".into()),
        metadata: Some(r#"{"note": "private"}"#.into()),
        errors: None,
        window_ms: 86_400_000,
        created_ms: 1_000,
        at_ms: [None; 7],
        total: 10,
        plan: Some(r#"{"route": "hosted_batch", "fleet_finish_s": 90000.0, "reason": "too slow"}"#.into()),
    };
    let counts = Counts { queued: 5, running: 2, succeeded: 2, errored: 1, ..Counts::default() };
    let d = build(EXPOSITION, &config, 0, &[BatchJob::new(&job, &counts)]);
    let b = &d["batch"];
    assert!(
        close(&b["occupancy"]["pool"]["interactive"], 0.25) && close(&b["occupancy"]["pool"]["batch"], 0.5)
    );
    assert!(b["occupancy"]["pool"]["standard"].is_null(), "no series: null");
    assert!(b["occupancy"].get("claude").is_none(), "only local pools have occupancy");
    assert!(close(&b["lines"]["queued"], 40.0) && close(&b["lines"]["running"], 4.0));
    let shown = &b["jobs"][0];
    assert_eq!((&shown["status"], &shown["plan"]["route"]), (&"in_progress".into(), &"hosted_batch".into()));
    assert_eq!(
        (&shown["total"], &shown["succeeded"], &shown["failed"], &shown["open"]),
        (&10.into(), &2.into(), &1.into(), &7.into())
    );
    assert_eq!(shown["expires_ms"], 86_401_000_i64);
    let text = d.to_string();
    assert!(!text.contains("secret-owner") && !text.contains("private"), "no owner, no metadata: {text}");
}
