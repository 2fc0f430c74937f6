//! What the simulated batch APIs share: their in-memory state (OpenAI's files, either
//! provider's batches as wire JSON, Anthropic's results) and the batch clock
//! (`--batch-delay-ms`, `--batch-expire`, cancellation). Each line is answered by its realtime
//! route (`batch_lines.rs`); the wire modules (`files_openai.rs`, `batches_openai.rs`,
//! `batches_anthropic.rs`) shape it.

use axum::body::Bytes;
use serde_json::Value;
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

/// Whether two lines share a `custom_id`: the first repeated one.
pub fn duplicate_id(lines: &[Line]) -> Option<&str> {
    let mut seen = HashSet::new();
    lines.iter().find(|l| !seen.insert(l.custom_id.as_str())).map(|l| l.custom_id.as_str())
}
