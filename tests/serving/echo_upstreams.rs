//! The upstreams of `echoes.rs`: a simulator of every backend kind in echo mode
//! (`--echo-credentials`), each checking credentials as the real service does (keys, SigV4
//! with a session token, Google tokens from a service-account file, Entra tokens over TLS),
//! and the config and environment of a `spillway serve` over them: one task per backend, two
//! more whose fallbacks are every backend (for the canaries), the admin API, a ledger file.

use spillway::sim::{SimArgs, SimHandle, SimKind};

use crate::clouds::{vertex_with_account, GCP_KEY};
use crate::common::sim;

pub(super) const CLIENT_KEY: &str = "sk-echo-client";
pub(super) const ADMIN_TOKEN: &str = "echo-admin-token";
const KEY_ID: &str = "ASIAECHOSIM000000001";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYechoSECRET";
const SESSION: &str = "IQoJb3JpZ2luX2VjEchoSESSIONtoken0123456789abcdef";
const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT_ID: &str = "00000000-1111-2222-3333-444444444444";
const ENTRA_SECRET: &str = "entra-echo-client-secret-0123456789";
/// The keys of the kinds that take one: (environment variable, value).
const KEYS: [(&str, &str); 5] = [
    ("ECHO_LOCAL_KEY", "local-node-key-0123456789abcdef"),
    ("ECHO_OPENAI_KEY", "sk-proj-echoOpenAiKey0123456789abcdef"),
    ("ECHO_COMPAT_KEY", "compat-endpoint-key-0123456789abcdef"),
    ("ECHO_ANTHROPIC_KEY", "sk-ant-api03-echoAnthropicKey0123456789"),
    ("ECHO_GEMINI_KEY", "AIzaSyEchoGeminiKey0123456789abcdefgh"),
];
const CLAUDE_ON_BEDROCK: &str = "us.anthropic.claude-sonnet-4-6-v1:0";
const LLAMA: &str = "meta.llama3-3-70b-instruct-v1:0";

/// Where the upstream's words come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Mode {
    /// The provider's error body (400: refused, not retried, so the client is shown why).
    Whole,
    /// An error event (Bedrock InvokeModel: `modelStreamErrorException`) before any token.
    BeforeFirstToken,
    /// An error event after the first token.
    AfterFirstToken,
}

impl Mode {
    /// The sim's flags for this mode, its echo on.
    fn tune(self, kind: SimKind, a: &mut SimArgs) {
        (a.echo_credentials, a.ttft_ms, a.output_tokens) = (true, 5, 4);
        match self {
            Mode::Whole => (a.error_rate, a.error_status) = (1.0, 400),
            Mode::BeforeFirstToken => {
                a.error_event_after = Some(0);
                // The defect as reported: InvokeModel's stream opens with this exception
                // (Converse's with its error event).
                if kind == SimKind::Bedrock {
                    a.stream_exception = Some("modelStreamErrorException".into());
                }
            }
            Mode::AfterFirstToken => a.error_event_after = Some(1),
        }
    }
}

/// The simulators of one mode, the router's config over them (each backend is task
/// `t-{name}`'s only one) and its environment.
pub(super) struct Upstreams {
    pub sims: Vec<SimHandle>,
    pub backends: Vec<&'static str>,
    pub yaml: String,
    pub env: Vec<(String, String)>,
}

