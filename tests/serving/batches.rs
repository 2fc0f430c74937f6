//! Batch jobs end to end: a real router (its ledger store, its runner) in front of a fleet node
//! simulator. OpenAI's Files and Batches and Anthropic's Message Batches over HTTP, each line
//! run through the front door at batch priority on the fleet; what the providers refuse at
//! validation refused the same way; a job past its window expires with what finished; what
//! has been kept long enough is deleted, on both stores.

use std::time::Duration;

use serde_json::{json, Value};
use spillway::batch::retention::{sweep, Due, Swept};
use spillway::sim::{SimHandle, SimKind};

use crate::common::{self, router, sim, Router};

pub(super) const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn config(node: &str) -> String {
    format!(
        r#"
backends:
  - {{name: fleet, kind: vllm, endpoints: ["{node}"], model: {LLAMA}}}
tasks:
  - {{name: chat, backends: [fleet], slo: {{ttft_ms: 5000}}}}
batch: {{poll_ms: 20}}
"#
    )
}

/// An OpenAI input line for task `model`.
pub(super) fn line(id: &str, model: &str) -> Value {
    json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions",
           "body": {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": format!("question {id}")}]}})
}

/// `POST /v1/files` with `text` as the file, the way the SDKs send it.
pub(super) async fn upload(router: &Router, purpose: &str, text: &str) -> reqwest::Response {
    let (content_type, body) = spillway::batch::provider_api::file_form(purpose, "in.jsonl", text);
    reqwest::Client::new()
        .post(format!("{}/v1/files", router.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap()
}

pub(super) async fn post(router: &Router, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new().post(format!("{}{path}", router.url)).json(body).send().await.unwrap()
}

pub(super) async fn get(router: &Router, path: &str) -> reqwest::Response {
    reqwest::Client::new().get(format!("{}{path}", router.url)).send().await.unwrap()
}

/// Poll `path` until its JSON says `field` is one of `ended`.
pub(super) async fn wait_status(router: &Router, path: &str, field: &str, ended: &[&str]) -> Value {
    let seen = || async {
        let job: Value = get(router, path).await.json().await.unwrap();
        if ended.contains(&job[field].as_str().unwrap_or_default()) {
            Ok(job)
        } else {
            Err(job)
        }
    };
    common::wait_until(Duration::from_secs(30), format!("{path} to end"), seen).await
}

#[tokio::test]
async fn an_openai_batch_runs_on_the_fleet_and_reports_each_line() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let ledger = common::temp_ledger_url();
    let router = router(&format!("{}ledger: {{url: \"{ledger}\"}}\n", config(&node.base_url())), &[]).await;
    let mut lines: Vec<Value> = (0..6).map(|i| line(&format!("r{i}"), "chat")).collect();
    lines.push(line("lost", "no-such-task"));
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    let file: Value = upload(&router, "batch", &text.join("\n")).await.json().await.unwrap();
    assert_eq!((file["object"].as_str(), file["purpose"].as_str()), (Some("file"), Some("batch")), "{file}");

    let create = json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions",
                        "completion_window": "24h", "metadata": {"job": "nightly"}});
    let job: Value = post(&router, "/v1/batches", &create).await.json().await.unwrap();
    assert_eq!(job["status"], "validating", "{job}");
    assert_eq!(job["request_counts"]["total"], 7);
    let id = job["id"].as_str().unwrap().to_string();
    let job =
        wait_status(&router, &format!("/v1/batches/{id}"), "status", &["completed", "failed", "expired"])
            .await;
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["request_counts"], json!({"total": 7, "completed": 6, "failed": 1}));
    assert_eq!(job["metadata"]["job"], "nightly", "the client's own metadata: {job}");
    assert_eq!(job["metadata"]["spillway_route"], "fleet", "and where its lines went: {job}");
    for at in ["in_progress_at", "finalizing_at", "completed_at"] {
        assert!(job[at].as_i64().is_some(), "{at}: {job}");
    }

    let output =
        get(&router, &format!("/v1/files/{}/content", job["output_file_id"].as_str().unwrap())).await;
    let output: Vec<Value> =
        output.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ids: Vec<&str> = output.iter().map(|l| l["custom_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r0", "r1", "r2", "r3", "r4", "r5"], "every line once, in order");
    for l in &output {
        assert_eq!(l["response"]["status_code"], 200, "{l}");
        assert_eq!(l["response"]["body"]["model"], "chat", "{l}");
        assert!(l["response"]["body"]["choices"][0]["message"]["content"].is_string(), "{l}");
    }
    let errors = get(&router, &format!("/v1/files/{}/content", job["error_file_id"].as_str().unwrap())).await;
    let errors: Vec<Value> =
        errors.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0]["custom_id"].as_str(), errors[0]["response"]["status_code"].as_i64()),
        (Some("lost"), Some(404))
    );
    assert_eq!(errors[0]["response"]["body"]["error"]["code"], "model_not_found", "{}", errors[0]);

    // Each line ran through the pipeline at batch priority, on the fleet, and was counted.
    let metrics = common::metrics_text(&router.url).await;
    let served =
        common::series_sum(&metrics, "spillway_requests_total", &[("task", "chat"), ("backend", "fleet")]);
    assert_eq!(served, Some(6.0), "{metrics}");
    let ended =
        |labels: &[(&str, &str)]| common::series_sum(&metrics, "spillway_batch_lines_ended_total", labels);
    assert_eq!(
        ended(&[("task", "chat"), ("backend", "fleet"), ("state", "succeeded")]),
        Some(6.0),
        "{metrics}"
    );
    assert_eq!(ended(&[("task", "no-such-task"), ("state", "errored")]), Some(1.0), "{metrics}");
    // Each answered line is a ledger row at batch priority: what the report's batch spend reads.
    common::wait_ledger_written(&router).await;
    let rows = spillway::ledger::Store::open(&ledger).await.unwrap().query(0, i64::MAX).await.unwrap();
    let batch = rows.iter().filter(|r| r.priority == Some(spillway::config::Priority::Batch)).count();
    assert_eq!((rows.len(), batch), (6, 6), "{rows:#?}");
    let listed: Value = get(&router, "/v1/batches?limit=5").await.json().await.unwrap();
    assert_eq!(listed["data"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed["has_more"], false);
}

