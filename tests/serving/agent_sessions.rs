//! Coding agents' sessions through the router, with the clients themselves (tests/agents/):
//! each runs its own tool on a call the fleet's model made; a session that starts on the fleet
//! spills to a hosted simulator when the fleet fills and finishes with one answer; its next
//! turn (`claude --continue`, `codex exec resume`) comes home to the fleet with the whole
//! conversation, and both moves are counted for the session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::IntoResponse;
use serde_json::{json, Value};
use spillway::sim::SimKind;

use super::agents::{
    agent_or_skip, assert_nothing_refused_and_no_internet, claude_env, claude_result, coder_config,
    codex_args, codex_base_url_args, codex_env, fixture, internet_trap, run_agent, run_agent_in, AgentHome,
    CLAUDE, CODEX_DEFAULT_MODEL,
};
use crate::common::{self, router, sim, Router};

/// What the fleet's model says once the tool has answered.
const ANSWER: &str = "The answer is 42.";
/// The sequences a node runs at once; the page of a full node says it runs this many and has
/// twice as many waiting.
const MAX_RUNNING: u32 = 4;

/// A fleet node for the agents: an OpenAI-compatible engine that records each request and
/// plays a model that calls one tool (while the conversation's last message is not a tool
/// result it calls `tool` with `arguments`, then it answers [`ANSWER`]), streaming as vLLM
/// does, with a vLLM `/metrics` page whose load the test sets. With `hold_first`, its first
/// answer waits until the test lets it go.
struct Node {
    /// Without `/v1`.
    url: String,
    seen: Arc<Mutex<Vec<Value>>>,
    full: Arc<AtomicBool>,
    go: Arc<tokio::sync::Semaphore>,
}

impl Node {
    async fn start(tool: &'static str, arguments: String, hold_first: bool) -> Node {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let full = Arc::new(AtomicBool::new(false));
        let go = Arc::new(tokio::sync::Semaphore::new(usize::from(!hold_first)));
        let (recorded, gate) = (Arc::clone(&seen), Arc::clone(&go));
        let chat = move |axum::Json(body): axum::Json<Value>| {
            let (recorded, gate, arguments) = (Arc::clone(&recorded), Arc::clone(&gate), arguments.clone());
            async move {
                let answered =
                    body["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "tool");
                // Each call its own id, numbered by the request that made it (`call_1` first).
                let id = {
                    let mut recorded = recorded.lock().unwrap();
                    recorded.push(body);
                    format!("call_{}", recorded.len())
                };
                let _go = gate.acquire().await.unwrap();
                let chunk = |delta: Value, finish: Value| {
                    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                };
                let chunks = if answered {
                    vec![chunk(json!({"role": "assistant", "content": ANSWER}), json!("stop"))]
                } else {
                    let call = json!({"index": 0, "id": id, "type": "function",
                                      "function": {"name": tool, "arguments": arguments}});
                    vec![chunk(json!({"role": "assistant", "tool_calls": [call]}), json!("tool_calls"))]
                };
                let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                   "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
                let mut sse: String =
                    chunks.iter().chain([&usage]).map(|c| format!("data: {c}\n\n")).collect();
                sse.push_str("data: [DONE]\n\n");
                ([(axum::http::header::CONTENT_TYPE, "text/event-stream")], sse)
            }
        };
        let page_load = Arc::clone(&full);
        let metrics = move || {
            let full = page_load.load(Ordering::SeqCst);
            async move { vllm_page(full).into_response() }
        };
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(chat))
            .route("/metrics", axum::routing::get(metrics));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Node { url, seen, full, go }
    }

    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    /// Once the node has the session's first request: it reports itself full, and answers only
    /// when the router has seen that (so the session's next request finds the fleet full).
    async fn fill_at_the_first_call(&self, router: &Router) {
        let seen = || std::future::ready(!self.seen.lock().unwrap().is_empty());
        common::wait_until(Duration::from_secs(90), "the session's first request at the node", seen).await;
        self.set_full(router, true).await;
        self.go.add_permits(1);
    }

    /// Report the node full or empty, and wait until the router's snapshot says so.
    async fn set_full(&self, router: &Router, full: bool) {
        self.full.store(full, Ordering::SeqCst);
        let waiting = f64::from(if full { 2 * MAX_RUNNING } else { 0 });
        let seen = || async move {
            let metrics = common::metrics_text(&router.url).await;
            common::series_sum(&metrics, "spillway_node_waiting", &[("backend", "model")]) == Some(waiting)
        };
        common::wait_until(Duration::from_secs(10), format!("the router to see {waiting} waiting"), seen)
            .await;
    }
}