/// Start the simulators of `mode`, the service-account files in `dir`.
pub(super) async fn upstreams(mode: Mode, dir: &std::path::Path) -> Upstreams {
    let keyed = |kind, key: &'static str| {
        move |a: &mut SimArgs| {
            a.api_key = Some(key.into());
            mode.tune(kind, a)
        }
    };
    let aws = |a: &mut SimArgs| {
        (a.aws_access_key_id, a.aws_secret_access_key) = (Some(KEY_ID.into()), Some(SECRET.into()));
        (a.aws_session_token, a.aws_region) = (Some(SESSION.into()), "eu-west-1".into());
        mode.tune(SimKind::Bedrock, a)
    };
    let azure = sim(SimKind::AzureOpenai, "gpt-5.6", move |a| {
        a.tls = true;
        (a.entra_tenant_id, a.entra_client_id) = (Some(TENANT.into()), Some(CLIENT_ID.into()));
        a.entra_client_secret = Some(ENTRA_SECRET.into());
        a.api_key = Some("az-key-the-router-does-not-have".into());
        mode.tune(SimKind::AzureOpenai, a)
    })
    .await;
    let (ca, authority) = (crate::tls::ca_file(azure.ca_pem().unwrap()), azure.base_url());
    let mut kinds: Vec<(&'static str, SimHandle, String)> = Vec::new();
    for (name, model) in [("vertex-claude", "claude-sonnet-4-6"), ("vertex-gemini", "gemini-2.5-pro")] {
        let (vertex, file) = vertex_with_account(model, dir, move |a| mode.tune(SimKind::Vertex, a)).await;
        let place = "project: spill-project, location: us-east5";
        let file = file.display();
        kinds.push((
            name,
            vertex,
            format!("kind: vertex, {place}, model: {model}, credentials_file: \"{file}\""),
        ));
    }
    // (name, its simulator, its config but for where it is: `URL`, the simulator's address).
    let plain = [
        (SimKind::Vllm, "m", 0, "local", "kind: local, endpoints: [\"URL\"]"),
        (SimKind::OpenAi, "gpt-4o-mini", 1, "openai", "kind: openai, base_url: \"URL/v1\""),
        (SimKind::OpenAi, "gpt-4o-mini", 2, "compat", "kind: openai_compatible, base_url: \"URL/v1\""),
        (SimKind::Anthropic, "claude-sonnet-4-6", 3, "anthropic", "kind: anthropic, base_url: \"URL\""),
        (SimKind::Gemini, "gemini-2.5-flash", 4, "gemini", "kind: gemini, base_url: \"URL/v1beta\""),
    ];
    for (kind, model, key, name, config) in plain {
        let handle = sim(kind, model, keyed(kind, KEYS[key].1)).await;
        kinds.push((name, handle, format!("{config}, model: {model}, api_key_env: {}", KEYS[key].0)));
    }
    kinds.push(("azure", azure, "kind: azure_openai, base_url: \"URL/openai/v1\", model: gpt-5.6".into()));
    for (name, model) in [("bedrock", CLAUDE_ON_BEDROCK), ("converse", LLAMA)] {
        let handle = sim(SimKind::Bedrock, model, aws).await;
        kinds.push((name, handle, format!("kind: bedrock, region: eu-west-1, model: \"{model}\"")));
    }
    let backends: Vec<&'static str> = kinds.iter().map(|(name, ..)| *name).collect();
    let mut yaml = format!(
        "listen: 127.0.0.1:0\nclient_keys_env: [ECHO_CLIENT_KEY]\nadmin_token_env: ECHO_ADMIN_TOKEN\n\
         canary: {{interval_secs: 0}}\ntls: {{ca_file: \"{}\"}}\ntelemetry: {{interval_ms: 200}}\n\
         ledger: {{url: \"sqlite://{}\"}}\nbackends:\n",
        ca.display(),
        dir.join("ledger.db").display(),
    );
    for (name, handle, config) in &kinds {
        let at = if config.contains("URL") { String::new() } else { ", base_url: \"URL\"".into() };
        yaml += &format!("  - {{name: {name}, {config}{at}}}\n").replace("URL", &handle.base_url());
    }
    yaml += "tasks:\n";
    let slo = "slo: {ttft_ms: 5000}";
    for name in &backends {
        yaml += &format!("  - {{name: t-{name}, backends: [{name}], {slo}}}\n");
    }
    // Canaries probe the backends a task falls back to: here every one.
    let (first, second, rest) = (backends[0], backends[1], backends[1..].join(", "));
    yaml += &format!("  - {{name: probe, backends: [{first}, {rest}], strategy: priority, {slo}}}\n");
    yaml += &format!("  - {{name: probe-first, backends: [{second}, {first}], strategy: priority, {slo}}}\n");
    let mut env: Vec<(String, String)> = KEYS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    for (k, v) in [
        ("ECHO_CLIENT_KEY", CLIENT_KEY),
        ("ECHO_ADMIN_TOKEN", ADMIN_TOKEN),
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", SESSION),
        ("AWS_REGION", "us-west-2"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT_ID),
        ("AZURE_CLIENT_SECRET", ENTRA_SECRET),
        ("AZURE_AUTHORITY_HOST", &authority),
        ("RUST_LOG", "warn,spillway=debug"),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    Upstreams { sims: kinds.into_iter().map(|(_, handle, _)| handle).collect(), backends, yaml, env }
}

/// Every credential the router holds for these upstreams or was issued by them.
pub(super) fn credentials(upstreams: &Upstreams) -> Vec<String> {
    let mut all: Vec<String> = KEYS.iter().map(|(_, v)| v.to_string()).collect();
    all.extend([KEY_ID, SECRET, SESSION, ENTRA_SECRET].map(String::from));
    all.extend(GCP_KEY.lines().filter(|l| !l.starts_with("-----") && l.len() >= 12).map(String::from));
    all.extend(upstreams.sims.iter().flat_map(SimHandle::issued_tokens));
    all
}
