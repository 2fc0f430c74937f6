//! Canaries for untested exits: on an interval, one small synthetic request to every fallback
//! backend (a backend listed after the first in some task), through the same policy filter and
//! dispatch as live traffic, so that a backend that has served nothing for months is known to
//! work, or known broken, before an outage needs it. A backend with an `embedding_space` is
//! probed with an embeddings request (the prompt, embedded), the only kind it serves.
//!
//! A canary goes out as the first task that lists the backend as a fallback and whose data
//! class allows it; a backend no task may send data to is never probed. It is a synthetic
//! call ([`Purpose::Canary`]) to the probed backend alone, so it never retries elsewhere; it
//! is ledgered (it costs money, under the client key name `canary`) and counted in
//! `spillway_canaries_total`, but kept out of the request metrics and SLO windows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::canonical::{
    BackendName, ChatRequest, Embedding, EncodingFormat, Input, Message, Operation, Role,
};
use crate::config::{BackendId, TaskId};
use crate::dispatch::synthetic::{Destination, Purpose, SyntheticCall};
use crate::dispatch::Dispatcher;
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;

/// Which task each fallback backend is probed as.
pub fn targets(snap: &Snapshot) -> BTreeMap<BackendId, TaskId> {
    let mut chosen = BTreeMap::new();
    for (t, task) in snap.config.tasks.iter().enumerate() {
        let Ok(eligible) = crate::policy::eligible(task, snap) else { continue };
        let first = snap.backend_id(&task.backends[0]);
        for b in eligible.into_iter().filter(|b| Some(*b) != first) {
            chosen.entry(b).or_insert(TaskId::new(t));
        }
    }
    chosen
}

/// How one probe went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryResult {
    pub backend: String,
    pub task: String,
    pub ok: bool,
    pub ttft_ms: Option<u64>,
    pub error: Option<String>,
    /// Unix seconds.
    pub at: u64,
}

/// The last result per backend, for the admin API. With a ledger store every result is also
/// handed on (`forward_to`) to be stored and shared, and the board takes the shared results
/// back (`replace`): every replica shows the latest probe of each backend, whoever ran it.
#[derive(Debug, Default)]
pub struct CanaryBoard {
    last: Mutex<BTreeMap<BackendName, CanaryResult>>,
    sink: Mutex<Option<tokio::sync::mpsc::UnboundedSender<CanaryResult>>>,
}

impl CanaryBoard {
    pub fn last(&self) -> Vec<CanaryResult> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// Hand every new result to `sink` as well.
    pub(crate) fn forward_to(&self, sink: tokio::sync::mpsc::UnboundedSender<CanaryResult>) {
        *self.sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(sink);
    }

    /// Put exactly `results` in place (the shared state as read from the store).
    pub fn replace(&self, results: BTreeMap<BackendName, CanaryResult>) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = results;
    }

    fn record(&self, result: &CanaryResult) {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(result.backend.as_str().into(), result.clone());
        if let Some(sink) = &*self.sink.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = sink.send(result.clone());
        }
    }
}

/// What a round of canaries needs.
#[derive(Clone)]
pub struct Canaries {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub dispatcher: Arc<Dispatcher>,
    pub metrics: Arc<Metrics>,
    pub board: Arc<CanaryBoard>,
}

impl Canaries {
    /// Probe every fallback backend (or only `only`) now, one after another.
    pub async fn round(&self, only: Option<&str>) -> Vec<CanaryResult> {
        let snap = self.snapshot.load_full();
        let mut results = Vec::new();
        for (backend, task) in targets(&snap) {
            if only.is_some_and(|name| name != snap.backends[backend].name) {
                continue;
            }
            let result = self.probe(&snap, backend, task).await;
            self.metrics.observe_canary(&result.backend, result.ok);
            if !result.ok {
                tracing::warn!(backend = %result.backend, error = ?result.error, "canary failed");
            }
            self.board.record(&result);
            results.push(result);
        }
        results
    }

    async fn probe(&self, snap: &Snapshot, backend: BackendId, task: TaskId) -> CanaryResult {
        let task = &snap.config.tasks[task];
        let canary = &snap.config.canary;
        let request = match snap.config.backends[backend].embedding_space {
            // An embeddings backend is probed with what it serves: the prompt, embedded.
            Some(_) => ChatRequest {
                max_tokens: Some(0),
                operation: Operation::Embedding(Embedding {
                    input: Input::Text(canary.prompt.clone()),
                    encoding_format: EncodingFormat::Float,
                    dimensions: None,
                    user: None,
                }),
                ..ChatRequest::default()
            },
            None => ChatRequest {
                messages: vec![Message::new(Role::User, canary.prompt.clone())].into(),
                max_tokens: Some(canary.max_tokens),
                temperature: Some(0.0),
                ..ChatRequest::default()
            },
        };
        let at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let call =
            SyntheticCall { purpose: Purpose::Canary, task, request, to: Destination::Backend(backend) };
        let answer = self.dispatcher.synthetic(snap, call).await;
        let (ok, ttft_ms, error) = match answer {
            Ok(a) => (true, Some(a.ttft.as_millis() as u64), None),
            Err(e) => {
                tracing::debug!("canary failed: {e}");
                (false, None, Some(e.to_string()))
            }
        };
        CanaryResult {
            backend: snap.backends[backend].name.clone(),
            task: task.name.clone(),
            ok,
            ttft_ms,
            error,
            at,
        }
    }

    /// A round every `interval` (the first one interval after start) until stopped.
    pub async fn run(self, interval: Duration) {
        let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.round(None).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallbacks_are_probed_as_a_task_whose_policy_allows_them() {
        let config = crate::config::parse(
            r#"
backends:
  - {name: pool, kind: vllm, endpoints: ["http://10.0.0.1:8000"], model: m, region: eu}
  - {name: a, kind: openai, model: g, region: us}
  - {name: b, kind: anthropic, model: c, region: eu}
  - {name: c, kind: openai, model: g, region: us}
tasks:
  - {name: secret, backends: [pool, c, b], data_class: restricted, slo: {ttft_ms: 500}}
  - {name: chat, backends: [a, pool, b], slo: {ttft_ms: 500}}
policy:
  data_classes:
    restricted: {regions: [eu]}
"#,
        )
        .unwrap();
        let snap = Snapshot::from_config(Arc::new(config));
        let names: Vec<(&str, &str)> = targets(&snap)
            .into_iter()
            .map(|(b, t)| (snap.backends[b].name.as_str(), snap.config.tasks[t].name.as_str()))
            .collect();
        // `a` is only ever first; `c` is a fallback only for a task whose policy refuses it.
        assert_eq!(names, [("pool", "chat"), ("b", "secret")]);
    }
}
