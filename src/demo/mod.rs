//! `spillway demo`: the whole system on loopback with nothing to configure.
//!
//! Starts two simulated self-hosted nodes (one vLLM, one SGLang, in one pool whose engine is told
//! per node), simulated OpenAI, Anthropic and Gemini endpoints, Claude from three providers
//! ([`clouds`]), and the router in front of them with an embedded config; optionally drives
//! traffic so that local serving and spill to hosted show within seconds.

pub mod clouds;
pub mod loadgen;

use std::net::SocketAddr;
use std::time::Duration;

use crate::config;
use crate::sim::{self, SimArgs, SimHandle, SimKind};

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Where the router listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Also send this many requests per second through the router (0: none).
    #[arg(long, default_value_t = 0.0)]
    pub load: f64,
    /// Seed for the simulators' text and faults.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Stop after this many seconds (0: run until ctrl-c).
    #[arg(long, default_value_t = 0)]
    pub duration_secs: u64,
    /// The cost ledger the demo writes (`spillway report --config spillway-demo.yaml` reads it).
    #[arg(long, default_value = "sqlite://spillway-demo.db")]
    pub ledger: String,
    /// Where the demo writes its router config, for `spillway report` and `check-config`.
    #[arg(long, default_value = "spillway-demo.yaml")]
    pub write_config: std::path::PathBuf,
    /// Where the demo writes its full log; the terminal shows only warnings and errors.
    #[arg(long, default_value = "spillway-demo.log")]
    pub log_file: std::path::PathBuf,
}

/// The admin token the demo uses when `SPILLWAY_ADMIN_TOKEN` is not set.
const DEMO_ADMIN_TOKEN: &str = "demo-admin-token";

/// The model ids Claude Code 2.1.332 and Codex 0.171.0 ask for by default (their captured
/// requests: tests/fixtures/agents/), aliased to the demo's coding-agent task.
const CLAUDE_CODE_MODEL: &str = "claude-opus-5-5";
const CODEX_MODEL: &str = "gpt-6.2-sol";

/// The demo's golden set, written beside its config.
pub(crate) const GOLDEN_FILE: &str = "spillway-demo-golden.jsonl";

/// Golden items for summarise-ticket that the simulators' generated words pass or fail on
/// their merits (they answer with words from a fixed vocabulary, never with numbers).
const GOLDEN: &str = r#"{"messages": [{"role": "user", "content": "Summarise: the printer on floor 3 jams every morning."}], "grader": {"type": "regex", "pattern": "^[A-Za-z ,.'-]+$"}}
{"messages": [{"role": "user", "content": "Summarise: VPN drops every hour for the sales team."}], "grader": {"type": "contains", "all": ["the"]}}
{"messages": [{"role": "user", "content": "Summarise: laptop battery swells."}], "reference": "the model answers with a short and clear reply about your request", "grader": {"type": "similar", "min": 0.15}}
{"messages": [{"role": "user", "content": "Summarise: wifi is slow in the cafeteria."}], "grader": {"type": "regex", "pattern": "\\w+ \\w+ \\w+"}}
{"messages": [{"role": "user", "content": "How many tickets mention the printer? Answer with a number."}], "grader": {"type": "numeric", "value": 3}}
{"messages": [{"role": "user", "content": "Reply in JSON with a priority field."}], "grader": {"type": "json_schema", "schema": {"type": "object", "required": ["priority"]}}}
{"messages": [{"role": "user", "content": "Summarise: the router keeps the fleet busy."}], "grader": {"type": "contains", "all": ["router"]}}
{"messages": [{"role": "user", "content": "Summarise: keyboard keys stick."}], "grader": {"type": "regex", "pattern": "^.{10,}$"}}
{"messages": [{"role": "user", "content": "Summarise: monitor flickers after lunch."}], "grader": {"type": "contains", "all": ["a"]}}
{"messages": [{"role": "user", "content": "Summarise: badge reader at the door fails."}], "grader": {"type": "regex", "pattern": "[a-z]"}}
"#;

