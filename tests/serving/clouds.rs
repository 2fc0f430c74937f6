//! The providers teams buy capacity through, each against its simulator, with the official
//! SDKs as clients: Azure OpenAI's v1 API and a legacy deployment, whole and streamed, for
//! OpenAI and Anthropic clients, its 429's `retry-after-ms` holding the backend as long as
//! asked (`tests/sdk/clouds_sdk_check.py`); Amazon Bedrock's Claude signed with SigV4 and a
//! session token from the router's environment, or called with a Bedrock API key, a stream
//! that opens with an exception failing over and a validation error not
//! (`tests/sdk/bedrock_sdk_check.py`); Vertex AI's Claude and Gemini with Google tokens the
//! router exchanged once per credentials (the default ones, a backend's own
//! `credentials_file`) at the service-account file's own `token_uri`, and Claude's exact count
//! through Vertex (`tests/sdk/vertex_sdk_check.py`); Azure OpenAI with a Microsoft Entra token;
//! the three providers of one Claude model as a spill chain; no credential in any answer.
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

#[tokio::test]
async fn the_official_sdks_reach_bedrock_claude_through_the_router() {
    const MODEL: &str = "us.anthropic.claude-sonnet-4-6-v1:0";
    const KEY_ID: &str = "ASIASIMULATED0000001";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYsimSECRET";
    const TOKEN: &str = "IQoJb3JpZ2luX2VjEsimSESSIONtoken0123456789";
    const API_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1zaW0tMDEyMzQ1Njc4OQ";
    let signed = sim(SimKind::Bedrock, MODEL, |a| {
        (a.aws_access_key_id, a.aws_secret_access_key) = (Some(KEY_ID.into()), Some(SECRET.into()));
        (a.aws_session_token, a.aws_region) = (Some(TOKEN.into()), "eu-west-1".into());
    })
    .await;
    let keyed = sim(SimKind::Bedrock, MODEL, |a| a.api_key = Some(API_KEY.into())).await;
    let broken = sim(SimKind::Bedrock, MODEL, |a| {
        a.api_key = Some(API_KEY.into());
        a.stream_exception = Some("modelStreamErrorException".into());
    })
    .await;
    let invalid = sim(SimKind::Bedrock, MODEL, |a| {
        a.api_key = Some(API_KEY.into());
        (a.error_rate, a.error_status) = (1.0, 400);
    })
    .await;
    let fallback = sim(SimKind::Bedrock, MODEL, |a| a.api_key = Some(API_KEY.into())).await;
    let other_key = sim(SimKind::Bedrock, MODEL, |a| a.api_key = Some("ABSKotherKEY".into())).await;
    let claude = sim(SimKind::Anthropic, "claude-sonnet-4-6", |_| {}).await;
    const LLAMA: &str = "meta.llama3-3-70b-instruct-v1:0";
    let llama = sim(SimKind::Bedrock, LLAMA, |a| {
        (a.api_key, a.tool_call_args) = (Some(API_KEY.into()), Some(r#"{"city": "Oslo"}"#.into()));
    })
    .await;
    let other_secret = sim(SimKind::Bedrock, MODEL, |a| {
        (a.aws_access_key_id, a.aws_secret_access_key) = (Some(KEY_ID.into()), Some("another secret".into()));
        (a.aws_session_token, a.aws_region) = (Some(TOKEN.into()), "eu-west-1".into());
    })
    .await;
    // `extra`: more keys of the backend.
    let backend = |name: &str, url: String, extra: &str| {
        format!("  - {{name: {name}, kind: bedrock, region: eu-west-1, model: \"{MODEL}\", base_url: \"{url}\"{extra}}}\n")
    };
    let key = ", api_key_env: BEDROCK_KEY";
    let config = format!(
        "backends:\n{}{}{}{}{}{}{}  - {{name: anthropic, kind: anthropic, model: claude-sonnet-4-6, base_url: \"{}\"}}\n\
         \x20 - {{name: bedrock-llama, kind: bedrock, region: eu-west-1, model: \"{LLAMA}\", base_url: \"{}\", api_key_env: BEDROCK_KEY, stream_upstream: false, capabilities: {{tools: true}}}}\ntasks:\n\
         \x20 - {{name: llama, backends: [bedrock-llama], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: signed, backends: [bedrock-signed], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: keyed, backends: [bedrock-keyed], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: broken-stream, backends: [bedrock-broken, bedrock-keyed], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: invalid, backends: [bedrock-invalid, bedrock-fallback], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: think-bedrock, backends: [bedrock-keyed], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: think-anthropic, backends: [anthropic], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: think-chain, backends: [anthropic, bedrock-keyed], strategy: priority, slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: wrong-key, backends: [bedrock-wrong-key], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: wrong-secret, backends: [bedrock-wrong-secret], slo: {{ttft_ms: 5000}}}}",
        // Asked for whole answers upstream when the client wants one: `/invoke`, signed too.
        backend("bedrock-signed", signed.base_url(), ", stream_upstream: false"),
        backend("bedrock-keyed", keyed.base_url(), key),
        backend("bedrock-broken", broken.base_url(), key),
        backend("bedrock-invalid", invalid.base_url(), key),
        backend("bedrock-fallback", fallback.base_url(), key),
        backend("bedrock-wrong-key", other_key.base_url(), key),
        backend("bedrock-wrong-secret", other_secret.base_url(), ""),
        claude.base_url(),
        llama.base_url(),
    );
    // The router reads AWS's standard chain: here its environment keys, with a session token.
    // AWS_REGION names another region: the signature must be scoped to the backend's.
    let env = [
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", TOKEN),
        ("AWS_REGION", "us-west-2"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("BEDROCK_KEY", API_KEY),
    ];
    let (_router, url) =
        tokio::task::spawn_blocking(move || super::openai_sdk::serve_with_env(&config, 0, &env))
            .await
            .unwrap();
    run_sdk_script("bedrock_sdk_check.py", &url, &[SECRET, TOKEN, API_KEY]).await;
    // The validation error was not tried elsewhere.
    assert_eq!((invalid.requests().len(), fallback.requests().len()), (1, 0));
    // Bedrock got the betas it takes, in the body, and nothing it would refuse.
    let bodies = signed.requests();
    assert!(!bodies.is_empty());
    for body in &bodies {
        assert_eq!(body["anthropic_version"], "bedrock-2023-05-31", "{body}");
        assert!(body.get("model").is_none() && body.get("stream").is_none(), "{body}");
    }
    assert!(
        bodies.iter().any(|b| b["anthropic_beta"] == serde_json::json!(["interleaved-thinking-2025-05-14"])),
        "{bodies:?}"
    );
}

/// The simulators' service-account key (tests/fixtures/README.md).
pub(super) const GCP_KEY: &str = include_str!("../fixtures/gcp-test-service-account.pem");

pub(super) fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-{what}-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A Vertex simulator serving `model` in project `spill-project`, `us-east5` (adjusted by
/// `tune`), and the service-account file (in `dir`) whose `token_uri` is its token endpoint.
pub(super) async fn vertex_with_account(
    model: &str,
    dir: &std::path::Path,
    tune: impl FnOnce(&mut spillway::sim::SimArgs),
) -> (spillway::sim::SimHandle, std::path::PathBuf) {
    let key_file = dir.join(format!("service-account-{model}.json"));
    let account = |token_uri: &str| {
        serde_json::json!({
            "type": "service_account", "project_id": "spill-project", "private_key_id": "sim-key-1",
            "private_key": GCP_KEY, "client_email": "router@spill-project.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": token_uri,
        })
        .to_string()
    };
    // The simulator reads the account's key; its token endpoint's address is known once it runs.
    std::fs::write(&key_file, account("http://unknown/token")).unwrap();
    let file = key_file.clone();
    let vertex = sim(SimKind::Vertex, model, move |a| {
        (a.gcp_service_account, a.gcp_project, a.gcp_location) =
            (Some(file), "spill-project".into(), "us-east5".into());
        tune(a);
    })
    .await;
    std::fs::write(&key_file, account(&format!("{}/token", vertex.base_url()))).unwrap();
    (vertex, key_file)
}

#[tokio::test]
async fn the_official_sdks_reach_vertex_ai_through_the_router_with_one_token() {
    let dir = temp_dir("vertex");
    let (claude, key_file) = vertex_with_account("claude-sonnet-4-6", &dir, |_| {}).await;
    let gemini = sim(SimKind::Vertex, "gemini-2.5-pro", |a| {
        (a.gcp_project, a.gcp_location) = ("spill-project".into(), "us-east5".into());
    })
    .await;
    let config = format!(
        "backends:\n\
         \x20 - {{name: vertex-claude, kind: vertex, project: spill-project, location: us-east5, model: claude-sonnet-4-6, base_url: \"{claude}\"}}\n\
         \x20 - {{name: vertex-gemini, kind: vertex, project: spill-project, location: us-east5, model: gemini-2.5-pro, base_url: \"{gemini}\", stream_upstream: false}}\n\
         \x20 - {{name: vertex-own-file, kind: vertex, project: spill-project, location: us-east5, model: claude-sonnet-4-6, base_url: \"{claude}\", credentials_file: \"{file}\", stream_upstream: false}}\n\
         tasks:\n\
         \x20 - {{name: vertex-own-file, backends: [vertex-own-file], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: vertex-claude, backends: [vertex-claude], slo: {{ttft_ms: 5000}}}}\n\
         \x20 - {{name: vertex-gemini, backends: [vertex-gemini], slo: {{ttft_ms: 5000}}}}",
        claude = claude.base_url(),
        gemini = gemini.base_url(),
        file = key_file.display(),
    );
    let path = key_file.to_string_lossy().into_owned();
    let (_router, url) = tokio::task::spawn_blocking(move || {
        super::openai_sdk::serve_with_env(&config, 0, &[("GOOGLE_APPLICATION_CREDENTIALS", path.as_str())])
    })
    .await
    .unwrap();
    let key_line = GCP_KEY.lines().nth(1).unwrap();
    run_sdk_script("vertex_sdk_check.py", &url, &[key_line]).await;
    // Every call carried a token; the router asked once for the default credentials and once
    // for the backend with its own file, and kept each.
    assert_eq!(claude.tokens_granted(), 2, "one token per credentials for many requests");
    let bodies = claude.requests();
    assert!(bodies.len() >= 5, "{bodies:?}");
    assert!(bodies.iter().all(|b| b["anthropic_version"] == "vertex-2023-10-16"), "{bodies:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The third seed's setup: one Claude model from Anthropic, Bedrock and Vertex AI, each with
/// its own quota. As Anthropic's runs out (429 with `Retry-After`), traffic moves to Bedrock,
/// and as Bedrock's does, to Vertex, without a failed request.
#[tokio::test]
async fn claude_from_three_providers_spills_down_the_chain_as_each_quota_runs_out() {
    const KEY: &str = "ABSKQmVkcm9ja0NoYWluS2V5";
    let dir = temp_dir("chain");
    let anthropic = sim(SimKind::Anthropic, "claude-sonnet-4-6", |a| a.rpm = 4).await;
    let bedrock = sim(SimKind::Bedrock, "anthropic.claude-sonnet-4-6", |a| {
        (a.api_key, a.rpm) = (Some(KEY.into()), 4);
    })
    .await;
    let (vertex, key_file) = vertex_with_account("claude-sonnet-4-6", &dir, |_| {}).await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: anthropic, kind: anthropic, model: claude-sonnet-4-6, base_url: \"{}\"}}\n\
         \x20 - {{name: bedrock, kind: bedrock, region: us-east-1, model: anthropic.claude-sonnet-4-6, base_url: \"{}\", api_key_env: BEDROCK_KEY}}\n\
         \x20 - {{name: vertex, kind: vertex, project: spill-project, location: us-east5, model: claude-sonnet-4-6, base_url: \"{}\", credentials_file: \"{}\"}}\n\
         tasks:\n\
         \x20 - {{name: claude, backends: [anthropic, bedrock, vertex], strategy: priority, slo: {{ttft_ms: 5000}}}}",
        anthropic.base_url(),
        bedrock.base_url(),
        vertex.base_url(),
        key_file.display(),
    );
    let router = router(&yaml, &[("BEDROCK_KEY", KEY)]).await;
    let client = reqwest::Client::new();
    let mut served = Vec::new();
    for _ in 0..11 {
        let answer = client
            .post(format!("{}/v1/chat/completions", router.url))
            .json(&serde_json::json!({"model": "claude", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        served.push(answer.headers()["x-spillway-backend"].to_str().unwrap().to_string());
    }
    let expected: Vec<&str> = [["anthropic"; 4].as_slice(), &["bedrock"; 4], &["vertex"; 3]].concat();
    assert_eq!(served, expected);
    let _ = std::fs::remove_dir_all(dir);
}

/// Azure OpenAI without a key: a Microsoft Entra token from the router's environment, through a
/// client secret and through workload identity (the federated token file the AKS webhook
/// mounts), fetched once at the simulator's Entra endpoint (`AZURE_AUTHORITY_HOST`, which must
/// be HTTPS: the simulator serves TLS with a CA the router is told to trust) and sent as a bearer
/// token on every call.
#[tokio::test]
async fn azure_openai_without_a_key_calls_with_an_entra_token() {
    const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
    const CLIENT: &str = "00000000-1111-2222-3333-444444444444";
    const SECRET: &str = "entra-sim-client-secret-0123456789";
    const FEDERATED: &str = "eyJhbGciOiJSUzI1NiJ9.federated-sim-token.sig";
    let azure = sim(SimKind::AzureOpenai, "gpt-5.6", |a| {
        a.tls = true;
        (a.entra_tenant_id, a.entra_client_id) = (Some(TENANT.into()), Some(CLIENT.into()));
        (a.entra_client_secret, a.entra_federated_token) = (Some(SECRET.into()), Some(FEDERATED.into()));
        // Keys are checked too: a call without a token would need this one.
        a.api_key = Some("az-key-the-router-does-not-have".into());
    })
    .await;
    let dir = temp_dir("entra");
    let ca = crate::tls::ca_file(azure.ca_pem().unwrap());
    let token_file = dir.join("azure-identity-token");
    std::fs::write(&token_file, FEDERATED).unwrap();
    let config = format!(
        "tls: {{ca_file: \"{}\"}}\nbackends:\n\
         \x20 - {{name: azure-entra, kind: azure_openai, base_url: \"{}/openai/v1\", model: gpt-5.6}}\n\
         tasks:\n\
         \x20 - {{name: azure, backends: [azure-entra], slo: {{ttft_ms: 5000}}}}",
        ca.display(),
        azure.base_url(),
    );
    let authority = azure.base_url();
    let token_path = token_file.to_string_lossy().into_owned();
    let ways: [Vec<(&str, &str)>; 2] = [
        vec![("AZURE_TENANT_ID", TENANT), ("AZURE_CLIENT_ID", CLIENT), ("AZURE_CLIENT_SECRET", SECRET)],
        vec![
            ("AZURE_TENANT_ID", TENANT),
            ("AZURE_CLIENT_ID", CLIENT),
            ("AZURE_FEDERATED_TOKEN_FILE", &token_path),
        ],
    ];
    for (i, way) in ways.into_iter().enumerate() {
        let mut env: Vec<(String, String)> =
            way.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.push(("AZURE_AUTHORITY_HOST".into(), authority.clone()));
        let config = config.clone();
        let (router, url) = tokio::task::spawn_blocking(move || {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            super::openai_sdk::serve_with_env(&config, 0, &env)
        })
        .await
        .unwrap();
        let client = reqwest::Client::new();
        for _ in 0..3 {
            let answer = client
                .post(format!("{url}/v1/chat/completions"))
                .bearer_auth("sk-sdk")
                .json(&serde_json::json!({"model": "azure", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let text = answer.text().await.unwrap();
            assert_eq!(status, 200, "{text}");
            assert!(!text.contains(SECRET) && !text.contains(FEDERATED), "{text}");
        }
        assert_eq!(azure.tokens_granted(), i as u64 + 1, "one token for each router's three calls");
        drop(router);
    }
    let _ = std::fs::remove_dir_all(dir);
}