#[tokio::test]
async fn what_the_providers_refuse_at_validation_is_refused_naming_the_line() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let router = router(&config(&node.base_url()), &[]).await;
    let wrong_purpose = upload(&router, "fine-tune", &line("a", "chat").to_string()).await;
    assert_eq!(wrong_purpose.status(), 400);
    let error: Value = wrong_purpose.json().await.unwrap();
    assert_eq!(error["error"]["param"], "purpose", "{error}");

    let text = [line("a", "chat").to_string(), "{oops".into(), line("a", "chat").to_string()].join("\n");
    let file: Value = upload(&router, "batch", &text).await.json().await.unwrap();
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let job: Value = post(&router, "/v1/batches", &create).await.json().await.unwrap();
    assert_eq!(job["status"], "failed", "{job}");
    let problems: Vec<(i64, &str)> = job["errors"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_i64().unwrap(), e["code"].as_str().unwrap()))
        .collect();
    assert_eq!(problems, [(2, "invalid_json_line"), (3, "duplicate_custom_id")]);

    let unknown =
        json!({"input_file_id": "file-nope", "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    assert_eq!(post(&router, "/v1/batches", &unknown).await.status(), 404);
    let endpoint = json!({"input_file_id": file["id"], "endpoint": "/v1/images", "completion_window": "24h"});
    let refused: Value = post(&router, "/v1/batches", &endpoint).await.json().await.unwrap();
    assert_eq!(refused["error"]["param"], "endpoint", "{refused}");

    let twice = json!({"requests": [{"custom_id": "x", "params": {}}, {"custom_id": "x", "params": {}}]});
    let refused = post(&router, "/v1/messages/batches", &twice).await;
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["type"], "error", "Anthropic's envelope: {error}");
    assert!(error["error"]["message"].as_str().unwrap().starts_with("requests.1.custom_id"), "{error}");
}

