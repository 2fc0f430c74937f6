//! The providers' own batch APIs, for the lines of a job at risk of missing its window: OpenAI's
//! Files and Batch API (upload the JSONL, create the batch, poll it, read its output and error
//! files) and Anthropic's Message Batches (create, poll, read the results). Only the wire:
//! which lines go and what their answers become is `batch::spill`'s. An error says what failed
//! and the status, never an upstream's text (it may echo the request's key); the results (an
//! output file's answers, an error file's errors) come cut of every secret, as the realtime
//! path's errors are (`adapter::redact`).

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Value};

pub use crate::adapter::provider::BatchWire;
use crate::adapter::redact::{CallRedactor, Redactor};
use crate::adapter::Upstream;
use crate::config::BackendId;
use crate::dispatch::Dispatcher;
use crate::snapshot::Snapshot;

/// One provider's batch API, as one backend reaches it.
#[derive(Clone)]
pub struct BatchApi {
    client: reqwest::Client,
    /// The backend's first node (`base_url`: OpenAI's ends in `/v1`, Anthropic's does not)
    /// and key.
    upstream: Upstream,
    wire: BatchWire,
    /// The router's secrets, which no result carries (nor the key above).
    redactor: Arc<Redactor>,
}

/// One line's answer from a provider's batch: its status (0: never answered, the batch
/// expired or was cancelled first) and body.
#[derive(Debug, Clone, PartialEq)]
pub struct LineResult {
    pub custom_id: String,
    pub status: u16,
    pub body: Value,
}

/// A provider batch polled: still running, or ended with every line's result it has.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled {
    Running,
    Ended(Vec<LineResult>),
}

impl BatchApi {
    /// The batch API of hosted backend `backend`, through the dispatcher's hosted client and
    /// with its key; none if its provider runs none.
    pub fn of(dispatcher: &Dispatcher, snap: &Snapshot, backend: BackendId) -> Option<BatchApi> {
        let wire = snap.backends[backend].provider.batch()?;
        let (client, upstream, redactor) = dispatcher.beside(snap, backend)?;
        Some(BatchApi { client, upstream, wire, redactor })
    }

