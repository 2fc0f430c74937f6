//! A batch line's status, answer and backend are the pipeline's, in the line's dialect: the
//! job's owner is held to its key's tasks (a line for a task the key may not use ends with the
//! dialect's permission refusal and no backend), and a served line records the backend its
//! answer committed to (in the ledger, the batch metrics and the job's results).

use serde_json::{json, Value};
use spillway::sim::SimKind;

use super::batches::LLAMA;
use crate::common::{self, router, sim, Router};

const KEYS: &[(&str, &str)] = &[("KEY_A", "sk-a"), ("KEY_B", "sk-b")];

fn config(node: &str, ledger: &str) -> String {
    format!(
        r#"
client_keys_env: [KEY_A, KEY_B]
ledger: {{url: "{ledger}"}}
backends:
  - {{name: fleet, kind: vllm, endpoints: ["{node}"], model: {LLAMA}}}
tasks:
  - {{name: chat, backends: [fleet], slo: {{ttft_ms: 5000}}}}
  - {{name: b-only, backends: [fleet], slo: {{ttft_ms: 5000}}, allowed_keys: [KEY_B]}}
batch: {{poll_ms: 20}}
"#
    )
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post_as(router: &Router, key: &str, path: &str, body: &Value) -> Value {
    let r = client().post(format!("{}{path}", router.url)).bearer_auth(key).json(body).send().await.unwrap();
    r.json().await.unwrap()
}

async fn get_as(router: &Router, key: &str, path: &str) -> reqwest::Response {
    client().get(format!("{}{path}", router.url)).bearer_auth(key).send().await.unwrap()
}

fn jsonl(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn a_line_is_held_to_its_owners_tasks_and_records_the_backend_that_served_it() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let ledger = common::temp_ledger_url();
    let router = router(&config(&node.base_url(), &ledger), KEYS).await;

    // OpenAI's batches: key A's job asks for its own task and for one only key B may use.
    let lines: Vec<String> = [("mine", "chat"), ("theirs", "b-only")]
        .iter()
        .map(|(id, task)| {
            json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": task, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}})
            .to_string()
        })
        .collect();
    let (content_type, form) =
        spillway::batch::provider_api::file_form("batch", "in.jsonl", &lines.join("\n"));
    let file: Value = client()
        .post(format!("{}/v1/files", router.url))
        .bearer_auth("sk-a")
        .header("content-type", content_type)
        .body(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let job = post_as(&router, "sk-a", "/v1/batches", &create).await;
    let path = format!("/v1/batches/{}", job["id"].as_str().unwrap());
    let seen = || async {
        let job: Value = get_as(&router, "sk-a", &path).await.json().await.unwrap();
        if job["status"] == "completed" {
            Ok(job)
        } else {
            Err(job)
        }
    };
    let job = common::wait_until(std::time::Duration::from_secs(30), "the job to complete", seen).await;
    let file = |id: &Value| format!("/v1/files/{}/content", id.as_str().unwrap());
    let output = jsonl(&get_as(&router, "sk-a", &file(&job["output_file_id"])).await.text().await.unwrap());
    assert_eq!((output.len(), output[0]["custom_id"].as_str()), (1, Some("mine")), "{output:?}");
    assert_eq!(output[0]["response"]["status_code"], 200);
    let errors = jsonl(&get_as(&router, "sk-a", &file(&job["error_file_id"])).await.text().await.unwrap());
    assert_eq!((errors.len(), errors[0]["custom_id"].as_str()), (1, Some("theirs")), "{errors:?}");
    assert_eq!(errors[0]["response"]["status_code"], 403, "{}", errors[0]);
    assert_eq!(errors[0]["response"]["body"]["error"]["type"], "permission_error", "{}", errors[0]);

    // Anthropic's: the same refusal in Anthropic's envelope.
    let requests: Vec<Value> = ["chat", "b-only"]
        .iter()
        .map(|task| {
            json!({"custom_id": task, "params": {"model": task, "max_tokens": 4,
                                                         "messages": [{"role": "user", "content": "hi"}]}})
        })
        .collect();
    let job = post_as(&router, "sk-a", "/v1/messages/batches", &json!({"requests": requests})).await;
    let path = format!("/v1/messages/batches/{}", job["id"].as_str().unwrap());
    let seen = || async {
        let job: Value = get_as(&router, "sk-a", &path).await.json().await.unwrap();
        if job["processing_status"] == "ended" {
            Ok(job)
        } else {
            Err(job)
        }
    };
    let job = common::wait_until(std::time::Duration::from_secs(30), "the message batch to end", seen).await;
    let results =
        jsonl(&get_as(&router, "sk-a", job["results_url"].as_str().unwrap()).await.text().await.unwrap());
    let kinds: Vec<&str> = results.iter().map(|r| r["result"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["succeeded", "errored"], "{results:?}");
    assert_eq!(results[1]["result"]["error"]["type"], "error", "Anthropic's envelope: {}", results[1]);
    assert_eq!(results[1]["result"]["error"]["error"]["type"], "permission_error", "{}", results[1]);

    // The served lines name the backend their answers committed to; the refused ones none.
    let metrics = common::metrics_text(&router.url).await;
    let ended =
        |labels: &[(&str, &str)]| common::series_sum(&metrics, "spillway_batch_lines_ended_total", labels);
    assert_eq!(
        ended(&[("task", "chat"), ("backend", "fleet"), ("state", "succeeded")]),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(ended(&[("task", "b-only"), ("backend", ""), ("state", "errored")]), Some(2.0), "{metrics}");
    common::wait_ledger_written(&router).await;
    let rows = spillway::ledger::Store::open(&ledger).await.unwrap().query(0, i64::MAX).await.unwrap();
    let served: Vec<(&str, Option<&str>)> =
        rows.iter().map(|r| (r.backend.as_str(), r.client_key.as_deref())).collect();
    assert_eq!(served, [("fleet", Some("KEY_A")), ("fleet", Some("KEY_A"))], "{rows:#?}");
}
