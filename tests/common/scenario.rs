//! Fleet scenarios: simulated vLLM nodes and hosted providers behind a real router, driven
//! by an open-loop load in phases, summarised as SLO attainment, local share and hosted token
//! spend. Shared by `tests/fleet/scenarios.rs` (short, asserted) and `benches/scenarios.rs` (longer,
//! printed as a table).
#![allow(dead_code)]

use std::time::Duration;

use spillway::demo::loadgen::{one_request, Served};
use spillway::sim::{self, SimArgs, SimHandle, SimKind};
use tokio::time::Instant;

pub const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// The simulated node shape every scenario uses.
pub const MAX_NUM_SEQS: usize = 16;
pub const OUTPUT_TOKENS: u32 = 40;
pub const ITL_BASE_MS: f64 = 20.0;
pub const ITL_PER_SEQ_MS: f64 = 0.5;
pub const SLO_MS: u64 = 500;

/// Requests per second `nodes` simulated nodes complete when every slot is busy.
pub fn fleet_capacity_rps(nodes: usize) -> f64 {
    let step_s = (ITL_BASE_MS + ITL_PER_SEQ_MS * MAX_NUM_SEQS as f64) / 1000.0;
    nodes as f64 * MAX_NUM_SEQS as f64 / (f64::from(OUTPUT_TOKENS) * step_s)
}

pub struct Fleet {
    pub nodes: Vec<Option<SimHandle>>,
    pub hosted: Option<SimHandle>,
    pub router: spillway::api::RouterHandle,
    pub url: String,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.router.task.abort();
    }
}

async fn spawn_sim(args: SimArgs) -> SimHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    sim::spawn(args, listener).await.unwrap()
}

/// `nodes` vLLM simulators (a pool with a 20 % reserve) and one hosted OpenAI simulator,
/// behind a router with task `chat` = [local, hosted].
pub async fn start_fleet(nodes: usize) -> Fleet {
    let mut sims = Vec::new();
    for i in 0..nodes {
        let mut args = SimArgs::for_kind(SimKind::Vllm, LLAMA);
        args.seed = i as u64;
        args.max_num_seqs = MAX_NUM_SEQS;
        args.itl_base_ms = ITL_BASE_MS;
        args.itl_per_seq_ms = ITL_PER_SEQ_MS;
        args.output_tokens = OUTPUT_TOKENS;
        sims.push(spawn_sim(args).await);
    }
    let mut hosted = SimArgs::for_kind(SimKind::OpenAi, "gpt-5.6");
    hosted.ttft_ms = 80;
    hosted.tokens_per_sec = 400.0;
    let hosted = spawn_sim(hosted).await;
    let endpoints: Vec<String> = sims.iter().map(|s| s.base_url()).collect();
    let yaml = format!(
        r#"
backends:
  - {{name: local, kind: vllm, endpoints: [{}], model: {LLAMA}, max_running: {MAX_NUM_SEQS}, reserve: 0.2}}
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6,
      price: {{input_per_mtok: 5, output_per_mtok: 20}}}}
tasks:
  - {{name: chat, backends: [local, hosted], slo: {{ttft_ms: {SLO_MS}}}, priority: interactive}}
telemetry: {{interval_ms: 250, stale_after_ms: 1500, backoff_max_ms: 500}}
dispatch: {{breaker: {{consecutive_failures: 3, open_secs: 2}}}}
limits: {{max_concurrency: 100000}}
"#,
        endpoints.join(", "),
        hosted.base_url()
    );
    let config = spillway::config::parse(&yaml).unwrap();
    let secrets = spillway::config::secrets::Secrets::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let router = spillway::app::start(config, secrets, listener, std::future::pending()).await.unwrap();
    let url = format!("http://{}", router.addr);
    let fleet = Fleet { nodes: sims.into_iter().map(Some).collect(), hosted: Some(hosted), router, url };
    super::wait_fresh(&fleet.url, Duration::from_secs(10)).await;
    fleet
}

