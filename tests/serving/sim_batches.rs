//! The simulator's batch APIs over real HTTP: OpenAI's Files + Batch API (`openai` kind) and
//! Anthropic's Message Batches (`anthropic` kind) — upload, create, poll, results, cancel,
//! expiry, per-line failures and the providers' error envelopes.

use crate::common::{sim, wait_until};
use serde_json::{json, Value};
use spillway::sim::{SimHandle, SimKind};
use std::time::Duration;

const KEY: &str = "sk-batch";

async fn fast(kind: SimKind, delay_ms: u64, expire: bool) -> SimHandle {
    sim(kind, kind.default_model(), |a| {
        a.api_key = Some(KEY.to_string());
        a.ttft_ms = 1;
        a.tokens_per_sec = 5000.0;
        a.output_tokens = 4;
        a.batch_delay_ms = delay_ms;
        a.batch_expire = expire;
    })
    .await
}

fn openai(client: &reqwest::Client, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
    client.request(method, url).bearer_auth(KEY)
}

/// Upload `content` as a multipart form with `purpose`: (status, body).
async fn upload(s: &SimHandle, purpose: &str, content: &str) -> (u16, Value) {
    let body = format!(
        "--b0undary\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--b0undary\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\
         Content-Type: application/jsonl\r\n\r\n{content}\r\n--b0undary--\r\n"
    );
    let r = openai(&reqwest::Client::new(), reqwest::Method::POST, format!("{}/v1/files", s.base_url()))
        .header("content-type", "multipart/form-data; boundary=b0undary")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn chat_line(id: &str, extra: Value) -> String {
    let mut body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": id}]});
    if !extra.is_null() {
        body["metadata"] = extra;
    }
    json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions", "body": body}).to_string()
}

async fn send(rb: reqwest::RequestBuilder) -> (u16, Value) {
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn wait_status(s: &SimHandle, id: &str, want: &str) -> Value {
    let c = reqwest::Client::new();
    let url = format!("{}/v1/batches/{id}", s.base_url());
    wait_until(Duration::from_secs(10), format!("batch {id} {want}"), || async {
        let (_, b) = send(openai(&c, reqwest::Method::GET, url.clone())).await;
        (b["status"] == want).then_some(b)
    })
    .await
}

#[tokio::test]
async fn openai_batch_runs_lines_through_the_chat_route() {
    let s = fast(SimKind::OpenAi, 20, false).await;
    let c = reqwest::Client::new();
    let input = [chat_line("a", Value::Null), chat_line("b", json!({"sim_fault": "status=500"}))].join("\n");
    let (st, file) = upload(&s, "batch", &input).await;
    assert_eq!(st, 200, "{file}");
    assert_eq!((file["object"].as_str(), file["status"].as_str()), (Some("file"), Some("processed")));
    assert!(file["id"].as_str().unwrap().starts_with("file-"));
    let create = json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                        "completion_window": "24h", "metadata": {"job": "t"}});
    let (st, batch) =
        send(openai(&c, reqwest::Method::POST, format!("{}/v1/batches", s.base_url())).json(&create)).await;
    assert_eq!(st, 200, "{batch}");
    assert_eq!(batch["object"], "batch");
    assert_eq!(batch["metadata"]["job"], "t");
    let id = batch["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("batch_"));
    let done = wait_status(&s, &id, "completed").await;
    assert_eq!(done["request_counts"], json!({"total": 2, "completed": 1, "failed": 1}));
    assert!(done["completed_at"].is_u64() && done["finalizing_at"].is_u64());
    let content = |fid: &Value| {
        let url = format!("{}/v1/files/{}/content", s.base_url(), fid.as_str().unwrap());
        let c = c.clone();
        async move { openai(&c, reqwest::Method::GET, url).send().await.unwrap().text().await.unwrap() }
    };
    let out: Value = serde_json::from_str(content(&done["output_file_id"]).await.trim()).unwrap();
    assert_eq!(out["custom_id"], "a");
    assert!(out["id"].as_str().unwrap().starts_with("batch_req_"));
    assert_eq!(out["response"]["status_code"], 200);
    assert_eq!(out["response"]["body"]["object"], "chat.completion");
    assert!(out["error"].is_null());
    let err: Value = serde_json::from_str(content(&done["error_file_id"]).await.trim()).unwrap();
    assert_eq!((err["custom_id"].as_str(), err["response"]["status_code"].as_u64()), (Some("b"), Some(500)));
    assert_eq!(err["response"]["body"]["error"]["type"], "server_error");

    let (_, list) =
        send(openai(&c, reqwest::Method::GET, format!("{}/v1/batches?limit=1", s.base_url()))).await;
    assert_eq!((list["first_id"].as_str(), list["has_more"].as_bool()), (Some(id.as_str()), Some(false)));
    let url = format!("{}/v1/files/{}", s.base_url(), file["id"].as_str().unwrap());
    let (_, gone) = send(openai(&c, reqwest::Method::DELETE, url.clone())).await;
    assert_eq!(gone["deleted"], true);
    let (st, _) = send(openai(&c, reqwest::Method::GET, url)).await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn openai_batch_cancel_expiry_and_bad_input() {
    let s = fast(SimKind::OpenAi, 60_000, false).await;
    let c = reqwest::Client::new();
    let batches = format!("{}/v1/batches", s.base_url());
    let (_, file) = upload(&s, "batch", &chat_line("a", Value::Null)).await;
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let (_, batch) = send(openai(&c, reqwest::Method::POST, batches.clone()).json(&create)).await;
    let id = batch["id"].as_str().unwrap();
    let (_, cancelling) = send(openai(&c, reqwest::Method::POST, format!("{batches}/{id}/cancel"))).await;
    assert_eq!(cancelling["status"], "cancelling");
    assert!(cancelling["cancelling_at"].is_u64());
    assert!(wait_status(&s, id, "cancelled").await["cancelled_at"].is_u64());

    // Bad input: each answered 400 in OpenAI's envelope, naming the parameter.
    let (_, malformed) = upload(&s, "batch", "{not json").await;
    let dup = [chat_line("x", Value::Null), chat_line("x", Value::Null)].join("\n");
    let (_, dup_file) = upload(&s, "batch", &dup).await;
    let (_, tuning) = upload(&s, "fine-tune", &chat_line("a", Value::Null)).await;
    for (file_id, what) in [
        (malformed["id"].clone(), "invalid JSON"),
        (dup_file["id"].clone(), "more than once"),
        (tuning["id"].clone(), "not 'batch'"),
        (json!("file-nope"), "No such File"),
    ] {
        let body =
            json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
        let (st, e) = send(openai(&c, reqwest::Method::POST, batches.clone()).json(&body)).await;
        assert_eq!(st, 400, "{what}: {e}");
        assert_eq!(e["error"]["type"], "invalid_request_error");
        assert_eq!(e["error"]["param"], "input_file_id");
        assert!(e["error"]["message"].as_str().unwrap().contains(what), "{e}");
        assert!(e["error"].get("code").is_some());
    }
    let (st, e) = upload(&s, "homework", "{}").await;
    assert_eq!((st, e["error"]["param"].as_str()), (400, Some("purpose")));
    let (st, _) = send(c.get(format!("{batches}/{id}"))).await;
    assert_eq!(st, 401, "the Bearer key is checked");

    let s = fast(SimKind::OpenAi, 1, true).await;
    let (_, file) = upload(&s, "batch", &chat_line("a", Value::Null)).await;
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let url = format!("{}/v1/batches", s.base_url());
    let (_, batch) = send(openai(&c, reqwest::Method::POST, url).json(&create)).await;
    let expired = wait_status(&s, batch["id"].as_str().unwrap(), "expired").await;
    assert_eq!(expired["request_counts"]["failed"], 1);
    assert!(expired["expired_at"].is_u64() && expired["output_file_id"].is_null());
}

fn anthropic(client: &reqwest::Client, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
    client.request(method, url).header("x-api-key", KEY).header("anthropic-version", "2023-06-01")
}

fn message_request(id: &str, metadata: Value) -> Value {
    let mut params = json!({"model": "claude-3-5-haiku-latest", "max_tokens": 16,
                            "messages": [{"role": "user", "content": id}]});
    if !metadata.is_null() {
        params["metadata"] = metadata;
    }
    json!({"custom_id": id, "params": params})
}

async fn wait_ended(s: &SimHandle, c: &reqwest::Client, id: &str) -> Value {
    let url = format!("{}/v1/messages/batches/{id}", s.base_url());
    wait_until(Duration::from_secs(10), format!("message batch {id} to end"), || async {
        let (_, b) = send(anthropic(c, reqwest::Method::GET, url.clone())).await;
        (b["processing_status"] == "ended").then_some(b)
    })
    .await
}

#[tokio::test]
async fn anthropic_message_batch_results_cancel_and_errors() {
    let s = fast(SimKind::Anthropic, 20, false).await;
    let c = reqwest::Client::new();
    let batches = format!("{}/v1/messages/batches", s.base_url());
    let requests = json!({"requests": [message_request("ok", Value::Null),
                                       message_request("bad", json!({"sim_fault": "status=529"}))]});
    let (st, batch) = send(anthropic(&c, reqwest::Method::POST, batches.clone()).json(&requests)).await;
    assert_eq!(st, 200, "{batch}");
    assert_eq!(
        (batch["type"].as_str(), batch["processing_status"].as_str()),
        (Some("message_batch"), Some("in_progress"))
    );
    assert_eq!(batch["request_counts"]["processing"], 2);
    let id = batch["id"].as_str().unwrap();
    assert!(id.starts_with("msgbatch_"));
    let ended = wait_ended(&s, &c, id).await;
    assert_eq!(
        ended["request_counts"],
        json!({"processing": 0, "succeeded": 1, "errored": 1, "canceled": 0, "expired": 0})
    );
    assert!(ended["ended_at"].is_string() && ended["created_at"].is_string());
    let r = anthropic(&c, reqwest::Method::GET, ended["results_url"].as_str().unwrap().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/x-jsonl");
    let lines: Vec<Value> =
        r.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["result"]["type"], "succeeded");
    assert_eq!(lines[0]["result"]["message"]["type"], "message");
    assert_eq!(lines[1]["custom_id"], "bad");
    assert_eq!(lines[1]["result"]["error"]["error"]["type"], "overloaded_error");
    let (_, list) = send(anthropic(&c, reqwest::Method::GET, batches.clone())).await;
    assert_eq!((list["first_id"].as_str(), list["has_more"].as_bool()), (Some(id), Some(false)));
    let (_, deleted) = send(anthropic(&c, reqwest::Method::DELETE, format!("{batches}/{id}"))).await;
    assert_eq!(deleted, json!({"id": id, "type": "message_batch_deleted"}));

    let s = fast(SimKind::Anthropic, 60_000, false).await;
    let batches = format!("{}/v1/messages/batches", s.base_url());
    let one = json!({"requests": [message_request("x", Value::Null)]});
    let (_, batch) = send(anthropic(&c, reqwest::Method::POST, batches.clone()).json(&one)).await;
    let id = batch["id"].as_str().unwrap();
    let (st, e) = send(anthropic(&c, reqwest::Method::DELETE, format!("{batches}/{id}"))).await;
    assert_eq!((st, e["type"].as_str()), (400, Some("error")));
    let (_, canceling) = send(anthropic(&c, reqwest::Method::POST, format!("{batches}/{id}/cancel"))).await;
    assert_eq!(canceling["processing_status"], "canceling");
    assert!(canceling["cancel_initiated_at"].is_string());
    assert_eq!(wait_ended(&s, &c, id).await["request_counts"]["canceled"], 1);

    let dup = json!({"requests": [message_request("d", Value::Null), message_request("d", Value::Null)]});
    for body in [dup, json!({"requests": []})] {
        let (st, e) = send(anthropic(&c, reqwest::Method::POST, batches.clone()).json(&body)).await;
        assert_eq!(
            (st, e["type"].as_str(), e["error"]["type"].as_str()),
            (400, Some("error"), Some("invalid_request_error"))
        );
    }
    let (st, _) = send(c.post(&batches).header("x-api-key", KEY).json(&one)).await;
    assert_eq!(st, 400, "anthropic-version is required");

    let s = fast(SimKind::Anthropic, 1, true).await;
    let url = format!("{}/v1/messages/batches", s.base_url());
    let (_, batch) = send(anthropic(&c, reqwest::Method::POST, url).json(&one)).await;
    assert_eq!(wait_ended(&s, &c, batch["id"].as_str().unwrap()).await["request_counts"]["expired"], 1);
}
