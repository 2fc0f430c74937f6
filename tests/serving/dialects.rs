//! Every dialect's front door goes through the one core: a request of each (chat, Messages,
//! Responses, legacy completions, embeddings) to the same task is routed to the same node,
//! leaves one ledger row and counts in the same metric series.

use serde_json::{json, Value};
use spillway::sim::SimKind;

use crate::common::{self, router, sim};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

#[tokio::test]
async fn a_request_of_each_dialect_is_routed_ledgered_and_counted_alike() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let ledger = common::temp_ledger_url();
    let yaml = format!(
        r#"
backends:
  - {{name: local, kind: vllm, endpoints: ["{}"], model: {LLAMA}, embedding_space: llama-emb}}
tasks:
  - {{name: t, backends: [local], slo: {{ttft_ms: 5000}}}}
ledger: {{url: "{ledger}"}}
"#,
        node.base_url()
    );
    let router = router(&yaml, &[]).await;
    let prompt = "summarise: disk full on node 3";
    let requests: [(&str, Value); 5] = [
        (
            "/v1/chat/completions",
            json!({"model": "t", "max_tokens": 8, "messages": [{"role": "user", "content": prompt}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "t", "max_tokens": 8, "messages": [{"role": "user", "content": prompt}]}),
        ),
        ("/v1/responses", json!({"model": "t", "max_output_tokens": 8, "input": prompt})),
        ("/v1/completions", json!({"model": "t", "max_tokens": 8, "prompt": prompt})),
        ("/v1/embeddings", json!({"model": "t", "input": prompt})),
    ];
    let client = reqwest::Client::new();
    for (path, body) in &requests {
        let response = client.post(format!("{}{path}", router.url)).json(body).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["x-spillway-backend"], "local", "{path}");
    }
    let metrics = common::metrics_text(&router).await;
    let served =
        common::series_sum(&metrics, "spillway_requests_total", &[("task", "t"), ("backend", "local")]);
    assert_eq!(served, Some(5.0), "{metrics}");

    common::wait_ledger_written(&router).await;
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let rows = store.query(i64::MIN, i64::MAX).await.unwrap();
    assert_eq!(rows.len(), 5, "{rows:?}");
    for row in &rows {
        assert_eq!((row.task.as_str(), row.backend.as_str()), ("t", "local"), "{row:?}");
        assert!(row.input_tokens > 0, "{row:?}");
    }
    let generated: Vec<i64> = rows.iter().map(|r| r.output_tokens).filter(|n| *n > 0).collect();
    assert_eq!(generated, [8, 8, 8, 8], "four dialects generate, embeddings do not: {rows:?}");
}