/// One request of a scenario: when it started (since the scenario began) and how it ended.
pub struct Logged {
    pub started: Duration,
    pub result: Result<Served, String>,
}

/// Send `rps` requests per second for `secs`, for each phase in turn; wait for all to end.
/// `at` runs once, `at.0` into the scenario (to kill a node, say).
pub async fn drive(
    url: &str,
    phases: &[(f64, f64)],
    at: Option<(Duration, Box<dyn FnOnce() + Send>)>,
) -> Vec<Logged> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(4096).build().unwrap();
    let chat = format!("{url}/v1/chat/completions");
    let begin = Instant::now();
    let mut event = at;
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0u64;
    // The next send carries over from one phase to the next, so each phase sends its rate
    // times its length on average, not that rounded up.
    let (mut next, mut end) = (begin, begin);
    for &(rps, secs) in phases {
        let gap = Duration::from_secs_f64(1.0 / rps);
        end += Duration::from_secs_f64(secs);
        while next < end {
            tokio::time::sleep_until(next).await;
            if event.as_ref().is_some_and(|(when, _)| begin.elapsed() >= *when) {
                if let Some((_, f)) = event.take() {
                    f();
                }
            }
            n += 1;
            let (client, chat) = (client.clone(), chat.clone());
            let started = begin.elapsed();
            tasks.spawn(async move {
                let result = one_request(&client, &chat, "chat", OUTPUT_TOKENS, n).await;
                Logged { started, result }
            });
            next += gap;
        }
    }
    let mut logs = Vec::new();
    while let Some(done) = tasks.join_next().await {
        logs.push(done.unwrap());
    }
    logs.sort_by_key(|l| l.started);
    logs
}

/// What a scenario (or a window of it) came to.
#[derive(Debug, Clone)]
pub struct Report {
    pub requests: usize,
    pub errors: usize,
    /// Share of requests answered with a first token within the SLO.
    pub slo_attainment: f64,
    pub ttft_p95_ms: f64,
    /// Share of answered requests served by the local pool.
    pub local_share: f64,
    /// Input + output tokens sent to hosted backends.
    pub hosted_tokens: u64,
    /// Median absolute percentage error of the router's TTFT prediction for the node that
    /// served, against the TTFT it measured (local requests only).
    pub predictor_mape: Option<f64>,
}

/// Summarise the requests that started within `from..to`.
pub fn report(logs: &[Logged], from: Duration, to: Duration) -> Report {
    let window: Vec<&Logged> = logs.iter().filter(|l| l.started >= from && l.started < to).collect();
    let served: Vec<&Served> = window.iter().filter_map(|l| l.result.as_ref().ok()).collect();
    let mut ttfts: Vec<f64> = served.iter().map(|s| s.ttft.as_secs_f64() * 1000.0).collect();
    ttfts.sort_by(f64::total_cmp);
    let p95 = ttfts
        .get(((ttfts.len() as f64 * 0.95) as usize).min(ttfts.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    let within = ttfts.iter().filter(|t| **t <= SLO_MS as f64).count();
    let local = served.iter().filter(|s| s.backend == "local").count();
    let mut errors: Vec<f64> = served
        .iter()
        .filter_map(|s| match (s.predicted_ttft_ms, s.upstream_ttft_ms) {
            (Some(p), Some(a)) if a > 0.0 => Some((p - a).abs() / a),
            _ => None,
        })
        .collect();
    errors.sort_by(f64::total_cmp);
    Report {
        predictor_mape: errors.get(errors.len() / 2).copied(),
        requests: window.len(),
        errors: window.len() - served.len(),
        slo_attainment: within as f64 / window.len().max(1) as f64,
        ttft_p95_ms: p95,
        local_share: local as f64 / served.len().max(1) as f64,
        hosted_tokens: served.iter().filter(|s| s.backend != "local").map(|s| s.tokens).sum(),
    }
}
