//! The official `openai` Python package against `spillway serve`, each a real process: chat
//! completions (`openai_sdk_check.py`), the Responses API (`openai_responses_check.py`), and
//! with the `anthropic` package the batch APIs (`batch_sdk_check.py`).
//!
//! Needs a Python with `openai` installed: `SPILLWAY_PYTHON`, else `.venv/bin/python` (what
//! `.ci/run` creates). The test fails, rather than skips, when neither works.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::Output;

const BIN: &str = env!("CARGO_BIN_EXE_spillway");

pub(crate) struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `spillway sim` on port 0, once it has said where it listens.
fn sim(args: &[&str]) -> (Killed, String) {
    let mut child = Command::new(BIN)
        .args(["sim", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn spillway sim");
    let stdout = Output::collect(child.stdout.take().unwrap());
    let url = stdout.wait_url();
    (Killed(child), url)
}

/// Local nodes serve only once the router has their telemetry: wait for all `nodes` (up to 10 s).
fn wait_until_nodes_are_fresh(url: &str, nodes: u64) {
    crate::common::block_until(Duration::from_secs(10), "the router to see its nodes' telemetry", || async {
        let ready = crate::common::get_json(url, "/readyz").await;
        if ready["fresh_local_nodes"] == nodes {
            Ok(())
        } else {
            Err(ready)
        }
    })
}

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SPILLWAY_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

/// `spillway serve` with `backends_and_tasks` (and a ledger), the client key `sk-sdk`, once
/// its `local_nodes` local nodes have telemetry: the child and the router's URL.
fn serve(backends_and_tasks: &str, local_nodes: u64) -> (Killed, String) {
    serve_with_env(backends_and_tasks, local_nodes, &[])
}

/// [`serve`], with `env` in the router's environment as well.
pub(crate) fn serve_with_env(
    backends_and_tasks: &str,
    local_nodes: u64,
    env: &[(&str, &str)],
) -> (Killed, String) {
    let dir = std::env::temp_dir().join(format!("spillway-sdk-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("spillway.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nclient_keys_env: [SDK_TEST_KEY]\n{backends_and_tasks}\n\
             telemetry: {{interval_ms: 200}}\nledger: {{url: \"sqlite://{ledger}\"}}\n",
            ledger = dir.join("ledger.db").display()
        ),
    )
    .unwrap();
    let check = Command::new(BIN)
        .args(["check-config", "--env"])
        .arg(&config)
        .env("SDK_TEST_KEY", "sk-sdk")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));

    let mut server = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env("SDK_TEST_KEY", "sk-sdk")
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spillway serve");
    let stderr = Output::collect(server.stderr.take().unwrap());
    let server = Killed(server);
    let url = stderr.wait_url();
    wait_until_nodes_are_fresh(&url, local_nodes);
    (server, url)
}

/// Run `tests/sdk/{script}` with `args`; it must succeed and say `ok`.
pub(crate) fn run_sdk_script(script: &str, args: &[&str]) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk").join(script);
    let out = Command::new(python())
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?} (run .ci/run to create the venv): {e}", python()));
    assert!(
        out.status.success(),
        "SDK check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

#[test]
fn the_official_openai_python_sdk_works_against_spillway_serve() {
    let (_good, good_url) = sim(&["--kind", "vllm", "--model", MODEL]);
    let (_bad, bad_url) = sim(&["--kind", "vllm", "--model", MODEL, "--drop-after", "3"]);
    let (_server, url) = serve(
        &format!(
            r#"backends:
  - {{name: local, kind: vllm, endpoints: [{good_url}], model: {MODEL}}}
  - {{name: flaky, kind: vllm, endpoints: [{bad_url}], model: {MODEL}}}
tasks:
  - {{name: chat, backends: [local], slo: {{ttft_ms: 2000}}}}
  - {{name: broken, backends: [flaky], slo: {{ttft_ms: 2000}}}}"#
        ),
        2,
    );
    run_sdk_script("openai_sdk_check.py", &[&url, "sk-sdk"]);
}

#[test]
fn the_official_openai_python_sdk_speaks_responses_to_spillway_serve_and_the_sim() {
    let (_good, good_url) = sim(&["--kind", "vllm", "--model", MODEL]);
    let (_bad, bad_url) = sim(&["--kind", "vllm", "--model", MODEL, "--drop-after", "3"]);
    let tool_args = r#"{"city": "Paris"}"#;
    let (_tools, tools_url) = sim(&["--kind", "vllm", "--model", MODEL, "--tool-call-args", tool_args]);
    let (_openai, openai_url) = sim(&["--kind", "openai", "--model", "gpt-5.6"]);
    let (_server, url) = serve(
        &format!(
            r#"backends:
  - {{name: local, kind: vllm, endpoints: [{good_url}], model: {MODEL}}}
  - {{name: flaky, kind: vllm, endpoints: [{bad_url}], model: {MODEL}}}
  - {{name: caller, kind: vllm, endpoints: [{tools_url}], model: {MODEL}, capabilities: {{tools: true}}}}
  - {{name: openai, kind: openai, base_url: "{openai_url}/v1", model: gpt-5.6}}
tasks:
  - {{name: chat, backends: [local], slo: {{ttft_ms: 2000}}}}
  - {{name: broken, backends: [flaky], slo: {{ttft_ms: 2000}}}}
  - {{name: tools, backends: [caller], slo: {{ttft_ms: 2000}}}}
  - {{name: stored, backends: [openai, local], slo: {{ttft_ms: 2000}}}}"#
        ),
        3,
    );
    run_sdk_script("openai_responses_check.py", &[&url, "sk-sdk", &good_url]);
}

#[test]
fn the_official_openai_python_sdk_embeds_and_completes_against_spillway_serve() {
    let (_pool, pool_url) = sim(&["--kind", "vllm", "--model", MODEL]);
    let (_flaky, flaky_url) = sim(&["--kind", "vllm", "--model", MODEL, "--drop-after", "3"]);
    let (_embedder, embedder_url) = sim(&["--kind", "openai", "--model", "text-embedding-3-small"]);
    let (_router, url) = serve(
        &format!(
            r#"backends:
  - {{name: local, kind: vllm, endpoints: [{pool_url}], model: {MODEL}}}
  - {{name: flaky, kind: vllm, endpoints: [{flaky_url}], model: {MODEL}}}
  - {{name: embedder, kind: openai, base_url: "{embedder_url}/v1", model: text-embedding-3-small,
     embedding_space: te3-small, price: {{input_per_mtok: 0.02, output_per_mtok: 0}}}}
tasks:
  - {{name: legacy, backends: [local], slo: {{ttft_ms: 2000}}}}
  - {{name: broken, backends: [flaky], slo: {{ttft_ms: 2000}}}}
  - {{name: search, backends: [embedder], slo: {{ttft_ms: 2000}}}}"#
        ),
        2,
    );
    run_sdk_script("openai_embeddings_check.py", &[&url, "sk-sdk"]);
}

#[test]
fn the_official_openai_and_anthropic_sdks_run_batches_through_spillway_serve() {
    let (_pool, pool_url) = sim(&["--kind", "vllm", "--model", MODEL]);
    let (_router, url) = serve(
        &format!(
            r#"backends:
  - {{name: local, kind: vllm, endpoints: [{pool_url}], model: {MODEL}}}
tasks:
  - {{name: chat, backends: [local], slo: {{ttft_ms: 2000}}}}
batch: {{poll_ms: 50}}"#
        ),
        1,
    );
    run_sdk_script("batch_sdk_check.py", &[&url, "sk-sdk"]);
}