#[tokio::test]
async fn an_anthropic_batch_ends_with_a_result_per_request_in_order() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let router = router(&config(&node.base_url()), &[]).await;
    let requests: Vec<Value> = (0..4)
        .map(|i| {
            json!({"custom_id": format!("m{i}"), "params": {"model": if i == 3 { "nope" } else { "chat" },
            "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]}})
        })
        .collect();
    let job: Value =
        post(&router, "/v1/messages/batches", &json!({"requests": requests})).await.json().await.unwrap();
    assert_eq!(
        (job["type"].as_str(), job["processing_status"].as_str()),
        (Some("message_batch"), Some("in_progress"))
    );
    let id = job["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("msgbatch_"), "{id}");
    let job =
        wait_status(&router, &format!("/v1/messages/batches/{id}"), "processing_status", &["ended"]).await;
    assert_eq!(
        job["request_counts"],
        json!({"processing": 0, "succeeded": 3, "errored": 1, "canceled": 0, "expired": 0}),
        "{job}"
    );
    let results = get(&router, job["results_url"].as_str().unwrap()).await;
    assert_eq!(results.headers()["content-type"], "application/x-jsonl");
    let results: Vec<Value> =
        results.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<(&str, &str)> = results
        .iter()
        .map(|r| (r["custom_id"].as_str().unwrap(), r["result"]["type"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("m0", "succeeded"), ("m1", "succeeded"), ("m2", "succeeded"), ("m3", "errored")]);
    assert_eq!(results[0]["result"]["message"]["type"], "message", "{}", results[0]);
    assert_eq!(results[3]["result"]["error"]["type"], "error", "Anthropic's envelope: {}", results[3]);
}

#[tokio::test]
async fn a_job_past_its_window_expires_with_what_finished() {
    // A node too slow for the window: the first lines finish, the rest expire.
    let node = sim(SimKind::Vllm, LLAMA, |a| a.token_delay_ms = 300).await;
    let router =
        router(&config(&node.base_url()).replace("poll_ms: 20", "poll_ms: 20, max_per_node: 1"), &[]).await;
    let text: Vec<String> = (0..20).map(|i| line(&format!("r{i}"), "chat").to_string()).collect();
    let file: Value = upload(&router, "batch", &text.join("\n")).await.json().await.unwrap();
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "2s"});
    let job: Value = post(&router, "/v1/batches", &create).await.json().await.unwrap();
    let id = job["id"].as_str().unwrap();
    let job = wait_status(&router, &format!("/v1/batches/{id}"), "status", &["completed", "expired"]).await;
    assert_eq!(job["status"], "expired", "{job}");
    let done = job["request_counts"]["completed"].as_i64().unwrap();
    assert!((1..20).contains(&done), "{job}");
    assert_eq!(job["request_counts"]["failed"].as_i64().unwrap(), 20 - done);
    let errors = get(&router, &format!("/v1/files/{}/content", job["error_file_id"].as_str().unwrap())).await;
    let errors = errors.text().await.unwrap();
    assert_eq!(errors.lines().count() as i64, 20 - done);
    assert!(errors.lines().all(|l| l.contains("batch_expired")), "{errors}");
}

/// Create an OpenAI job of `n` chat lines; its id.
async fn openai_job(router: &Router, n: usize) -> String {
    let text: Vec<String> = (0..n).map(|i| line(&format!("r{i}"), "chat").to_string()).collect();
    let file: Value = upload(router, "batch", &text.join("\n")).await.json().await.unwrap();
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let job: Value = post(router, "/v1/batches", &create).await.json().await.unwrap();
    job["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn jobs_run_and_page_on_both_stores() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let mut stores = vec![common::temp_ledger_url()];
    stores.extend(common::pg_store_url("batches").await);
    for store in stores {
        let yaml = format!("{}ledger: {{url: \"{store}\"}}\n", config(&node.base_url()));
        let router = router(&yaml, &[]).await;
        let first = openai_job(&router, 3).await;
        let second = openai_job(&router, 2).await;
        for id in [&first, &second] {
            let job =
                wait_status(&router, &format!("/v1/batches/{id}"), "status", &["completed", "failed"]).await;
            assert_eq!(job["status"], "completed", "{store}: {job}");
        }
        // Newest first, a page at a time.
        let page: Value = get(&router, "/v1/batches?limit=1").await.json().await.unwrap();
        assert_eq!(
            (page["data"][0]["id"].as_str(), page["has_more"].as_bool()),
            (Some(second.as_str()), Some(true))
        );
        let next: Value =
            get(&router, &format!("/v1/batches?limit=1&after={second}")).await.json().await.unwrap();
        assert_eq!(
            (next["data"][0]["id"].as_str(), next["has_more"].as_bool()),
            (Some(first.as_str()), Some(false))
        );

        // Retention: nothing is due yet; a month on, the jobs go with their lines and files.
        let kept = spillway::ledger::Store::open(&store).await.unwrap();
        let now = spillway::ledger::unix_millis(std::time::SystemTime::now());
        assert_eq!(sweep(&kept, Due::at(now, 30)).await.unwrap(), Swept::default(), "{store}");
        let job: Value = get(&router, &format!("/v1/batches/{first}")).await.json().await.unwrap();
        let swept = sweep(&kept, Due::at(now + 31 * 86_400_000, 30)).await.unwrap();
        assert_eq!(swept, Swept { files: 2, jobs: 2 }, "{store}");
        let (input, output) =
            (job["input_file_id"].as_str().unwrap(), job["output_file_id"].as_str().unwrap());
        for path in
            [format!("/v1/batches/{first}"), format!("/v1/files/{input}"), format!("/v1/files/{output}")]
        {
            assert_eq!(get(&router, &path).await.status(), 404, "{store}: {path}");
        }
        let lines = spillway::batch::store::counts(&kept, &first).await.unwrap();
        assert_eq!(lines, Default::default(), "{store}: its lines are gone");
        kept.close().await;
    }
}

/// A router over one fleet node and an OpenAI backend (`hosted`: more of its keys) that
/// spills a job at risk at once (`tail`: more top-level config).
pub(super) fn spill_config(node: &SimHandle, openai: &SimHandle, hosted: &str, tail: &str) -> String {
    format!(
        r#"
backends:
  - {{name: fleet, kind: vllm, endpoints: ["{}"], model: {LLAMA}}}
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6, {hosted}}}
tasks:
  - {{name: chat, backends: [fleet, hosted], slo: {{ttft_ms: 5000}}}}
batch: {{poll_ms: 20, max_per_node: 1, hosted_batch_lead_secs: 1}}
{tail}
"#,
        node.base_url(),
        openai.base_url()
    )
}

/// A job of 30 lines with a 30 s window: too many for one slow fleet node in time.
async fn slow_job(router: &Router) -> String {
    let text: Vec<String> = (0..30).map(|i| line(&format!("r{i}"), "chat").to_string()).collect();
    let file: Value = upload(router, "batch", &text.join("\n")).await.json().await.unwrap();
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "30s"});
    let job: Value = post(router, "/v1/batches", &create).await.json().await.unwrap();
    job["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_job_too_big_for_its_window_on_the_fleet_goes_to_the_hosted_batch_api() {
    // One slow line at a time on the fleet: 30 lines would take far longer than the window.
    let node = sim(SimKind::Vllm, LLAMA, |a| a.token_delay_ms = 200).await;
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |a| a.batch_delay_ms = 100).await;
    let ledger = common::temp_ledger_url();
    let hosted = "price: {input_per_mtok: 2, output_per_mtok: 8}";
    let router =
        router(&spill_config(&node, &openai, hosted, &format!("ledger: {{url: \"{ledger}\"}}")), &[]).await;
    let id = &slow_job(&router).await;
    let job = wait_status(&router, &format!("/v1/batches/{id}"), "status", &["completed", "expired"]).await;
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["request_counts"], json!({"total": 30, "completed": 30, "failed": 0}));
    assert_eq!(job["metadata"]["spillway_route"], "hosted_batch", "{job}");
    assert!(job["metadata"]["spillway_plan"].as_str().unwrap().contains("hosted batch API"), "{job}");

    // The provider got one batch of the lines the fleet had not started, with its own model.
    let batches: Value =
        reqwest::get(format!("{}/v1/batches", openai.base_url())).await.unwrap().json().await.unwrap();
    let sent = batches["data"].as_array().unwrap();
    assert_eq!(sent.len(), 1, "{batches}");
    let spilled = sent[0]["request_counts"]["total"].as_i64().unwrap();
    assert!((20..=30).contains(&spilled), "most lines went to the provider: {batches}");
    let output =
        get(&router, &format!("/v1/files/{}/content", job["output_file_id"].as_str().unwrap())).await;
    let output: Vec<Value> =
        output.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(output.len(), 30, "every line once");
    assert!(
        output.iter().all(|l| l["response"]["body"]["model"] == "chat"),
        "the client's model, wherever it ran"
    );

    // The provider's answers are in the ledger at batch priority, at half the list price.
    common::wait_ledger_written(&router).await;
    let rows = spillway::ledger::Store::open(&ledger).await.unwrap().query(0, i64::MAX).await.unwrap();
    let hosted: Vec<_> = rows.iter().filter(|r| r.backend == "hosted").collect();
    assert_eq!(hosted.len() as i64, spilled, "{rows:#?}");
    for r in hosted {
        assert_eq!(r.priority, Some(spillway::config::Priority::Batch));
        assert!(r.input_tokens > 0 && r.output_tokens > 0, "usage read from the provider's answer: {r:?}");
        let list = rust_decimal::Decimal::from(r.input_tokens * 2 + r.output_tokens * 8)
            / rust_decimal::Decimal::from(1_000_000);
        assert_eq!(r.cost_usd, Some(list / rust_decimal::Decimal::from(2)), "{r:?}");
    }
}

