//! The third seed's setup in the demo: one Claude model bought from three providers, each with
//! its own quota, spilled between when one runs out. A capped Anthropic, Amazon Bedrock (a
//! Bedrock API key) and Google Vertex AI (a service account whose token the router exchanges at
//! the simulator's own token endpoint) serve the task `claude-anywhere` in that order.

use std::path::Path;

use super::start_sim;
use crate::sim::{SimHandle, SimKind};

/// Requests per minute each capped Claude provider takes before it answers 429.
pub const CAPPED_RPM: u64 = 20;

/// The Bedrock API key the demo's Bedrock simulator takes, and the variable that holds it.
pub const BEDROCK_KEY: &str = "demo-bedrock-api-key";
pub const BEDROCK_KEY_ENV: &str = "SPILLWAY_DEMO_BEDROCK_KEY";

/// The service-account file the demo writes beside its config for Vertex AI.
pub const GCP_FILE: &str = "spillway-demo-gcp.json";

/// A key made for the simulators, which belongs to no Google account (tests/fixtures/README.md).
const GCP_KEY: &str = include_str!("../../tests/fixtures/gcp-test-service-account.pem");

/// The three providers' simulators, and the config lines that name them.
pub struct Clouds {
    pub sims: Vec<(&'static str, SimHandle)>,
    pub backends: String,
}

fn service_account(token_uri: &str) -> String {
    serde_json::json!({
        "type": "service_account", "project_id": "spillway-demo", "private_key_id": "demo",
        "private_key": GCP_KEY, "client_email": "spillway-demo@spillway-demo.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": token_uri,
    })
    .to_string()
}

/// Start the capped Anthropic, Bedrock and Vertex simulators, writing the service-account file
/// into `dir`.
pub async fn start(seed: u64, dir: &Path) -> std::io::Result<Clouds> {
    let model = "claude-sonnet-4-6";
    let file = dir.join(GCP_FILE);
    // The simulator reads the account's key; its token endpoint's address is known once it runs.
    std::fs::write(&file, service_account("http://127.0.0.1/token"))?;
    let anthropic = start_sim(SimKind::Anthropic, model, seed + 5, |a| a.rpm = CAPPED_RPM).await?;
    let bedrock_model = "us.anthropic.claude-sonnet-4-6-v1:0";
    let bedrock = start_sim(SimKind::Bedrock, bedrock_model, seed + 6, |a| {
        (a.api_key, a.rpm) = (Some(BEDROCK_KEY.into()), CAPPED_RPM);
    })
    .await?;
    let vertex = start_sim(SimKind::Vertex, model, seed + 7, |a| {
        (a.gcp_service_account, a.gcp_project) = (Some(file.clone()), "spillway-demo".into());
    })
    .await?;
    std::fs::write(&file, service_account(&format!("{}/token", vertex.base_url())))?;
    let backends = format!(
        r#"  # One Claude model from three providers, each with its own quota (the capped ones answer
  # 429 past {CAPPED_RPM} requests a minute): task claude-anywhere spills down the chain and
  # comes back when a minute's quota returns.
  - name: anthropic-capped
    kind: anthropic
    base_url: {anthropic}
    model: {model}
    region: us
    price: {{input_per_mtok: 3.0, output_per_mtok: 15.0, cached_input_per_mtok: 0.3, cache_write_per_mtok: 3.75}}
  - name: bedrock-claude
    kind: bedrock
    region: us-east-1
    base_url: {bedrock}        # default: https://bedrock-runtime.us-east-1.amazonaws.com
    model: "{bedrock_model}"
    api_key_env: {BEDROCK_KEY_ENV}   # a Bedrock API key; without it, SigV4 from AWS's credential chain
    price: {{input_per_mtok: 3.0, output_per_mtok: 15.0, cached_input_per_mtok: 0.3, cache_write_per_mtok: 3.75}}
  - name: vertex-claude
    kind: vertex
    project: spillway-demo
    location: us-east5
    base_url: {vertex}         # default: https://us-east5-aiplatform.googleapis.com
    model: {model}
    credentials_file: {GCP_FILE}   # without it, Application Default Credentials
    price: {{input_per_mtok: 3.0, output_per_mtok: 15.0, cached_input_per_mtok: 0.3, cache_write_per_mtok: 3.75}}
"#,
        anthropic = anthropic.base_url(),
        bedrock = bedrock.base_url(),
        vertex = vertex.base_url(),
    );
    Ok(Clouds {
        sims: vec![("anthropic (capped)", anthropic), ("bedrock sim", bedrock), ("vertex sim", vertex)],
        backends,
    })
}
