//! `spillway simulate` with batch jobs: the same job run on the fleet's free slots (batching on)
//! and sent whole to a provider's batch API (off), beside the same interactive traffic. Each
//! figure the scenario report exists to show is checked: interactive SLO, idle GPU hours, the
//! job's completion time and its spend, and the deadline policy sending a job the fleet cannot
//! finish in time to the batch API.

use spillway::simulate::{self, Batching, Scenario, ScenarioReport, Stats};

/// Two hours on a two-node fleet; a batch job of `lines` lines at 10 min with `window`.
fn scenario(lines: u64, window: &str) -> Scenario {
    let text = format!(
        r#"
duration: 2h
seed: 3
strategies: [spillway]
router:
  backends:
    - name: local
      kind: vllm
      endpoints: [http://10.0.0.1:8000, http://10.0.0.2:8000]
      model: llama
      max_running: 32
      reserve: 0.2
      gpu_hourly_usd: '2.00'
    - name: openai
      kind: openai
      model: gpt-5.6
      price: {{input_per_mtok: 5.0, output_per_mtok: 20.0}}
  tasks:
    - {{name: chat, backends: [local, openai], slo: {{ttft_ms: 1000}}}}
    - {{name: nightly, backends: [local, openai], priority: batch, slo: {{ttft_ms: 30000}}}}
  batch: {{max_per_node: 12}}
providers:
  openai: {{ttft_ms: 400, batch_turnaround: 30m}}
workload:
  - task: chat
    rps: 2
    prompt_tokens: {{mean: 1000, sd: 500, min: 50, max: 4000}}
    output_tokens: {{mean: 150, sd: 80, min: 1, max: 400}}
batches:
  - task: nightly
    at: 10m
    lines: {lines}
    prompt_tokens: {{mean: 800, sd: 300, min: 100, max: 3000}}
    output_tokens: {{mean: 200, sd: 50, min: 20, max: 400}}
    window: {window}
"#
    );
    simulate::parse("batch", &text).unwrap_or_else(|e| panic!("{e:?}"))
}

fn run(s: &Scenario) -> ScenarioReport {
    simulate::simulate(s, &|_, _| {})
}

fn of(r: &ScenarioReport, batching: Batching) -> &Stats {
    r.runs.iter().find(|s| s.batch.as_ref().is_some_and(|b| b.batching == batching)).expect("run")
}

#[test]
fn a_batch_on_the_fleet_fills_idle_slots_for_free_and_leaves_interactive_traffic_alone() {
    let s = scenario(12_000, "24h");
    let r = run(&s);
    assert_eq!(r.runs.len(), 2, "one strategy, batching on and off");
    let (on, off) = (of(&r, Batching::Fleet), of(&r, Batching::Provider));
    let (bon, boff) = (on.summary(), off.summary());
    let (jon, joff) = (bon.batch.as_ref().unwrap(), boff.batch.as_ref().unwrap());
    eprintln!("{}", simulate::table(std::slice::from_ref(&r)));

    // The same interactive arrivals; the batch lines are not among them.
    assert_eq!(on.requests, off.requests);
    assert!(on.requests > 10_000, "{}", on.requests);
    // Batching on: every line on the fleet, nothing spent on it; the SLO within 5 % of off.
    assert_eq!((jon.lines, jon.fleet, jon.hosted_batch, jon.realtime), (12_000, 12_000, 0, 0), "{jon:?}");
    assert_eq!((jon.failed, jon.expired, jon.cost_usd), (0, 0, 0.0), "{jon:?}");
    assert!(
        bon.slo_attainment >= boff.slo_attainment * 0.95,
        "{} vs {}",
        bon.slo_attainment,
        boff.slo_attainment
    );
    assert!(bon.ttft_p95_ms <= boff.ttft_p95_ms * 1.05 + 50.0, "{} vs {}", bon.ttft_p95_ms, boff.ttft_p95_ms);
    // Off: the whole job at the batch API, back after its turnaround, at half of list price.
    assert_eq!((joff.hosted_batch, joff.fleet, joff.realtime), (12_000, 0, 0), "{joff:?}");
    assert_eq!(joff.completion_hours, vec![Some(0.5)]);
    // 12,000 lines of ~800 input and ~200 output tokens at $5 / $20 per Mtok, halved: ~$48.
    assert!((40.0..56.0).contains(&joff.cost_usd), "{}", joff.cost_usd);
    // The fleet's GPUs cost the same either way; on, fewer of their hours stand idle.
    assert_eq!((bon.gpu_hours, bon.fleet_cost_usd), (4.0, 8.0));
    assert_eq!((boff.gpu_hours, boff.fleet_cost_usd), (4.0, 8.0));
    assert!(
        bon.idle_gpu_hours < boff.idle_gpu_hours - 0.3,
        "{} vs {}",
        bon.idle_gpu_hours,
        boff.idle_gpu_hours
    );
    let done = jon.completion_hours[0].expect("the job ended within the run");
    assert!(done > 0.0 && done < 1.5, "{done} h");

    // Deterministic: the same scenario gives the same report.
    assert_eq!(simulate::json(std::slice::from_ref(&r)), simulate::json(&[run(&s)]));
}

#[test]
fn a_job_the_fleet_cannot_finish_in_its_window_goes_to_the_batch_api() {
    // Far more lines than two nodes' batch slots run in 90 minutes: the estimate from the
    // fleet's capacity sends them at the first tick.
    let mut s = scenario(60_000, "90m");
    s.batching = vec![Batching::Fleet];
    let r = run(&s);
    let b = of(&r, Batching::Fleet).summary().batch.unwrap();
    assert_eq!(b.lines, 60_000);
    assert!(b.hosted_batch > 30_000, "the rest went to the batch API: {b:?}");
    assert_eq!(
        b.fleet + b.hosted_batch + b.realtime + b.failed + b.expired,
        60_000,
        "every line ends once: {b:?}"
    );
    assert_eq!(b.expired, 0, "{b:?}");
    assert!(b.cost_usd > 0.0);
}

#[test]
fn batch_jobs_in_a_scenario_are_checked_naming_their_key_paths() {
    let text = |task: &str, batching: &str| {
        format!(
            r#"
duration: 1h
batching: [{batching}]
router:
  backends:
    - {{name: local, kind: vllm, endpoints: [http://10.0.0.1:8000], model: llama}}
    - {{name: claude, kind: anthropic, model: claude}}
  tasks:
    - {{name: chat, backends: [local, claude], slo: {{ttft_ms: 1000}}}}
workload:
  - {{task: chat, rps: 1, prompt_tokens: {{mean: 100}}, output_tokens: {{mean: 10}}}}
batches:
  - {{task: {task}, at: 1m, lines: 10, prompt_tokens: {{mean: 100}}, output_tokens: {{mean: 10}}}}
"#
        )
    };
    let problems = simulate::parse("bad", &text("nope", "fleet")).unwrap_err();
    assert!(
        problems.iter().any(|p| p.path == "batches[0].task" && p.message.contains("nope")),
        "{problems:?}"
    );
    // Anthropic's batch API takes Messages lines, not chat completions: batching off has nowhere to go.
    let problems = simulate::parse("bad", &text("chat", "provider")).unwrap_err();
    assert!(
        problems.iter().any(|p| p.path == "batches[0].task" && p.message.contains("batch API")),
        "{problems:?}"
    );
    assert!(simulate::parse("ok", &text("chat", "fleet")).is_ok());
}
