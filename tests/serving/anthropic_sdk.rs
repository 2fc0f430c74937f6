//! The official `anthropic` Python package against a router in front of simulators: create,
//! stream, count, tool use, the exception classes it raises, a broken stream, models.
//!
//! Needs a Python with `anthropic` installed: `SPILLWAY_PYTHON`, else `.venv/bin/python` (what
//! `.ci/run` creates). The test fails, rather than skips, when neither works.

use std::path::PathBuf;

use spillway::sim::SimKind;

use crate::common::{router, sim};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn python() -> PathBuf {
    match std::env::var("SPILLWAY_PYTHON") {
        Ok(p) => PathBuf::from(p),
        Err(_) => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"),
    }
}

#[tokio::test]
async fn the_official_anthropic_python_sdk_works_against_spillway() {
    let local = sim(SimKind::Vllm, LLAMA, |a| a.tool_call_args = Some(r#"{"city": "Paris"}"#.into())).await;
    let broken = sim(SimKind::Vllm, LLAMA, |a| a.drop_after = Some(3)).await;
    let claude = sim(SimKind::Anthropic, "claude-sonnet-4-5", |_| {}).await;
    let overloaded = sim(SimKind::Anthropic, "claude-sonnet-4-5", |a| a.error_rate = 1.0).await;
    let yaml = format!(
        r#"
client_keys_env: [SDK_KEY]
backends:
  - {{name: local, kind: vllm, endpoints: ["{}"], model: {LLAMA}, capabilities: {{tools: true}}}}
  - {{name: flaky, kind: vllm, endpoints: ["{}"], model: {LLAMA}}}
  - {{name: claude, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5}}
  - {{name: busy, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5}}
tasks:
  - {{name: coder, aliases: [claude-sonnet-4-6], backends: [local], slo: {{ttft_ms: 5000}}}}
  - {{name: claude-only, backends: [claude], slo: {{ttft_ms: 5000}}}}
  - {{name: broken, backends: [flaky], slo: {{ttft_ms: 5000}}}}
  - {{name: overloaded, backends: [busy], slo: {{ttft_ms: 5000}}}}
"#,
        local.base_url(),
        broken.base_url(),
        claude.base_url(),
        overloaded.base_url()
    );
    let router = router(&yaml, &[("SDK_KEY", "sk-sdk")]).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/anthropic_sdk_check.py");
    let out = tokio::process::Command::new(python())
        .arg(&script)
        .args([&router.url, "sk-sdk"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {:?} (run .ci/run to create the venv): {e}", python()));
    assert!(
        out.status.success(),
        "SDK check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}
