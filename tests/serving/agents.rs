//! Coding agents as they ship. Each client's captured request (tests/fixtures/agents/, headers
//! and body as the current release sends them, secrets removed) is replayed through the router,
//! so a new client version that sends something new fails here before users meet it; and the
//! clients themselves (tests/agents/, pinned, installed by `.ci/run`) run headless against the
//! router with simulators behind it, with a proxy that counts any try to reach the internet.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use spillway::sim::SimKind;

use crate::common::{self, router, sim};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const CLAUDE: &str = "claude-sonnet-4-5";

fn fixture(name: &str) -> Value {
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
fn coder_config(backend: &str, captured: &Value) -> String {
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
async fn codexs_first_request_is_served_by_the_fleet() {
    let captured = fixture("codex-0.171.0.json");
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let router = router(&coder_config(&node_backend(&node), &captured), &[]).await;
    let (status, events) = replay(&router.url, &captured).await;
    assert_eq!(status, 200, "{events:?}");
    assert_eq!(events.first().map(String::as_str), Some("response.created"), "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("response.completed"), "{events:?}");
}

/// A pinned client's binary in tests/agents/node_modules, or `None` (the test passes having
/// said why) when it is not installed and not required (`SPILLWAY_REQUIRE_AGENTS=1`).
fn agent_or_skip(name: &str) -> Option<std::path::PathBuf> {
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
async fn internet_trap() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
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

/// Run a client with `env`, isolated (its own `HOME`), behind the trap; (exit ok, stdout, stderr).
async fn run_agent(
    bin: &std::path::Path,
    args: &[&str],
    env: &[(&str, String)],
    trap: &str,
) -> (bool, String, String) {
    let home = std::env::temp_dir().join(format!("spillway-agent-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&home).unwrap();
    let mut command = tokio::process::Command::new(bin);
    command
        .args(args)
        .current_dir(&home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
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
    let _ = std::fs::remove_dir_all(&home);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Claude Code pointed at the router, headless, its telemetry and updates off.
fn claude_env(router: &str) -> [(&'static str, String); 5] {
    [
        ("ANTHROPIC_BASE_URL", router.to_string()),
        ("ANTHROPIC_API_KEY", "sk-ant-not-checked".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
    ]
}

/// The final `result` line of Claude Code's `stream-json` output.
fn claude_result(stdout: &str) -> Value {
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    lines.into_iter().rev().find(|l| l["type"] == "result").unwrap_or_else(|| panic!("no result: {stdout}"))
}

/// `codex exec` with the router as its provider (`wire_api = "responses"`, `-c` as a user
/// would), telemetry and plugin fetches off, as a headless run wants them.
fn codex_args(router: &str, prompt: &str) -> Vec<String> {
    let provider = format!(
        r#"model_providers.spillway={{name="spillway", base_url="{router}/v1", env_key="SPILLWAY_KEY", wire_api="responses"}}"#
    );
    let settings =
        ["model_provider=spillway", &provider, "analytics.enabled=false", "features.plugins=false"];
    let mut args = vec!["exec".to_string(), "--skip-git-repo-check".into()];
    args.extend(settings.iter().flat_map(|s| ["-c".to_string(), s.to_string()]));
    args.push(prompt.into());
    args
}

/// The key Codex sends (any, when the router has no client keys).
fn codex_env() -> [(&'static str, String); 1] {
    [("SPILLWAY_KEY", "not-checked".into())]
}

/// What every agent run must leave: no refusal by the router, no try to reach the internet.
async fn assert_nothing_refused_and_no_internet(router: &str, tries: &std::sync::atomic::AtomicUsize) {
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
    let args = codex_args(&router.url, "Say hello");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = run_agent(&codex, &args, &codex_env(), &trap).await;
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "codex printed the answer: {stderr}");
    assert_served_by_the_node(&router.url).await;
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}

/// An OpenAI-compatible upstream that records each request and plays a model that calls a
/// tool once: while the conversation's last message is not a tool result it calls `tool` with
/// `arguments`, then it answers text. Streams as OpenAI does.
async fn tool_calling_upstream(tool: &'static str, arguments: String) -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let recorded = Arc::clone(&recorded);
            let arguments = arguments.clone();
            async move {
                let answered = body["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "tool");
                recorded.lock().unwrap().push(body);
                let chunk = |delta: Value, finish: Value| {
                    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                };
                let chunks = if answered {
                    vec![chunk(json!({"role": "assistant", "content": "The answer is 42."}), json!("stop"))]
                } else {
                    let call = json!({"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": tool, "arguments": arguments}});
                    vec![chunk(json!({"role": "assistant", "tool_calls": [call]}), json!("tool_calls"))]
                };
                let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                   "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
                let mut sse: String = chunks.iter().chain([&usage]).map(|c| format!("data: {c}\n\n")).collect();
                sse.push_str("data: [DONE]\n\n");
                ([(axum::http::header::CONTENT_TYPE, "text/event-stream")], sse)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// A recording upstream as `coder_config`'s backend.
fn upstream_backend(upstream: &str) -> String {
    format!(
        r#"{{name: model, kind: openai_compatible, base_url: "{upstream}", model: m, capabilities: {{tools: true}}}}"#
    )
}

/// The upstream saw a call, then the client's answer to it: that answer's text.
fn tool_answer(seen: &Mutex<Vec<Value>>) -> String {
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "a call, then the answer: {seen:#?}");
    let last = seen[1]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((&last["role"], &last["tool_call_id"]), (&json!("tool"), &json!("call_1")), "{last}");
    last["content"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn codex_runs_its_own_exec_tool_through_the_router_and_answers() {
    let Some(codex) = agent_or_skip("codex") else { return };
    // The model asks for Codex's custom grammar tool `exec` (a JavaScript cell): `text(6*7)`.
    let (upstream, seen) = tool_calling_upstream("exec", r#"{"input": "text(6*7)"}"#.into()).await;
    let router =
        router(&coder_config(&upstream_backend(&upstream), &fixture("codex-0.171.0.json")), &[]).await;
    let (trap, tries) = internet_trap().await;
    let args = codex_args(&router.url, "Compute 6*7");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = run_agent(&codex, &args, &codex_env(), &trap).await;
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("The answer is 42."), "{stdout}\n{stderr}");
    let first = seen.lock().unwrap()[0].clone();
    let exec = first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "exec").unwrap();
    assert_eq!(exec["function"]["parameters"]["required"], json!(["input"]), "{exec}");
    // Codex ran the cell and sent its output back, answering the call.
    let answer = tool_answer(&seen);
    assert!(answer.contains("42"), "{answer}");
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}

#[tokio::test]
async fn claude_code_runs_its_own_read_tool_through_the_router_and_answers() {
    let Some(claude) = agent_or_skip("claude") else { return };
    let note = std::env::temp_dir().join(format!("spillway-agent-note-{:016x}.txt", rand::random::<u64>()));
    std::fs::write(&note, "the launch code is 4242\n").unwrap();
    // The model asks Claude Code to read the note with its own `Read` tool.
    let (upstream, seen) = tool_calling_upstream("Read", json!({"file_path": note}).to_string()).await;
    let config = coder_config(&upstream_backend(&upstream), &fixture("claude-code-2.1.332.json"));
    let router = router(&config, &[]).await;
    let (trap, tries) = internet_trap().await;
    // A headless run grants its tools up front, as a user of `claude -p` does.
    let args = [
        "-p",
        "What is in the note?",
        "--output-format",
        "stream-json",
        "--verbose",
        "--allowedTools",
        "Read",
    ];
    let (ok, stdout, stderr) = run_agent(&claude, &args, &claude_env(&router.url), &trap).await;
    let _ = std::fs::remove_file(&note);
    assert!(ok, "claude failed:\n{stdout}\n{stderr}");
    let result = claude_result(&stdout);
    assert_eq!(result["result"], "The answer is 42.", "{result}");
    // Claude Code read the file and sent its text back, answering the call.
    let answer = tool_answer(&seen);
    assert!(answer.contains("the launch code is 4242"), "{answer}");
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}
