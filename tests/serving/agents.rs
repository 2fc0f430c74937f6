//! Coding agents as they ship. Each client's captured request (tests/fixtures/agents/, headers
//! and body as the current release sends them, secrets removed) is replayed through the router,
//! so a new client version that sends something new fails here before users meet it; and the
//! clients themselves (tests/agents/, pinned, installed by `.ci/run`) run headless against the
//! router with simulators behind it, with a proxy that counts any try to reach the internet.

use eventsource_stream::Eventsource;
use futures::StreamExt;

use serde_json::Value;
use spillway::sim::SimKind;

use crate::common::{self, router, sim};

pub(crate) const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
pub(crate) const CLAUDE: &str = "claude-sonnet-4-5";

pub(crate) fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/agents/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Send the captured request as the client sent it (its path, headers and body) and read the
/// answer's SSE events: (status, event names).
async fn replay(url: &str, captured: &Value) -> (u16, Vec<String>) {
    let mut request = reqwest::Client::new().post(format!("{url}{}", captured["path"].as_str().unwrap()));
    for (name, value) in captured["headers"].as_object().unwrap() {
        // Transport headers are the client's connection's, not the request's.
        if !["accept-encoding", "connection"].contains(&name.to_ascii_lowercase().as_str()) {
            request = request.header(name, value.as_str().unwrap());
        }
    }
    let response = request.json(&captured["body"]).send().await.unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        return (status, vec![response.text().await.unwrap()]);
    }
    let events: Vec<String> = response.bytes_stream().eventsource().map(|e| e.unwrap().event).collect().await;
    (status, events)
}

#[tokio::test]
async fn claude_codes_first_request_is_served_by_every_kind_of_backend() {
    let captured = fixture("claude-code-2.1.332.json");
    let default_model = captured["body"]["model"].as_str().unwrap().to_string();
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let native = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let anthropic = sim(SimKind::Anthropic, CLAUDE, |a| a.api_key = Some("sk-ant-sim".into())).await;
    let yaml = format!(
        r#"
backends:
  - {{name: node, kind: vllm, endpoints: ["{node}"], model: {LLAMA}, capabilities: {{tools: true}}}}
  - {{name: native, kind: vllm, endpoints: ["{native}"], model: {LLAMA}, messages: native, capabilities: {{tools: true}}}}
  - {{name: claude, kind: anthropic, base_url: "{anthropic}", model: {CLAUDE}, api_key_env: ANTHROPIC_KEY}}
tasks:
  - {{name: on-claude, aliases: [{default_model}], backends: [claude], slo: {{ttft_ms: 5000}}}}
  - {{name: on-node, backends: [node], slo: {{ttft_ms: 5000}}}}
  - {{name: on-native, backends: [native], slo: {{ttft_ms: 5000}}}}
"#,
        node = node.base_url(),
        native = native.base_url(),
        anthropic = anthropic.base_url(),
    );
    let router = router(&yaml, &[("ANTHROPIC_KEY", "sk-ant-sim")]).await;
    for task in [default_model.as_str(), "on-node", "on-native"] {
        let mut request = captured.clone();
        request["body"]["model"] = task.into();
        let (status, events) = replay(&router.url, &request).await;
        assert_eq!(status, 200, "{task}: {events:?}");
        assert_eq!(events.first().map(String::as_str), Some("message_start"), "{task}: {events:?}");
        assert_eq!(events.last().map(String::as_str), Some("message_stop"), "{task}: {events:?}");
    }
}

/// One task, `coder`, over `backend` (a YAML flow mapping named `model`), with `captured`'s
/// default model id as an alias: the client runs unmodified.
pub(crate) fn coder_config(backend: &str, captured: &Value) -> String {
    let default_model = captured["body"]["model"].as_str().unwrap();
    format!(
        "backends:\n  - {backend}\ntasks:\n  - {{name: coder, aliases: [{default_model}], backends: [model], slo: {{ttft_ms: 5000}}}}\n"
    )
}

/// A fleet node with tools on, as `coder_config`'s backend.
fn node_backend(node: &spillway::sim::SimHandle) -> String {
    format!(
        r#"{{name: model, kind: vllm, endpoints: ["{}"], model: {LLAMA}, capabilities: {{tools: true}}}}"#,
        node.base_url()
    )
}

