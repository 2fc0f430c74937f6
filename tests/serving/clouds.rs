//! The providers teams buy capacity through, each against its simulator, with the official
//! SDKs as clients (`tests/sdk/clouds_sdk_check.py`): Azure OpenAI's v1 API and a legacy
//! deployment, whole and streamed, for OpenAI and Anthropic clients; its 429's
//! `retry-after-ms` holding the backend as long as asked; no provider key in any answer.
//!
//! Needs a Python with `openai` and `anthropic` installed: `SPILLWAY_PYTHON`, else
//! `.venv/bin/python` (what `.ci/run` creates). The test fails, rather than skips, when neither
//! works.

use spillway::sim::SimKind;

use crate::common::{router, sim};

/// [`super::openai_sdk::run_sdk_script`] against `url` with the client key `sk-sdk`, off the
/// runtime that serves the router in this process.
async fn run_sdk_script(script: &'static str, url: &str, secrets: &[&str]) {
    let args: Vec<String> = [url, "sk-sdk"].iter().chain(secrets).map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        super::openai_sdk::run_sdk_script(script, &args)
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_official_sdks_reach_azure_openai_through_the_router() {
    const V1_KEY: &str = "az-v1-0123456789abcdef";
    const LEGACY_KEY: &str = "az-legacy-0123456789abcdef";
    let v1 = sim(SimKind::AzureOpenai, "gpt-5.6", |a| a.api_key = Some(V1_KEY.into())).await;
    let legacy = sim(SimKind::AzureOpenai, "chat-deploy", |a| a.api_key = Some(LEGACY_KEY.into())).await;
    let limited = sim(SimKind::AzureOpenai, "gpt-5.6", |a| {
        a.api_key = Some(V1_KEY.into());
        (a.error_rate, a.error_status, a.retry_after_ms) = (1.0, 429, 1500);
    })
    .await;
    let yaml = format!(
        r#"
client_keys_env: [SDK_KEY]
backends:
  - {{name: azure-v1, kind: azure_openai, base_url: "{v1}/openai/v1", model: gpt-5.6, api_key_env: AZ_V1}}
  - {{name: azure-legacy, kind: azure_openai, base_url: "{legacy}", deployment: chat-deploy,
     api_version: "2024-10-21", model: gpt-4o, api_key_env: AZ_LEGACY}}
  - {{name: limited, kind: azure_openai, base_url: "{limited}/openai/v1", model: gpt-5.6, api_key_env: AZ_V1}}
tasks:
  - {{name: azure, backends: [azure-v1], slo: {{ttft_ms: 5000}}}}
  - {{name: azure-legacy, backends: [azure-legacy], slo: {{ttft_ms: 5000}}}}
  - {{name: spill, backends: [limited, azure-legacy], slo: {{ttft_ms: 5000}}}}
"#,
        v1 = v1.base_url(),
        legacy = legacy.base_url(),
        limited = limited.base_url(),
    );
    let env = [("SDK_KEY", "sk-sdk"), ("AZ_V1", V1_KEY), ("AZ_LEGACY", LEGACY_KEY)];
    let router = router(&yaml, &env).await;
    run_sdk_script("clouds_sdk_check.py", &router.url, &[V1_KEY, LEGACY_KEY]).await;
    // The legacy deployment was called at its own path: the body's model is whatever config says.
    assert!(legacy.requests().iter().all(|r| r["model"] == "gpt-4o"), "{:?}", legacy.requests());
}