#[tokio::test]
async fn cancelling_a_spilled_job_cancels_the_providers_batch_and_ends_its_lines() {
    // The provider's batch would take a minute: the job ends well before, cancelled.
    let node = sim(SimKind::Vllm, LLAMA, |a| a.token_delay_ms = 200).await;
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |a| a.batch_delay_ms = 60_000).await;
    let router = router(&spill_config(&node, &openai, "", ""), &[]).await;
    let id = slow_job(&router).await;
    // The provider has the lines once the plan says so.
    let sent = || async {
        let batches: Value =
            reqwest::get(format!("{}/v1/batches", openai.base_url())).await.unwrap().json().await.unwrap();
        match batches["data"].as_array().and_then(|d| d.first()).cloned() {
            Some(b) => Ok(b),
            None => Err(batches),
        }
    };
    let provider = common::wait_until(Duration::from_secs(30), "the lines at the provider", sent).await;
    let provider_id = provider["id"].as_str().unwrap().to_string();

    let cancelled = post(&router, &format!("/v1/batches/{id}/cancel"), &json!({})).await;
    assert_eq!(cancelled.status(), 200);
    let job = wait_status(&router, &format!("/v1/batches/{id}"), "status", &["cancelled"]).await;
    let stopped: Value = reqwest::get(format!("{}/v1/batches/{provider_id}", openai.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(matches!(stopped["status"].as_str(), Some("cancelling" | "cancelled")), "{stopped}");
    let counts = &job["request_counts"];
    assert_eq!(counts["total"], 30, "{job}");
    assert_eq!(
        counts["completed"].as_i64().unwrap() + counts["failed"].as_i64().unwrap(),
        30,
        "every line ended once: {job}"
    );
    let errors = get(&router, &format!("/v1/files/{}/content", job["error_file_id"].as_str().unwrap())).await;
    let errors: Vec<Value> =
        errors.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let spilled = provider["request_counts"]["total"].as_u64().unwrap() as usize;
    let cancelled = errors.iter().filter(|l| l["error"]["code"] == "batch_cancelled").count();
    assert!(cancelled >= spilled, "the provider's lines end cancelled: {cancelled} of {spilled}");
}
