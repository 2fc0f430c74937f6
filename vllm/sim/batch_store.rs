//! What the simulated batch APIs share: their in-memory state (OpenAI's files, either
//! provider's batches as wire JSON, Anthropic's results), the batch clock (`--batch-delay-ms`,
//! `--batch-expire`, cancellation) and the one way a batch line is answered: through the
//! realtime route handler its URL names, so a batch answer is exactly the non-streamed answer
//! of the same request. A line's `metadata.sim_fault` (the `x-sim-fault` directives, e.g.
//! `status=500`) is sent as that header, so the line fails as a realtime request would.
//! The wire modules (`files_openai.rs`, `batches_openai.rs`, `batches_anthropic.rs`) shape it.

use super::faults::FAULT_HEADER;
use super::server::AppState;
use super::{anthropic_wire, completions_wire, embeddings_wire, openai_wire, responses_wire, SimKind};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// The endpoints an OpenAI batch may target.
pub const OPENAI_ENDPOINTS: [&str; 4] =
    ["/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"];

/// A stored file: its wire object and its bytes.
#[derive(Clone)]
pub struct StoredFile {
    pub object: Value,
    pub content: Bytes,
}

struct StoredBatch {
    object: Value,
    cancel: Arc<Notify>,
    results: Option<Bytes>,
}

/// How a batch's wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Its turn came: answer the lines.
    Run,
    /// Cancelled before its turn.
    Cancelled,
    /// `--batch-expire`: the window passed with nothing done.
    Expired,
}

/// One request of a batch.
#[derive(Clone, Debug)]
pub struct Line {
    pub custom_id: String,
    pub url: String,
    pub body: Value,
}

/// What the realtime route answered for a line.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub request_id: String,
}