/// The simulated fleet and providers behind the demo router.
pub struct DemoFleet {
    /// Each simulator with the name the demo prints for it.
    pub sims: Vec<(&'static str, SimHandle)>,
    /// The router config, with the simulators' addresses filled in.
    pub config_yaml: String,
}

async fn start_sim(
    kind: SimKind,
    model: &str,
    seed: u64,
    tune: impl FnOnce(&mut SimArgs),
) -> std::io::Result<SimHandle> {
    let mut args = SimArgs::for_kind(kind, model);
    args.seed = seed;
    tune(&mut args);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    sim::spawn(args, listener).await
}

/// Start the simulators and write the router config that points at them (and, into `dir`, the
/// files it names).
pub async fn start_fleet(
    listen: SocketAddr,
    seed: u64,
    ledger: &str,
    dir: &std::path::Path,
) -> std::io::Result<DemoFleet> {
    let llama = "meta-llama/Llama-3.1-8B-Instruct";
    let node_a = start_sim(SimKind::Vllm, llama, seed, |a| a.max_num_seqs = 16).await?;
    let node_b = start_sim(SimKind::Vllm, llama, seed + 1, |a| {
        a.max_num_seqs = 16;
        a.engine = crate::canonical::Engine::Sglang;
    })
    .await?;
    let openai = start_sim(SimKind::OpenAi, "gpt-5.6", seed + 2, |_| {}).await?;
    let anthropic = start_sim(SimKind::Anthropic, "claude-sonnet-4-6", seed + 3, |_| {}).await?;
    let gemini = start_sim(SimKind::Gemini, "gemini-3.5-pro", seed + 4, |_| {}).await?;
    let clouds = clouds::start(seed, dir).await?;
    let config_yaml = format!(
        r#"# Embedded demo config: every backend is a simulator on loopback.
listen: {listen}
admin_token_env: SPILLWAY_ADMIN_TOKEN
ledger: {{url: "{ledger}"}}
backends:
  - name: local-llama
    kind: local
    engine: auto             # node a runs vLLM, node b SGLang: each is told from its metrics
    endpoints: [{a}, {b}]
    model: {llama}
    region: eu-west-1
    max_running: 16          # the simulators' --max-num-seqs
    reserve: 0.2
    gpu_count: 1
    gpu_hourly_usd: 2.50     # per GPU hour, for the cost report
    capabilities: {{tools: true}}   # coding agents call tools
  - name: openai
    kind: openai
    base_url: {openai}/v1
    model: gpt-5.6
    version: "2026-10-01"    # the gate's fingerprint is model@version
    region: us
    price: {{input_per_mtok: 5.0, cached_input_per_mtok: 0.5, output_per_mtok: 20.0}}
  - name: anthropic
    kind: anthropic
    base_url: {anthropic}
    model: claude-sonnet-4-6
    region: us
    price: {{input_per_mtok: 3.0, output_per_mtok: 15.0}}
  - name: gemini
    kind: gemini
    base_url: {gemini}/v1beta
    model: gemini-3.5-pro
    region: us
    price: {{input_per_mtok: 3.5, output_per_mtok: 10.5}}
{clouds}tasks:
  - name: summarise-ticket
    backends: [local-llama, anthropic, openai, gemini]
    strategy: priority
    data_class: internal
    slo: {{ttft_ms: 800}}
    max_output_tokens: 400
    # The gate: `spillway gate run --config spillway-demo.yaml --task summarise-ticket`.
    # Not required here, so the demo serves before any run; results show in `gate report`.
    gate: {{golden: {GOLDEN_FILE}, min_pass: 0.6, max_p95_ms: 4000, required: false}}
    # 5 % of requests are also sent to the other backends and graded against the answer.
    shadow: {{rate: 0.05}}
  - name: cheap-chat
    backends: [openai, anthropic, gemini]
    strategy: cost
    slo: {{ttft_ms: 1500}}
  - name: coding-agent
    # Claude Code and Codex as they ship: their default model ids name this task, so they
    # run on the fleet unmodified and spill to hosted when it fills.
    aliases: [{claude_code_model}, {codex_model}]
    backends: [local-llama, anthropic, openai]
    strategy: priority
    slo: {{ttft_ms: 2000}}
  - name: claude-anywhere
    backends: [anthropic-capped, bedrock-claude, vertex-claude]
    strategy: priority
    slo: {{ttft_ms: 2000}}
  - name: restricted-notes
    backends: [local-llama, openai]
    data_class: restricted
    slo: {{ttft_ms: 1500}}
policy:
  data_classes:
    restricted: {{regions: [eu-west-1], allow_hosted: false}}
"#,
        a = node_a.base_url(),
        b = node_b.base_url(),
        openai = openai.base_url(),
        anthropic = anthropic.base_url(),
        gemini = gemini.base_url(),
        claude_code_model = CLAUDE_CODE_MODEL,
        codex_model = CODEX_MODEL,
        clouds = clouds.backends,
    );
    let mut sims = vec![
        ("vllm node a", node_a),
        ("sglang node b", node_b),
        ("openai sim", openai),
        ("anthropic sim", anthropic),
        ("gemini sim", gemini),
    ];
    sims.extend(clouds.sims);
    Ok(DemoFleet { sims, config_yaml })
}

pub async fn run(args: DemoArgs) -> Result<(), String> {
    let dir =
        args.write_config.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let fleet = start_fleet(args.listen, args.seed, &args.ledger, dir)
        .await
        .map_err(|e| format!("cannot start the simulators: {e}"))?;
    std::fs::write(dir.join(GOLDEN_FILE), GOLDEN)
        .map_err(|e| format!("cannot write the demo's golden set: {e}"))?;
    let cfg = config::parse_in(&fleet.config_yaml, Some(dir))
        .map_err(|p| format!("embedded demo config is invalid: {p:?}"))?;
    std::fs::write(&args.write_config, &fleet.config_yaml)
        .map_err(|e| format!("cannot write {}: {e}", args.write_config.display()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e} (pick another with --listen)", args.listen))?;
    let admin_token = std::env::var("SPILLWAY_ADMIN_TOKEN").unwrap_or_else(|_| DEMO_ADMIN_TOKEN.into());
    let secrets = crate::config::secrets::Secrets {
        backend_keys: [("bedrock-claude".to_string(), clouds::BEDROCK_KEY.to_string())].into(),
        ledger_url: Some(args.ledger.clone()),
        admin_token: Some(admin_token.clone()),
        ..Default::default()
    };
    let duration = args.duration_secs;
    let shutdown = async move {
        tokio::select! {
            () = crate::app::signal::shutdown_signal() => {}
            () = tokio::time::sleep(Duration::from_secs(duration)), if duration > 0 => {}
        }
    };
    let router = crate::app::start(cfg, secrets, listener, shutdown).await.map_err(|e| e.to_string())?;
    let url = format!("http://{}", router.addr);
    println!("Spillway demo is up.");
    println!(
        "  router:          {url}   (tasks: summarise-ticket, cheap-chat, coding-agent, claude-anywhere, restricted-notes)"
    );
    for (name, s) in &fleet.sims {
        println!("  {name:<18} {}", s.base_url());
    }
    println!("\nTry it:\n  curl -sN {url}/v1/chat/completions -H 'content-type: application/json' \\\n    -d '{{\"model\":\"summarise-ticket\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"Summarise: printer on floor 3 is on fire\"}}]}}'");
    println!("  The x-spillway-backend response header (curl -i) says who served it.");
    println!("  With the openai SDK's Responses API (what Codex-family agents speak):\n    python3 -c \"import openai; c = openai.OpenAI(base_url='{url}/v1', api_key='unused'); print(c.responses.create(model='summarise-ticket', max_output_tokens=64, input='Summarise: disk full on db-2').output_text)\"");
    println!("  With the anthropic SDK (Messages, the dialect Claude Code speaks):\n    python3 -c \"import anthropic; c = anthropic.Anthropic(base_url='{url}', api_key='unused'); print(c.messages.create(model='summarise-ticket', max_tokens=64, messages=[{{'role': 'user', 'content': 'Summarise: disk full on db-2'}}]).content[0].text)\"");
    println!(
        "\nOne Claude model from three providers (task claude-anywhere: Anthropic, then Amazon Bedrock, then Vertex AI;\n\
         Anthropic and Bedrock take {} requests a minute each). Send 50 and watch the traffic move down the chain\n\
         and, a minute later, come back:\n  \
         for i in $(seq 50); do curl -s -o /dev/null -w '%header{{x-spillway-backend}}\\n' {url}/v1/chat/completions \\\n    \
         -H 'content-type: application/json' -d '{{\"model\":\"claude-anywhere\",\"max_tokens\":8,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'; done | uniq -c",
        clouds::CAPPED_RPM
    );
    println!("\nPoint a coding agent at it (task coding-agent: the fleet first, hosted when it fills):");
    println!("  Claude Code:  ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=unused claude");
    println!(
        "  Codex:        SPILLWAY_KEY=unused codex -c model_provider=spillway -c 'model_providers.spillway={{name=\"spillway\", base_url=\"{url}/v1\", env_key=\"SPILLWAY_KEY\", wire_api=\"responses\"}}'"
    );
    println!("\nWatch it:\n  dashboard:       {url}/dashboard\n  metrics:         {url}/metrics");
    println!("  log:             {} (this terminal shows warnings only)", args.log_file.display());
    if args.load > 0.0 {
        println!(
            "\nSending {} requests/s to summarise-ticket: each local node takes what its headroom allows \
             (16 slots, 20 % kept in reserve); the rest spills to hosted:",
            args.load
        );
        let generator = loadgen::LoadSpec {
            url: format!("{url}/v1/chat/completions"),
            model: "summarise-ticket".into(),
            rps: args.load,
            duration: (args.duration_secs > 0).then(|| Duration::from_secs(args.duration_secs)),
            max_tokens: 48,
            report_every: Some(Duration::from_secs(5)),
        };
        let ready = format!("{url}/readyz");
        tokio::spawn(async move {
            // The load starts once the router has measured its fleet, as a Service's would.
            let client = reqwest::Client::new();
            for _ in 0..400 {
                if client.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            loadgen::run(generator).await
        });
    } else {
        println!("  (run with --load 20 to see local serving and spill to hosted under load)");
    }
    println!(
        "\nCost: every request and GPU minute goes to the ledger ({}).\n  spillway report --config {} --from today --format table|csv|json|html\n  curl -s -H 'authorization: Bearer {admin_token}' '{url}/admin/reports/cost?format=table'",
        args.ledger,
        args.write_config.display()
    );
    println!(
        "\nGate: run the golden set ({GOLDEN_FILE}) on every backend of summarise-ticket, then compare:\n  spillway gate run --config {0} --task summarise-ticket\n  spillway gate report --config {0}",
        args.write_config.display()
    );
    // Stopping (ctrl-c, SIGTERM or --duration-secs) drains requests and flushes the ledger.
    router.task.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_demo_golden_set_loads() {
        assert_eq!(crate::config::golden::parse(super::GOLDEN).unwrap().len(), 10);
    }
}
