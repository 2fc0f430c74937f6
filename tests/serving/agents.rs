//! Coding agents as they ship: each client's captured request (tests/fixtures/agents/, headers
//! and body as the current release sends them, secrets removed) replayed through the router.
//! A new client version that sends something new fails here before users meet it.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;
use spillway::sim::SimKind;

use crate::common::{router, sim};

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