    fn url(&self, path: &str) -> String {
        let base = self.upstream.base_url.trim_end_matches('/');
        match self.wire {
            BatchWire::Anthropic => format!("{base}/v1{path}"),
            _ => format!("{base}{path}"),
        }
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, url);
        match (&self.upstream.api_key, self.wire) {
            (Some(key), BatchWire::Anthropic) => {
                r.header("x-api-key", key).header("anthropic-version", "2023-06-01")
            }
            (None, BatchWire::Anthropic) => r.header("anthropic-version", "2023-06-01"),
            (Some(key), _) => r.header(AUTHORIZATION, format!("Bearer {key}")),
            (None, _) => r,
        }
    }

    async fn json(&self, what: &str, request: reqwest::RequestBuilder) -> Result<Value, String> {
        let response = request.send().await.map_err(|e| format!("{what}: {}", e.without_url()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{what}: the provider answered {status}"));
        }
        response.json().await.map_err(|_| format!("{what}: the provider's answer is not JSON"))
    }

    async fn text(&self, what: &str, url: &str) -> Result<String, String> {
        let response = self
            .request(reqwest::Method::GET, url)
            .send()
            .await
            .map_err(|e| format!("{what}: {}", e.without_url()))?;
        if !response.status().is_success() {
            return Err(format!("{what}: the provider answered {}", response.status()));
        }
        response.text().await.map_err(|e| format!("{what}: {}", e.without_url()))
    }

    /// Send `lines` (custom id, request body with the provider's model) as one batch on
    /// `endpoint`; the provider's batch id.
    pub async fn submit(&self, endpoint: &str, lines: &[(String, Value)]) -> Result<String, String> {
        let created = match self.wire {
            BatchWire::Anthropic => {
                let requests: Vec<Value> =
                    lines.iter().map(|(id, body)| json!({"custom_id": id, "params": body})).collect();
                let create = self.request(reqwest::Method::POST, &self.url("/messages/batches"));
                self.json("creating the message batch", create.json(&json!({"requests": requests}))).await?
            }
            _ => {
                let jsonl: Vec<String> = lines
                    .iter()
                    .map(|(id, body)| {
                        json!({"custom_id": id, "method": "POST", "url": endpoint, "body": body}).to_string()
                    })
                    .collect();
                let (content_type, form) = file_form("batch", "spillway.jsonl", &jsonl.join("\n"));
                let upload = self
                    .request(reqwest::Method::POST, &self.url("/files"))
                    .header(CONTENT_TYPE, content_type)
                    .body(form);
                let file = self.json("uploading the batch file", upload).await?;
                let file_id = file["id"].as_str().ok_or("uploading the batch file: no file id")?;
                let body =
                    json!({"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"});
                let create = self.request(reqwest::Method::POST, &self.url("/batches")).json(&body);
                self.json("creating the batch", create).await?
            }
        };
        created["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "creating the batch: no batch id".to_string())
    }

    /// Ask the provider to stop batch `id`: it ends with what it answered, read back by `poll`.
    pub async fn cancel(&self, id: &str) -> Result<(), String> {
        let path = match self.wire {
            BatchWire::Anthropic => format!("/messages/batches/{id}/cancel"),
            _ => format!("/batches/{id}/cancel"),
        };
        self.json("cancelling the batch", self.request(reqwest::Method::POST, &self.url(&path)))
            .await
            .map(|_| ())
    }

    /// Where the provider's batch `id` stands; its results once it has ended, every text in
    /// them cut of the router's secrets and this backend's key.
    pub async fn poll(&self, id: &str) -> Result<Polled, String> {
        let polled = self.poll_raw(id).await?;
        let redactor = CallRedactor::new(Arc::clone(&self.redactor), &self.upstream);
        let scrub = redactor.resolve();
        Ok(match polled {
            Polled::Running => Polled::Running,
            Polled::Ended(mut results) => {
                results.iter_mut().for_each(|r| scrub.json(&mut r.body));
                Polled::Ended(results)
            }
        })
    }

    /// [`BatchApi::poll`], the results as the provider wrote them.
    async fn poll_raw(&self, id: &str) -> Result<Polled, String> {
        match self.wire {
            BatchWire::Anthropic => {
                let path = format!("/messages/batches/{id}");
                let batch = self
                    .json("reading the message batch", self.request(reqwest::Method::GET, &self.url(&path)))
                    .await?;
                if batch["processing_status"] != "ended" {
                    return Ok(Polled::Running);
                }
                let results_url = match batch["results_url"].as_str() {
                    Some(url) if url.starts_with("http") => url.to_string(),
                    _ => self.url(&format!("/messages/batches/{id}/results")),
                };
                let text = self.text("reading the message batch's results", &results_url).await?;
                Ok(Polled::Ended(text.lines().filter_map(anthropic_result).collect()))
            }
            _ => {
                let batch = self
                    .json(
                        "reading the batch",
                        self.request(reqwest::Method::GET, &self.url(&format!("/batches/{id}"))),
                    )
                    .await?;
                if !matches!(batch["status"].as_str(), Some("completed" | "expired" | "cancelled" | "failed"))
                {
                    return Ok(Polled::Running);
                }
                let mut results = Vec::new();
                for file in ["output_file_id", "error_file_id"] {
                    if let Some(file_id) = batch[file].as_str() {
                        let text = self
                            .text(
                                "reading the batch's results",
                                &self.url(&format!("/files/{file_id}/content")),
                            )
                            .await?;
                        results.extend(text.lines().filter_map(openai_result));
                    }
                }
                Ok(Polled::Ended(results))
            }
        }
    }
}

/// A Files API upload of `text` as `filename` for `purpose`, as the SDKs send it: its
/// `content-type` (multipart/form-data with its boundary) and body.
pub fn file_form(purpose: &str, filename: &str, text: &str) -> (String, String) {
    let boundary = format!("spillway{:016x}", rand::random::<u64>());
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         Content-Type: application/jsonl\r\n\r\n{text}\r\n--{boundary}--\r\n"
    );
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// An OpenAI output or error line.
fn openai_result(line: &str) -> Option<LineResult> {
    let v: Value = serde_json::from_str(line).ok()?;
    let custom_id = v["custom_id"].as_str()?.to_string();
    match v["response"]["status_code"].as_u64() {
        Some(status) => {
            Some(LineResult { custom_id, status: status as u16, body: v["response"]["body"].clone() })
        }
        None => Some(LineResult { custom_id, status: 0, body: json!({"error": v["error"]}) }),
    }
}

/// An Anthropic results line.
fn anthropic_result(line: &str) -> Option<LineResult> {
    let v: Value = serde_json::from_str(line).ok()?;
    let custom_id = v["custom_id"].as_str()?.to_string();
    let result = &v["result"];
    let (status, body) = match result["type"].as_str()? {
        "succeeded" => (200, result["message"].clone()),
        "errored" => {
            let kind = result["error"]["error"]["type"].as_str().unwrap_or("api_error");
            (if kind == "invalid_request_error" { 400 } else { 500 }, result["error"].clone())
        }
        other => (0, json!({"type": other})),
    };
    Some(LineResult { custom_id, status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_result_lines_read_back() {
        let ok = r#"{"id":"r","custom_id":"a","response":{"status_code":200,"request_id":"x","body":{"id":"c"}},"error":null}"#;
        assert_eq!(
            openai_result(ok),
            Some(LineResult { custom_id: "a".into(), status: 200, body: json!({"id": "c"}) })
        );
        let expired =
            r#"{"id":"r","custom_id":"b","response":null,"error":{"code":"batch_expired","message":"m"}}"#;
        assert_eq!(openai_result(expired).unwrap().status, 0);
        let message = r#"{"custom_id":"m","result":{"type":"succeeded","message":{"id":"msg"}}}"#;
        assert_eq!(anthropic_result(message).unwrap().body, json!({"id": "msg"}));
        let refused = r#"{"custom_id":"m","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"x"}}}}"#;
        assert_eq!(anthropic_result(refused).unwrap().status, 400);
        assert_eq!(anthropic_result(r#"{"custom_id":"m","result":{"type":"expired"}}"#).unwrap().status, 0);
        assert!(BatchWire::OpenAi.serves("/v1/embeddings"));
        assert!(!BatchWire::OpenAi.serves("/v1/messages"));
        assert!(BatchWire::Anthropic.serves("/v1/messages"));
        assert!(!BatchWire::Anthropic.serves("/v1/chat/completions"));
    }
}
