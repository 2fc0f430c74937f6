//! The official `openai` Python package against `spillway serve`, each a real process.
//!
//! Needs a Python with `openai` installed: `SPILLWAY_PYTHON`, else `.venv/bin/python` (what
//! `.ci/run` creates). The test fails, rather than skips, when neither works.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::Output;

const BIN: &str = env!("CARGO_BIN_EXE_spillway");

struct Killed(Child);

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

/// Local nodes serve only once the router has their telemetry: wait for it (up to 10 s).
fn wait_until_nodes_are_fresh(url: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        crate::common::wait_until(
            Duration::from_secs(10),
            "the router to see its nodes' telemetry",
            || async {
                let ready = crate::common::get_json(url, "/readyz").await;
                if ready["fresh_local_nodes"] == 2 {
                    Ok(())
                } else {
                    Err(ready)
                }
            },
        )
        .await
    });
}

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SPILLWAY_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

#[test]
fn the_official_openai_python_sdk_works_against_spillway_serve() {
    let model = "meta-llama/Llama-3.1-8B-Instruct";
    let (_good, good_url) = sim(&["--kind", "vllm", "--model", model]);
    let (_bad, bad_url) = sim(&["--kind", "vllm", "--model", model, "--drop-after", "3"]);
    let dir = std::env::temp_dir().join(format!("spillway-sdk-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("spillway.yaml");
    std::fs::write(
        &config,
        format!(
            r#"listen: 127.0.0.1:0
client_keys_env: [SDK_TEST_KEY]
backends:
  - {{name: local, kind: vllm, endpoints: [{good_url}], model: {model}}}
  - {{name: flaky, kind: vllm, endpoints: [{bad_url}], model: {model}}}
tasks:
  - {{name: chat, backends: [local], slo: {{ttft_ms: 2000}}}}
  - {{name: broken, backends: [flaky], slo: {{ttft_ms: 2000}}}}
telemetry: {{interval_ms: 200}}
ledger: {{url: "sqlite://{ledger}"}}
"#,
            ledger = dir.join("ledger.db").display()
        ),
    )
    .unwrap();
    let check = Command::new(BIN)
        .args(["check-config", "--env"])
        .arg(&config)
        .env("SDK_TEST_KEY", "sk-sdk")
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));

    let mut server = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env("SDK_TEST_KEY", "sk-sdk")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spillway serve");
    let stderr = Output::collect(server.stderr.take().unwrap());
    let _server = Killed(server);
    let url = stderr.wait_url();
    wait_until_nodes_are_fresh(&url);

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/openai_sdk_check.py");
    let out = Command::new(python())
        .arg(&script)
        .args([&url, "sk-sdk"])
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

/// `spillway serve` with `config` (written to a temporary directory, with a ledger there) and
/// the client key `SDK_TEST_KEY=sk-sdk`, once its two local nodes have telemetry: the child and
/// the router's URL.
fn serve(config: &str) -> (Killed, String) {
    let dir = std::env::temp_dir().join(format!("spillway-sdk-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let ledger = format!("ledger: {{url: \"sqlite://{}\"}}\n", dir.join("ledger.db").display());
    std::fs::write(&path, format!("{config}{ledger}")).unwrap();
    let mut server = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .env("SDK_TEST_KEY", "sk-sdk")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spillway serve");
    let stderr = Output::collect(server.stderr.take().unwrap());
    let server = Killed(server);
    let url = stderr.wait_url();
    wait_until_nodes_are_fresh(&url);
    (server, url)
}

/// Run one of the SDK check scripts against the router at `url`; it prints `ok` when all held.
fn run_check(script: &str, url: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk").join(script);
    let out = Command::new(python())
        .arg(&script)
        .args([url, "sk-sdk"])
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

#[test]
fn the_official_openai_python_sdk_embeds_and_completes_against_spillway_serve() {
    let model = "meta-llama/Llama-3.1-8B-Instruct";
    let (_pool, pool_url) = sim(&["--kind", "vllm", "--model", model]);
    let (_flaky, flaky_url) = sim(&["--kind", "vllm", "--model", model, "--drop-after", "3"]);
    let (_embedder, embedder_url) = sim(&["--kind", "openai", "--model", "text-embedding-3-small"]);
    let (_router, url) = serve(&format!(
        r#"listen: 127.0.0.1:0
client_keys_env: [SDK_TEST_KEY]
backends:
  - {{name: local, kind: vllm, endpoints: [{pool_url}], model: {model}}}
  - {{name: flaky, kind: vllm, endpoints: [{flaky_url}], model: {model}}}
  - {{name: embedder, kind: openai, base_url: "{embedder_url}/v1", model: text-embedding-3-small,
     embedding_space: te3-small, price: {{input_per_mtok: 0.02, output_per_mtok: 0}}}}
tasks:
  - {{name: legacy, backends: [local], slo: {{ttft_ms: 2000}}}}
  - {{name: broken, backends: [flaky], slo: {{ttft_ms: 2000}}}}
  - {{name: search, backends: [embedder], slo: {{ttft_ms: 2000}}}}
telemetry: {{interval_ms: 200}}
"#
    ));
    run_check("openai_embeddings_check.py", &url);
}