/// A vLLM `/metrics` page (V1 names) of a node that is idle or full.
fn vllm_page(full: bool) -> String {
    let (running, waiting, kv) = if full { (MAX_RUNNING, 2 * MAX_RUNNING, 0.99) } else { (0, 0, 0.02) };
    let labels = r#"engine="0",model_name="m""#;
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{labels}}} {running}\n\
         # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{labels}}} {waiting}\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{labels}}} {kv}\n\
         # TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",{labels},num_gpu_blocks=\"4096\"}} 1\n"
    )
}

/// A recording upstream as `coder_config`'s backend (hosted: not scraped).
fn upstream_backend(node: &Node) -> String {
    format!(
        r#"{{name: model, kind: openai_compatible, base_url: "{}/v1", model: m, capabilities: {{tools: true}}}}"#,
        node.url
    )
}

/// The node saw a call, then the client's answer to it: that answer's text.
fn tool_answer(node: &Node) -> String {
    let seen = node.seen();
    assert_eq!(seen.len(), 2, "a call, then the answer: {seen:#?}");
    let last = seen[1]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((&last["role"], &last["tool_call_id"]), (&json!("tool"), &json!("call_1")), "{last}");
    last["content"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn codex_runs_its_own_exec_tool_through_the_router_and_answers() {
    let Some(codex) = agent_or_skip("codex") else { return };
    // The model asks for Codex's custom grammar tool `exec` (a JavaScript cell): `text(6*7)`.
    let node = Node::start("exec", r#"{"input": "text(6*7)"}"#.into(), false).await;
    let router = router(&coder_config(&upstream_backend(&node), &fixture("codex-0.171.0.json")), &[]).await;
    let (trap, tries) = internet_trap().await;
    let args = codex_args(&router.url, "Compute 6*7", false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = run_agent(&codex, &args, &codex_env(), &trap).await;
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(ANSWER), "{stdout}\n{stderr}");
    let first = node.seen()[0].clone();
    let exec = first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "exec").unwrap();
    assert_eq!(exec["function"]["parameters"]["required"], json!(["input"]), "{exec}");
    // Codex ran the cell and sent its output back, answering the call.
    let answer = tool_answer(&node);
    assert!(answer.contains("42"), "{answer}");
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}

#[tokio::test]
async fn codex_by_its_one_line_setup_talks_over_the_websocket_runs_its_tool_and_resumes() {
    let Some(codex) = agent_or_skip("codex") else { return };
    let node = Node::start("exec", r#"{"input": "text(6*7)"}"#.into(), false).await;
    let captured = json!({"body": {"model": CODEX_DEFAULT_MODEL}});
    let router = router(&coder_config(&upstream_backend(&node), &captured), &[]).await;
    let (trap, tries) = internet_trap().await;
    let (home, env) = (AgentHome::new(), codex_env());
    // Over the socket Codex neither retries nor falls back to HTTPS, each of which it says.
    let straight = |stderr: &str| !stderr.contains("Reconnecting") && !stderr.contains("Falling back");

    // A turn with a tool round trip: the model calls `exec`, Codex runs it and sends its
    // output back as the next request on the same socket (a continuation).
    let args = codex_base_url_args(&router.url, "Compute 6*7", false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = run_agent_in(&home, &codex, &args, &env, &trap).await;
    eprintln!("codex by openai_base_url: a tool turn took {:.1} s", started.elapsed().as_secs_f64());
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(straight(&stderr), "{stderr}");
    assert!(stdout.contains(ANSWER), "{stdout}\n{stderr}");
    assert!(tool_answer(&node).contains("42"), "the node got the whole conversation with the cell's output");

    // The session resumed: the socket's warm-up carries the history, the turn only its new
    // message; the node gets all of it.
    let args = codex_base_url_args(&router.url, "Once more", true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = run_agent_in(&home, &codex, &args, &env, &trap).await;
    eprintln!("codex by openai_base_url: a resumed turn took {:.1} s", started.elapsed().as_secs_f64());
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(straight(&stderr), "{stderr}");
    assert!(stdout.contains(ANSWER), "{stdout}\n{stderr}");
    let resumed = text_of(&node.seen()[2]);
    assert!(
        resumed.contains("Compute 6*7") && resumed.contains("42") && resumed.contains("Once more"),
        "{resumed}"
    );
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}

/// A file for Claude Code's `Read` tool, removed when dropped.
struct Note(std::path::PathBuf);

impl Note {
    fn new() -> Note {
        let path =
            std::env::temp_dir().join(format!("spillway-agent-note-{:016x}.txt", rand::random::<u64>()));
        std::fs::write(&path, "the launch code is 4242\n").unwrap();
        Note(path)
    }

    /// The `Read` call's arguments.
    fn read(&self) -> String {
        json!({"file_path": self.0}).to_string()
    }
}

impl Drop for Note {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Claude Code headless, its `Read` tool granted up front as a user of `claude -p` does.
fn claude_args(prompt: &str, continuing: bool) -> Vec<&str> {
    let mut args =
        vec!["-p", prompt, "--output-format", "stream-json", "--verbose", "--allowedTools", "Read"];
    if continuing {
        args.insert(0, "--continue");
    }
    args
}

#[tokio::test]
async fn claude_code_runs_its_own_read_tool_through_the_router_and_answers() {
    let Some(claude) = agent_or_skip("claude") else { return };
    let note = Note::new();
    // The model asks Claude Code to read the note with its own `Read` tool.
    let node = Node::start("Read", note.read(), false).await;
    let config = coder_config(&upstream_backend(&node), &fixture("claude-code-2.1.332.json"));
    let router = router(&config, &[]).await;
    let (trap, tries) = internet_trap().await;
    let args = claude_args("What is in the note?", false);
    let (ok, stdout, stderr) = run_agent(&claude, &args, &claude_env(&router.url), &trap).await;
    assert!(ok, "claude failed:\n{stdout}\n{stderr}");
    let result = claude_result(&stdout);
    assert_eq!(result["result"], ANSWER, "{result}");
    // Claude Code read the file and sent its text back, answering the call.
    let answer = tool_answer(&node);
    assert!(answer.contains("the launch code is 4242"), "{answer}");
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}

/// `coder` over the node as a fleet pool (`model`, scraped) then `hosted`, with `captured`'s
/// default model id as an alias.
fn spill_config(node: &Node, hosted: &str, captured: &Value) -> String {
    let default_model = captured["body"]["model"].as_str().unwrap();
    format!(
        r#"
backends:
  - {{name: model, kind: vllm, endpoints: ["{}"], model: m, max_running: {MAX_RUNNING}, capabilities: {{tools: true}}}}
  - {hosted}
tasks:
  - {{name: coder, aliases: [{default_model}], backends: [model, hosted], slo: {{ttft_ms: 5000}}}}
"#,
        node.url
    )
}

/// Every string in `value`, joined: what a conversation says, whatever its shape.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(text_of).collect::<Vec<_>>().join("\n"),
        Value::Object(fields) => fields.values().map(text_of).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// What the router says of its spills and of the node, for a turn that did not come home.
async fn why_not_home(router: &Router) -> String {
    let metrics = common::metrics_text(&router.url).await;
    let lines = metrics.lines().filter(|l| {
        ["spillway_spills_total", "spillway_node_", "spillway_unmeasured"].iter().any(|m| l.starts_with(m))
    });
    format!("the router's spills and node readings:\n{}", lines.collect::<Vec<_>>().join("\n"))
}

/// The session moved to the hosted provider once and came home once.
async fn assert_moved_out_and_home(router: &Router) {
    let metrics = common::metrics_text(&router.url).await;
    let moves = |direction| {
        common::series_sum(
            &metrics,
            "spillway_session_moves_total",
            &[("task", "coder"), ("direction", direction)],
        )
    };
    assert_eq!((moves("to_hosted"), moves("home")), (Some(1.0), Some(1.0)), "{metrics}");
}

#[tokio::test]
async fn claude_code_spills_mid_session_when_the_fleet_fills_and_its_next_turn_comes_home() {
    let Some(claude) = agent_or_skip("claude") else { return };
    let note = Note::new();
    let node = Node::start("Read", note.read(), true).await;
    let anthropic = sim(SimKind::Anthropic, CLAUDE, |a| a.api_key = Some("sk-ant-sim".into())).await;
    let hosted = format!(
        r#"{{name: hosted, kind: anthropic, base_url: "{}", model: {CLAUDE}, api_key_env: ANTHROPIC_KEY}}"#,
        anthropic.base_url()
    );
    let config = spill_config(&node, &hosted, &fixture("claude-code-2.1.332.json"));
    let router = router(&config, &[("ANTHROPIC_KEY", "sk-ant-sim")]).await;
    let (trap, tries) = internet_trap().await;
    let (home, env) = (AgentHome::new(), claude_env(&router.url));

    // The fleet's model calls `Read`; the fleet fills before Claude Code has the call.
    let args = claude_args("What is in the note?", false);
    let ((ok, stdout, stderr), ()) =
        tokio::join!(run_agent_in(&home, &claude, &args, &env, &trap), node.fill_at_the_first_call(&router));
    assert!(ok, "claude failed:\n{stdout}\n{stderr}");
    let result = claude_result(&stdout);
    assert_eq!(result["subtype"], "success", "{result}");
    let spilled_answer = result["result"].as_str().unwrap().to_string();
    assert!(!spilled_answer.is_empty() && spilled_answer != ANSWER, "Anthropic answered: {result}");
    assert_eq!(node.seen().len(), 1, "the fleet was full for the rest of the turn");
    // Anthropic got the whole conversation: the node's call and the file Claude Code read.
    let finished = text_of(&anthropic.requests().pop().unwrap());
    assert!(finished.contains("call_1") && finished.contains("the launch code is 4242"), "{finished}");

    // The next turn, with room on the fleet again, comes home with the turn before in it.
    node.set_full(&router, false).await;
    let args = claude_args("Read it once more", true);
    let (ok, stdout, stderr) = run_agent_in(&home, &claude, &args, &env, &trap).await;
    assert!(ok, "claude failed:\n{stdout}\n{stderr}");
    assert_eq!(claude_result(&stdout)["result"], ANSWER, "{}", why_not_home(&router).await);
    let next_turn = text_of(&node.seen()[1]);
    assert!(next_turn.contains(&spilled_answer), "the node got the answer Anthropic wrote: {next_turn}");
    assert_moved_out_and_home(&router).await;
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}

#[tokio::test]
async fn codex_spills_mid_session_when_the_fleet_fills_and_its_next_turn_comes_home() {
    let Some(codex) = agent_or_skip("codex") else { return };
    let node = Node::start("exec", r#"{"input": "text(6*7)"}"#.into(), true).await;
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let hosted =
        format!(r#"{{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}"#, openai.base_url());
    let router = router(&spill_config(&node, &hosted, &fixture("codex-0.171.0.json")), &[]).await;
    let (trap, tries) = internet_trap().await;
    let (home, env) = (AgentHome::new(), codex_env());

    // The fleet's model calls `exec`; the fleet fills before Codex has the call.
    let args = codex_args(&router.url, "Compute 6*7", false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ((ok, stdout, stderr), ()) =
        tokio::join!(run_agent_in(&home, &codex, &args, &env, &trap), node.fill_at_the_first_call(&router));
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty() && !stdout.contains(ANSWER), "OpenAI answered: {stdout}");
    assert_eq!(node.seen().len(), 1, "the fleet was full for the rest of the turn");
    // OpenAI got Codex's own request: the node's call to `exec` as a custom tool call in its
    // namespace, and the cell's output.
    let finished = openai.requests().pop().unwrap();
    let items = finished["input"].as_array().unwrap();
    let call = items.iter().find(|i| i["type"] == "custom_tool_call").expect("the call, as Codex keeps it");
    assert_eq!((&call["name"], &call["call_id"]), (&json!("exec"), &json!("call_1")), "{call}");
    let output = items.iter().find(|i| i["type"] == "custom_tool_call_output").expect("the cell's output");
    assert!(text_of(output).contains("42"), "{output}");

    // The next turn, with room on the fleet again, comes home with the turn before in it.
    node.set_full(&router, false).await;
    let args = codex_args(&router.url, "Once more", true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = run_agent_in(&home, &codex, &args, &env, &trap).await;
    assert!(ok, "codex failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(ANSWER), "{stdout}\n{stderr}\n{}", why_not_home(&router).await);
    let next_turn = text_of(&node.seen()[1]);
    assert!(next_turn.contains("Compute 6*7") && next_turn.contains("Once more"), "{next_turn}");
    assert_moved_out_and_home(&router).await;
    assert_nothing_refused_and_no_internet(&router.url, &tries).await;
}