#[tokio::test]
async fn codexs_first_request_is_served_by_the_fleet_and_by_openai() {
    let captured = fixture("codex-0.171.0.json");
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let to_node = router(&coder_config(&node_backend(&node), &captured), &[]).await;
    let (status, events) = replay(&to_node.url, &captured).await;
    assert_eq!(status, 200, "{events:?}");
    assert_eq!(events.first().map(String::as_str), Some("response.created"), "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("response.completed"), "{events:?}");

    // OpenAI takes Codex's body as written: what the simulator refuses of it fails here.
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let hosted =
        format!(r#"{{name: model, kind: openai, base_url: "{}/v1", model: gpt-5.6}}"#, openai.base_url());
    let to_openai = router(&coder_config(&hosted, &captured), &[]).await;
    let (status, events) = replay(&to_openai.url, &captured).await;
    assert_eq!(status, 200, "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("response.completed"), "{events:?}");
    assert_eq!(openai.requests()[0]["input"], captured["body"]["input"], "the input went as written");
}

/// A pinned client's binary in tests/agents/node_modules, or `None` (the test passes having
/// said why) when it is not installed and not required (`SPILLWAY_REQUIRE_AGENTS=1`).
pub(crate) fn agent_or_skip(name: &str) -> Option<std::path::PathBuf> {
    let bin =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/node_modules/.bin").join(name);
    if bin.is_file() {
        return Some(bin);
    }
    let required = std::env::var("SPILLWAY_REQUIRE_AGENTS").is_ok_and(|v| v == "1");
    assert!(!required, "SPILLWAY_REQUIRE_AGENTS=1 but no {name}: run `npm ci` in tests/agents");
    eprintln!("skipped: {name} not installed (npm ci in tests/agents)");
    None
}

/// A proxy that answers nothing and counts who tried it: the clients get it as their
/// `HTTPS_PROXY`, so any try to reach the internet shows up here.
pub(crate) async fn internet_trap() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let tries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&tries);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    (url, tries)
}

/// A client's own `HOME` (and working directory), removed when dropped: a second run in the
/// same one continues the first one's session.
pub(crate) struct AgentHome(std::path::PathBuf);

impl AgentHome {
    pub(crate) fn new() -> AgentHome {
        let home = std::env::temp_dir().join(format!("spillway-agent-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&home).unwrap();
        AgentHome(home)
    }
}

impl Drop for AgentHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run a client with `env` in `home` (isolated), behind the trap; (exit ok, stdout, stderr).
pub(crate) async fn run_agent_in(
    home: &AgentHome,
    bin: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
    trap: &str,
) -> (bool, String, String) {
    let home = &home.0;
    let mut command = tokio::process::Command::new(bin);
    command
        .args(args)
        .current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HTTPS_PROXY", trap)
        .env("HTTP_PROXY", trap)
        .env("ALL_PROXY", trap)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
        .await
        .expect("the client finished within 120 s")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// [`run_agent_in`] a home of its own.
pub(crate) async fn run_agent(
    bin: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
    trap: &str,
) -> (bool, String, String) {
    run_agent_in(&AgentHome::new(), bin, args, env, trap).await
}

/// Claude Code pointed at the router, headless, its telemetry and updates off.
pub(crate) fn claude_env(router: &str) -> [(&'static str, String); 5] {
    [
        ("ANTHROPIC_BASE_URL", router.to_string()),
        ("ANTHROPIC_API_KEY", "sk-ant-not-checked".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
    ]
}

/// The final `result` line of Claude Code's `stream-json` output.
pub(crate) fn claude_result(stdout: &str) -> Value {
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    lines.into_iter().rev().find(|l| l["type"] == "result").unwrap_or_else(|| panic!("no result: {stdout}"))
}

/// `codex exec` with the router as its provider (`wire_api = "responses"`, `-c` as a user
/// would), telemetry and plugin fetches off, as a headless run wants them; `resume`: continue
/// the last session in the same home (`codex exec resume --last`).
pub(crate) fn codex_args(router: &str, prompt: &str, resume: bool) -> Vec<String> {
    let provider = format!(
        r#"model_providers.spillway={{name="spillway", base_url="{router}/v1", env_key="SPILLWAY_KEY", wire_api="responses"}}"#
    );
    codex_exec(&["model_provider=spillway", &provider], prompt, resume)
}

/// `codex exec` by its one-line setup: `openai_base_url` points Codex's built-in OpenAI
/// provider at the router (its key from `OPENAI_API_KEY`, its model its own default), so Codex
/// opens the Responses WebSocket first; `resume` as for [`codex_args`].
pub(crate) fn codex_base_url_args(router: &str, prompt: &str, resume: bool) -> Vec<String> {
    codex_exec(&[&format!(r#"openai_base_url="{router}/v1""#)], prompt, resume)
}

/// `codex exec` with `settings` (`-c`), telemetry and plugin fetches off.
fn codex_exec(settings: &[&str], prompt: &str, resume: bool) -> Vec<String> {
    let mut args = vec!["exec".to_string()];
    if resume {
        args.extend(["resume".to_string(), "--last".into()]);
    }
    args.push("--skip-git-repo-check".into());
    let quiet = ["analytics.enabled=false", "features.plugins=false"];
    args.extend(settings.iter().chain(&quiet).flat_map(|s| ["-c".to_string(), s.to_string()]));
    args.push(prompt.into());
    args
}

/// Codex's default model id when its built-in OpenAI provider is pointed at the router.
pub(crate) const CODEX_DEFAULT_MODEL: &str = "gpt-6.2-sol";

/// The key Codex sends (any, when the router has no client keys).
pub(crate) fn codex_env() -> [(&'static str, String); 2] {
    [("SPILLWAY_KEY", "not-checked".into()), ("OPENAI_API_KEY", "not-checked".into())]
}

/// What every agent run must leave: no refusal by the router, no try to reach the internet.
pub(crate) async fn assert_nothing_refused_and_no_internet(
    router: &str,
    tries: &std::sync::atomic::AtomicUsize,
) {
    let metrics = common::metrics_text(router).await;
    let refusals: Vec<&str> = metrics.lines().filter(|l| l.starts_with("spillway_refusals_total")).collect();
    assert!(refusals.is_empty(), "the router refused nothing: {refusals:?}");
    assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), 0, "no try to reach the internet");
}

/// The fleet node served at least one request of `coder`.
async fn assert_served_by_the_node(router: &str) {
    let metrics = common::metrics_text(router).await;
    let served =
        common::series_sum(&metrics, "spillway_requests_total", &[("task", "coder"), ("backend", "model")]);
    assert!(served.unwrap_or(0.0) >= 1.0, "the fleet served it: {served:?}");
}

#[tokio::test]
async fn claude_code_with_its_default_model_is_answered_by_the_fleet() {
    let Some(claude) = agent_or_skip("claude") else { return };
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let router = router(&coder_config(&node_backend(&node), &fixture("claude-code-2.1.332.json")), &[]).await;
    let (trap, tries) = internet_trap().await;
    let args = ["-p", "Say hello", "--output-format", "stream-json", "--verbose"];
    let (ok, stdout, stderr) = run_agent(&claude, &args, &claude_env(&router.url), &trap).await;
    assert!(ok, "claude failed:\n{stdout}\n{stderr}");
    let result = claude_result(&stdout);
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(result["is_error"], false, "{result}");
    assert!(!result["result"].as_str().unwrap_or_default().is_empty(), "{result}");
    assert_served_by_the_node(&router.url).await;
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}

#[tokio::test]
async fn codex_with_its_default_model_and_tools_is_answered_by_the_fleet() {
    let Some(codex) = agent_or_skip("codex") else { return };
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let router = router(&coder_config(&node_backend(&node), &fixture("codex-0.171.0.json")), &[]).await;
    let (trap, tries) = internet_trap().await;
    let args = codex_args(&router.url, "Say hello", false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = run_agent(&codex, &args, &codex_env(), &trap).await;
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "codex printed the answer: {stderr}");
    assert_served_by_the_node(&router.url).await;
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}
