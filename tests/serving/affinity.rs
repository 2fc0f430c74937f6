//! Affinity from what clients already send, end to end on a four-node pool: requests that share
//! a session header, a `prompt_cache_key`, an Anthropic `metadata.user_id`, or (with no identity
//! at all) a system prompt and first user message land on one node, even as the rest of their
//! prompt changes; different keys spread over the nodes.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use spillway::sim::{SimHandle, SimKind};

use crate::common::{self, router, sim, Router};

const NODES: usize = 4;
/// Keys sent once each to see them spread: all ten on one of four nodes by chance is 4 in 4^10.
const KEYS: usize = 10;

/// One way of carrying an affinity key, as a client sends it.
#[derive(Clone, Copy)]
enum Carrier {
    SessionHeader,
    PromptCacheKey,
    AnthropicUserId,
    /// No identity: the key is the task, the system prompt and the first user message.
    PromptPrefix,
}

impl Carrier {
    /// Request `turn` of the conversation keyed `key`: the words after the key change with
    /// each turn, so only the key can hold it on one node.
    fn send(self, router: &Router, key: &str, turn: usize) -> reqwest::RequestBuilder {
        let client = reqwest::Client::new();
        let chat = |body: Value| client.post(format!("{}/v1/chat/completions", router.url)).json(&body);
        let question = format!("question {turn} about the disk on node {}", turn * 7 + 3);
        match self {
            Carrier::SessionHeader => {
                let body = json!({"model": "t", "max_tokens": 2, "messages": [{"role": "user", "content": question}]});
                chat(body).header("x-session-id", key)
            }
            Carrier::PromptCacheKey => chat(json!({
                "model": "t", "max_tokens": 2, "prompt_cache_key": key,
                "messages": [{"role": "user", "content": question}],
            })),
            Carrier::AnthropicUserId => client.post(format!("{}/v1/messages", router.url)).json(&json!({
                "model": "t", "max_tokens": 2, "metadata": {"user_id": key},
                "messages": [{"role": "user", "content": question}],
            })),
            Carrier::PromptPrefix => chat(json!({
                "model": "t", "max_tokens": 2,
                "messages": [
                    {"role": "system", "content": "You triage tickets."},
                    {"role": "user", "content": format!("ticket {key}: the disk is full")},
                    {"role": "assistant", "content": "Which node?"},
                    {"role": "user", "content": question},
                ],
            })),
        }
    }
}

/// Requests each node has finished.
async fn finished(nodes: &[SimHandle]) -> Vec<f64> {
    let mut counts = Vec::with_capacity(nodes.len());
    for node in nodes {
        counts.push(common::node_completed(&node.base_url()).await);
    }
    counts
}

/// Send one request and name the node that served it (the one whose count went up).
async fn served_by(nodes: &[SimHandle], request: reqwest::RequestBuilder) -> usize {
    let before = finished(nodes).await;
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    assert_eq!(response.headers()["x-spillway-backend"], "pool");
    let total = before.iter().sum::<f64>() + 1.0;
    let after = common::wait_until(Duration::from_secs(5), "the serving node to count it", || async move {
        let now = finished(nodes).await;
        if now.iter().sum::<f64>() == total {
            Ok(now)
        } else {
            Err(format!("{now:?}, {total} expected in all"))
        }
    })
    .await;
    (0..nodes.len()).find(|&i| after[i] > before[i]).expect("one node counted it")
}

async fn pool() -> (Vec<SimHandle>, Router) {
    let mut nodes = Vec::new();
    for _ in 0..NODES {
        nodes.push(sim(SimKind::Vllm, "llama", |_| {}).await);
    }
    let endpoints: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.base_url())).collect();
    let yaml = format!(
        r#"
backends:
  - {{name: pool, kind: vllm, endpoints: [{}], model: llama, reserve: 0}}
tasks:
  - {{name: t, backends: [pool], slo: {{ttft_ms: 5000}}}}
"#,
        endpoints.join(", ")
    );
    let router = router(&yaml, &[]).await;
    (nodes, router)
}

/// A key keeps its node over three turns; ten keys land on more than one node.
async fn check(carrier: Carrier, what: &str) {
    let (nodes, router) = pool().await;
    let home = served_by(&nodes, carrier.send(&router, "key-0", 0)).await;
    for turn in 1..3 {
        let node = served_by(&nodes, carrier.send(&router, "key-0", turn)).await;
        assert_eq!(node, home, "{what}: turn {turn} of one key moved from node {home} to {node}");
    }
    let mut used = BTreeSet::new();
    for k in 0..KEYS {
        used.insert(served_by(&nodes, carrier.send(&router, &format!("key-{k}"), 0)).await);
    }
    assert!(used.len() > 1, "{what}: {KEYS} different keys all landed on node {used:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_header_keeps_its_node() {
    check(Carrier::SessionHeader, "x-session-id").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_cache_key_keeps_its_node() {
    check(Carrier::PromptCacheKey, "prompt_cache_key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_user_id_keeps_its_node() {
    check(Carrier::AnthropicUserId, "metadata.user_id").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_prompt_prefix_keeps_its_node_without_any_identity() {
    check(Carrier::PromptPrefix, "system prompt and first user message").await;
}
