//! `POST /v1/embeddings` and `POST /v1/completions` through the router in front of simulators:
//! priced, counted and ledgered like chat; embeddings failing over only inside one embedding
//! space; completions refused where no backend speaks OpenAI's wire; a completions stream
//! relayed under the router's head, and broken after its first token without `[DONE]`.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use spillway::sim::SimKind;

use crate::common::{self, router, series_sum, sim, temp_ledger_url, wait_metric, wait_until};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

async fn post(url: &str, path: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = reqwest::Client::new().post(format!("{url}{path}")).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.json().await.unwrap_or(Value::Null))
}

/// A streamed completion read to its end: every `data:` payload in order.
async fn post_stream(url: &str, body: &Value) -> Vec<String> {
    let resp = reqwest::Client::new().post(format!("{url}/v1/completions")).json(body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut events = resp.bytes_stream().eventsource();
    let mut data = Vec::new();
    while let Some(Ok(event)) = events.next().await {
        data.push(event.data);
    }
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_and_completions_are_priced_counted_and_ledgered_like_chat() {
    let pool = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "text-embedding-3-small", |_| {}).await;
    let ledger = temp_ledger_url();
    let yaml = format!(
        r#"
backends:
  - {{name: pool, kind: vllm, endpoints: ["{pool}"], model: {LLAMA}}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: text-embedding-3-small,
     embedding_space: te3-small, price: {{input_per_mtok: 2, output_per_mtok: 8}}}}
tasks:
  - {{name: search, backends: [hosted], slo: {{ttft_ms: 2000}}}}
  - {{name: legacy, backends: [pool], slo: {{ttft_ms: 2000}}}}
ledger: {{url: "{ledger}"}}
"#,
        pool = pool.base_url(),
        hosted = hosted.base_url(),
    );
    let r = router(&yaml, &[]).await;

    let (status, headers, answer) = post(
        &r.url,
        "/v1/embeddings",
        &json!({"model": "search", "input": ["alpha", "beta"], "dimensions": 8}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["x-spillway-backend"], "hosted");
    assert_eq!((answer["object"].as_str(), answer["model"].as_str()), (Some("list"), Some("search")));
    let data = answer["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, item) in data.iter().enumerate() {
        assert_eq!((item["object"].as_str(), item["index"].as_u64()), (Some("embedding"), Some(i as u64)));
        assert_eq!(item["embedding"].as_array().unwrap().len(), 8, "dimensions reach the upstream");
    }
    let embedded = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(embedded > 0 && answer["usage"]["total_tokens"] == embedded, "{answer}");

    let (status, _, answer) = post(
        &r.url,
        "/v1/completions",
        &json!({"model": "legacy", "prompt": "Once upon a time", "max_tokens": 5}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (answer["object"].as_str(), answer["model"].as_str()),
        (Some("text_completion"), Some("legacy"))
    );
    let id = answer["id"].as_str().unwrap();
    assert!(id.starts_with("cmpl-") && !id.starts_with("cmpl-sim"), "the router's id: {id}");
    assert!(!answer["choices"][0]["text"].as_str().unwrap().is_empty(), "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["usage"]["completion_tokens"], 5);

    // One ledger row each, the embeddings priced at the input price.
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let rows = wait_until(Duration::from_secs(5), "a ledger row for each request", || async {
        let rows = store.query(0, i64::MAX).await.unwrap();
        if rows.len() == 2 {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await;
    let row = |task: &str| rows.iter().find(|row| row.task == task).unwrap();
    let search = row("search");
    assert_eq!((search.backend.as_str(), search.outcome.as_str()), ("hosted", "completed"));
    assert_eq!((search.input_tokens, search.output_tokens), (embedded as i64, 0));
    assert_eq!(search.cost_usd, Some(Decimal::from(embedded * 2) / Decimal::from(1_000_000)));
    let legacy = row("legacy");
    assert_eq!(
        (legacy.backend.as_str(), legacy.outcome.as_str(), legacy.output_tokens),
        ("pool", "completed", 5)
    );
    assert!(legacy.input_tokens > 0 && legacy.ttft_ms.is_some(), "{legacy:?}");

    // And the same metrics as chat.
    let completed = |task: &str, backend: &str| {
        format!(r#"spillway_requests_total{{backend="{backend}",outcome="completed",task="{task}"}}"#)
    };
    let within = Duration::from_secs(5);
    assert_eq!(wait_metric(&r, &completed("search", "hosted"), 1.0, within).await, 1.0);
    assert_eq!(wait_metric(&r, &completed("legacy", "pool"), 1.0, within).await, 1.0);
    let text = common::metrics_text(&r).await;
    let tokens = |task, backend, kind| {
        series_sum(&text, "spillway_tokens_total", &[("task", task), ("backend", backend), ("kind", kind)])
    };
    assert_eq!(tokens("search", "hosted", "input"), Some(embedded as f64));
    assert_eq!(tokens("legacy", "pool", "output"), Some(5.0));
    assert!(series_sum(&text, "spillway_cost_usd_total", &[("task", "search")]).unwrap() > 0.0);
    assert_eq!(
        series_sum(&text, "spillway_ttft_seconds_count", &[("task", "legacy"), ("backend", "pool")]),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_fail_over_inside_their_space_and_never_leave_it() {
    let failing = sim(SimKind::OpenAi, "e5", |a| a.error_rate = 1.0).await;
    let steady = sim(SimKind::OpenAi, "e5", |_| {}).await;
    let chat_only = sim(SimKind::OpenAi, "gpt-4o-mini", |_| {}).await;
    let ledger = temp_ledger_url();
    let yaml = format!(
        r#"
admin_token_env: ADMIN
ledger: {{url: "{ledger}"}}
backends:
  - {{name: e5-failing, kind: openai_compatible, base_url: "{failing}/v1", model: e5, embedding_space: e5}}
  - {{name: e5-steady, kind: openai_compatible, base_url: "{steady}/v1", model: e5, embedding_space: e5}}
  - {{name: chat-only, kind: openai, base_url: "{chat_only}/v1", model: gpt-4o-mini}}
tasks:
  - {{name: search, backends: [e5-failing, e5-steady], strategy: priority, slo: {{ttft_ms: 2000}}}}
  - {{name: narrow, backends: [e5-failing, chat-only], strategy: priority, slo: {{ttft_ms: 2000}}}}
dispatch: {{backoff_base_ms: 1, backoff_max_ms: 2}}
"#,
        failing = failing.base_url(),
        steady = steady.base_url(),
        chat_only = chat_only.base_url(),
    );
    let r = router(&yaml, &[("ADMIN", "admin-token")]).await;
    let body =
        |task: &str| json!({"model": task, "input": "where is my parcel", "encoding_format": "base64"});

    let (status, headers, answer) = post(&r.url, "/v1/embeddings", &body("search")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["x-spillway-backend"], "e5-steady");
    assert_eq!(headers["x-spillway-attempts"], "2", "the failing backend first, before any answer");
    // The vector is the steady backend's own, passed through (base64 both ways).
    let (_, _, direct) = post(
        &steady.base_url(),
        "/v1/embeddings",
        &json!({"model": "e5", "input": "where is my parcel", "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(answer["data"][0]["embedding"], direct["data"][0]["embedding"]);

    // A task whose only other backend has no embedding space: the failure is the client's,
    // and the chat backend is never called.
    let (status, _, answer) = post(&r.url, "/v1/embeddings", &body("narrow")).await;
    assert_eq!(status, 503, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("e5-failing") && !message.contains("chat-only"), "{message}");
    let text = common::metrics_text(&r).await;
    assert_eq!(
        series_sum(&text, "spillway_provider_calls_total", &[("backend", "chat-only")]),
        None,
        "{text}"
    );

    // A fallback with an embedding space is probed with an embeddings request (no output
    // tokens in its ledger row), never with a chat one it may not serve.
    let probe: Value = reqwest::Client::new()
        .post(format!("{}/admin/canary", r.url))
        .bearer_auth("admin-token")
        .json(&json!({"backend": "e5-steady"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(probe["results"][0]["ok"], true, "{probe}");
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let row = wait_until(Duration::from_secs(5), "the canary's ledger row", || async {
        let rows = store.query(0, i64::MAX).await.unwrap();
        rows.into_iter().find(|row| row.client_key.as_deref() == Some("canary"))
    })
    .await;
    assert_eq!((row.backend.as_str(), row.output_tokens), ("e5-steady", 0), "{row:?}");
    assert!(row.input_tokens > 0, "{row:?}");
}

#[tokio::test]
async fn completions_and_embeddings_where_no_backend_serves_them_are_refused_naming_why() {
    let yaml = r#"
backends:
  - {name: claude, kind: anthropic, base_url: "http://127.0.0.1:9", model: claude-3-5-haiku-latest}
tasks:
  - {name: assistant, backends: [claude], slo: {ttft_ms: 2000}}
"#;
    let r = router(yaml, &[]).await;
    let (status, _, answer) =
        post(&r.url, "/v1/completions", &json!({"model": "assistant", "prompt": "Once"})).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "unsupported_capability");
    assert_eq!(
        answer["error"]["message"],
        "no eligible backend serves legacy completions; only vllm, openai and openai_compatible backends do \
         (claude is kind anthropic)"
    );
    let (status, _, answer) =
        post(&r.url, "/v1/embeddings", &json!({"model": "assistant", "input": "x"})).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("claude declares no embedding_space"),
        "{answer}"
    );

    // Bad input is the client's, in OpenAI's envelope with the field named.
    let (status, _, answer) =
        post(&r.url, "/v1/embeddings", &json!({"model": "assistant", "input": [{"x": 1}]})).await;
    assert_eq!((status, answer["error"]["param"].as_str()), (400, Some("input[0]")), "{answer}");
    let (status, _, answer) =
        post(&r.url, "/v1/embeddings", &json!({"model": "nothing", "input": "x"})).await;
    assert_eq!((status, answer["error"]["param"].as_str()), (404, Some("model")), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completions_stream_is_the_upstreams_under_the_routers_head_and_breaks_without_done() {
    let good = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let dropping = sim(SimKind::Vllm, LLAMA, |a| a.drop_after = Some(3)).await;
    let yaml = format!(
        r#"
backends:
  - {{name: pool, kind: vllm, endpoints: ["{good}"], model: {LLAMA}}}
  - {{name: flaky, kind: vllm, endpoints: ["{dropping}"], model: {LLAMA}}}
tasks:
  - {{name: legacy, backends: [pool], slo: {{ttft_ms: 2000}}}}
  - {{name: broken, backends: [flaky], slo: {{ttft_ms: 2000}}}}
"#,
        good = good.base_url(),
        dropping = dropping.base_url(),
    );
    let r = router(&yaml, &[]).await;
    let body = |task: &str, usage: bool| {
        json!({"model": task, "prompt": ["Once upon"], "max_tokens": 6, "stream": true,
               "stream_options": {"include_usage": usage}})
    };

    let data = post_stream(&r.url, &body("legacy", true)).await;
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("cmpl-") && !id.starts_with("cmpl-sim"), "{id}");
    for chunk in &chunks {
        assert_eq!((chunk["id"].as_str(), chunk["model"].as_str()), (Some(id), Some("legacy")), "{chunk}");
        assert_eq!(chunk["object"], "text_completion");
    }
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert_eq!(text.split_whitespace().count(), 6, "{text:?}");
    let usage = chunks.last().unwrap();
    assert_eq!(
        (usage["choices"].clone(), usage["usage"]["completion_tokens"].clone()),
        (json!([]), json!(6))
    );

    // Without include_usage the client gets no usage chunk, though the router asked for one.
    let data = post_stream(&r.url, &body("legacy", false)).await;
    assert!(data.iter().all(|d| !d.contains("\"usage\"")), "{data:?}");

    // Broken after its first tokens: text, then an in-band error, and no [DONE].
    let data = post_stream(&r.url, &body("broken", false)).await;
    assert!(!data.iter().any(|d| d == "[DONE]"), "{data:?}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert!(last["error"]["message"].as_str().unwrap().contains("flaky"), "{last}");
    assert!(data.len() >= 2, "some text came first: {data:?}");
}