/// Files and batches of one simulator, oldest first.
#[derive(Default)]
pub struct BatchStore {
    /// `--batch-delay-ms`: how long a batch waits before its lines are answered.
    pub delay: Duration,
    /// `--batch-expire`: batches expire instead of completing.
    pub expire: bool,
    files: Mutex<Vec<(String, StoredFile)>>,
    batches: Mutex<Vec<(String, StoredBatch)>>,
    seq: AtomicU64,
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl BatchStore {
    pub fn new(delay: Duration, expire: bool) -> BatchStore {
        BatchStore { delay, expire, ..BatchStore::default() }
    }

    /// A fresh id: `prefix` then 24 hex digits.
    pub fn new_id(&self, prefix: &str) -> String {
        format!("{prefix}sim{:021x}", self.seq.fetch_add(1, Ordering::Relaxed) + 1)
    }

    pub fn put_file(&self, id: &str, file: StoredFile) {
        self.files.lock().expect("files").push((id.to_string(), file));
    }

    pub fn file(&self, id: &str) -> Option<StoredFile> {
        self.files.lock().expect("files").iter().find(|(i, _)| i == id).map(|(_, f)| f.clone())
    }

    pub fn delete_file(&self, id: &str) -> bool {
        let mut files = self.files.lock().expect("files");
        let before = files.len();
        files.retain(|(i, _)| i != id);
        files.len() != before
    }

    /// Keep a new batch (its wire object carries `id`); the notifier wakes it on cancel.
    pub fn insert(&self, object: Value) -> Arc<Notify> {
        let id = object["id"].as_str().unwrap_or_default().to_string();
        let cancel = Arc::new(Notify::new());
        let batch = StoredBatch { object, cancel: Arc::clone(&cancel), results: None };
        self.batches.lock().expect("batches").push((id, batch));
        cancel
    }

    pub fn get(&self, id: &str) -> Option<Value> {
        self.update(id, |_| ())
    }

    /// Change a batch's wire object; the changed object, `None` for an unknown id.
    pub fn update(&self, id: &str, change: impl FnOnce(&mut Value)) -> Option<Value> {
        let mut batches = self.batches.lock().expect("batches");
        let (_, b) = batches.iter_mut().find(|(i, _)| i == id)?;
        change(&mut b.object);
        Some(b.object.clone())
    }

    /// Wake a batch that waits for its turn (it then ends as cancelled).
    pub fn cancel(&self, id: &str) {
        if let Some((_, b)) = self.batches.lock().expect("batches").iter().find(|(i, _)| i == id) {
            b.cancel.notify_one();
        }
    }

    pub fn remove(&self, id: &str) -> Option<Value> {
        let mut batches = self.batches.lock().expect("batches");
        let at = batches.iter().position(|(i, _)| i == id)?;
        Some(batches.remove(at).1.object)
    }

    pub fn set_results(&self, id: &str, jsonl: Bytes) {
        if let Some((_, b)) = self.batches.lock().expect("batches").iter_mut().find(|(i, _)| i == id) {
            b.results = Some(jsonl);
        }
    }

    pub fn results(&self, id: &str) -> Option<Bytes> {
        let batches = self.batches.lock().expect("batches");
        batches.iter().find(|(i, _)| i == id).and_then(|(_, b)| b.results.clone())
    }

    /// Newest first: up to `limit` batches after `after` (older than it) or before `before`
    /// (newer than it), and whether more lie beyond the page.
    pub fn page(&self, after: Option<&str>, before: Option<&str>, limit: usize) -> (Vec<Value>, bool) {
        let batches = self.batches.lock().expect("batches");
        let newest_first: Vec<&(String, StoredBatch)> = batches.iter().rev().collect();
        let at = |id: &str| newest_first.iter().position(|(i, _)| i == id);
        let (from, to) = match (after.and_then(at), before.and_then(at)) {
            (Some(a), _) => (a + 1, newest_first.len()),
            (None, Some(b)) => (b.saturating_sub(limit), b),
            (None, None) => (0, newest_first.len()),
        };
        let window = &newest_first[from..to];
        let page: Vec<Value> = window.iter().take(limit).map(|(_, b)| b.object.clone()).collect();
        let more = if before.is_some() && after.is_none() { from > 0 } else { window.len() > limit };
        (page, more)
    }

    /// Wait for a batch's turn: `--batch-delay-ms`, unless it is cancelled first.
    pub async fn wait_turn(&self, cancel: &Notify) -> Ending {
        tokio::select! {
            _ = tokio::time::sleep(self.delay) => {
                if self.expire { Ending::Expired } else { Ending::Run }
            }
            _ = cancel.notified() => Ending::Cancelled,
        }
    }
}

/// Answer every line at once, in order, through the realtime routes.
pub async fn answer_all(st: &Arc<AppState>, lines: &[Line]) -> Vec<Answer> {
    futures::future::join_all(lines.iter().map(|l| answer(st, l))).await
}

/// Answer one line as its realtime route would, not streamed.
pub async fn answer(st: &Arc<AppState>, line: &Line) -> Answer {
    let mut headers = HeaderMap::new();
    if let Some(key) = st.api_key.as_deref().and_then(|k| HeaderValue::from_str(k).ok()) {
        headers.insert("x-api-key", key);
    }
    if let Some(key) = st.api_key.as_deref().and_then(|k| HeaderValue::from_str(&format!("Bearer {k}")).ok())
    {
        headers.insert(header::AUTHORIZATION, key);
    }
    headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    let fault = line.body.pointer("/metadata/sim_fault").and_then(Value::as_str);
    if let Some(fault) = fault.and_then(|f| HeaderValue::from_str(f).ok()) {
        headers.insert(FAULT_HEADER, fault);
    }
    let mut body = line.body.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("stream");
        o.remove("stream_options");
    }
    let bytes = Bytes::from(body.to_string());
    let state = State(Arc::clone(st));
    let resp = match (st.kind, line.url.as_str()) {
        (SimKind::Anthropic, _) => anthropic_wire::messages(state, headers, bytes).await,
        (_, "/v1/embeddings") => embeddings_wire::embeddings(state, headers, bytes).await,
        (_, "/v1/completions") => completions_wire::completions(state, headers, bytes).await,
        (_, "/v1/responses") => responses_wire::responses(state, headers, bytes).await,
        _ => openai_wire::chat(state, headers, bytes).await,
    };
    let status = resp.status().as_u16();
    let request_id = match resp.headers().get("request-id").and_then(|v| v.to_str().ok()) {
        Some(id) => id.to_string(),
        None => st.batches.new_id("req_"),
    };
    let (status, body) = match axum::body::to_bytes(resp.into_body(), usize::MAX).await {
        Ok(b) => (status, serde_json::from_slice(&b).unwrap_or(Value::Null)),
        // A reply cut mid-flight (`drop_after`, `hang` at shutdown): a server error.
        Err(_) => (500, json!({"error": {"message": "connection closed mid-reply (simulated)"}})),
    };
    Answer { status, body, request_id }
}

/// Whether two lines share a `custom_id`: the first repeated one.
pub fn duplicate_id(lines: &[Line]) -> Option<&str> {
    let mut seen = HashSet::new();
    lines.iter().find(|l| !seen.insert(l.custom_id.as_str())).map(|l| l.custom_id.as_str())
}
