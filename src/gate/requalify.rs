//! Re-running the gate when a pool's node changes: the pin board announces a node whose
//! weights, quantisation or engine differ from the pin; every gated task of that pool runs
//! its golden set on that node, under the new fingerprint. All pass: the new pin is accepted
//! (stored, and in effect: the node serves again). Any fails: the node stays quarantined and
//! the failure is shown with its quarantine reason, in the gate metrics and the admin API.
//! Both verdicts go into the shared operator state, so every replica keeps the node out (or
//! takes the new pin) at once, and a restart remembers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::broadcast;

use super::board::GateBoard;
use super::call::Calls;
use super::error::GateError;
use super::fingerprint::{of_pin, reported_pin};
use super::run::{run, Subject};
use super::store;
use crate::canonical::NodeKey;
use crate::config::Config;
use crate::control::opstate::{Change, OperatorBoard};
use crate::control::pins::{PinBoard, QuarantineEvent};
use crate::ledger::{unix_millis, Store};
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;

/// What a re-run needs.
pub struct Requalifier {
    pub calls: Calls,
    pub config: Arc<ArcSwap<Config>>,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub pins: Arc<PinBoard>,
    pub board: Arc<GateBoard>,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// Where verdicts and accepted pins are shared with the other replicas.
    pub operator: Arc<OperatorBoard>,
    /// (backend, fingerprint) runs under way, so two nodes with the same change run once.
    running: Mutex<BTreeSet<(String, String)>>,
    /// The last announcement per quarantined node, to run again on an operator's request.
    quarantined: Mutex<BTreeMap<NodeKey, QuarantineEvent>>,
}

/// How a re-run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requalified {
    Accepted {
        fingerprint: String,
    },
    Refused {
        fingerprint: String,
        why: String,
    },
    /// Another run for this fingerprint is under way.
    AlreadyRunning,
}

impl Requalifier {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        calls: Calls,
        config: Arc<ArcSwap<Config>>,
        snapshot: Arc<ArcSwap<Snapshot>>,
        pins: Arc<PinBoard>,
        board: Arc<GateBoard>,
        store: Store,
        metrics: Arc<Metrics>,
        operator: Arc<OperatorBoard>,
    ) -> Requalifier {
        Requalifier {
            calls,
            config,
            snapshot,
            pins,
            board,
            store,
            metrics,
            operator,
            running: Mutex::new(BTreeSet::new()),
            quarantined: Mutex::new(BTreeMap::new()),
        }
    }

    /// Re-run the gate for each node quarantined before it listened (`now`), then for each
    /// quarantine announced, until the channel closes.
    pub async fn listen(
        self: Arc<Self>,
        (now, mut events): (Vec<QuarantineEvent>, broadcast::Receiver<QuarantineEvent>),
    ) {
        let mut now = now.into_iter();
        loop {
            let next = match now.next() {
                Some(event) => Ok(event),
                None => events.recv().await,
            };
            match next {
                Ok(event) if !event.differences.is_empty() => {
                    self.quarantined
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(event.node.clone(), event.clone());
                    let this = Arc::clone(&self);
                    tokio::spawn(async move { this.requalify(&event).await });
                }
                Ok(event) => {
                    self.quarantined.lock().unwrap_or_else(|e| e.into_inner()).remove(&event.node);
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "gate: missed quarantine announcements")
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Run the gate again on a node it kept out (after the golden set or the node was fixed).
    pub async fn retry(&self, node: &str) -> Result<Requalified, GateError> {
        let event = self.quarantined.lock().unwrap_or_else(|e| e.into_inner()).get(node).cloned();
        let event = event.ok_or_else(|| GateError::NotQuarantined(node.to_string()))?;
        Ok(self.requalify(&event).await)
    }

    /// Run every gated task of the node's pool on the node, under what it reports.
    pub async fn requalify(&self, event: &QuarantineEvent) -> Requalified {
        let config = self.config.load_full();
        let Some(backend) = config.backend(&event.backend) else {
            return Requalified::Refused { fingerprint: String::new(), why: "backend gone".into() };
        };
        let pin =
            reported_pin(&backend.pool().and_then(|p| p.pin.clone()).unwrap_or_default(), &event.reported);
        let fingerprint = of_pin(&backend.model, &pin);
        let key = (backend.name.clone(), fingerprint.clone());
        if !self.running.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone()) {
            return Requalified::AlreadyRunning;
        }
        let outcome = self.run_tasks(&config, &event.backend, &event.node, &fingerprint).await;
        self.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        match outcome {
            Ok(()) => {
                if let Err(e) =
                    store::accept_pin(&self.store, &backend.name, &fingerprint, &pin, now_ms()).await
                {
                    tracing::error!("gate: the new pin passed but could not be stored: {e}");
                }
                self.pins.accept(&backend.name, pin.clone());
                let shared = vec![
                    Change::Pin(backend.name.clone(), pin),
                    Change::GateVerdict(event.node.clone(), None),
                ];
                if let Err(e) = self.operator.change(shared, "gate").await {
                    tracing::error!("gate: the new pin is in effect here but not shared: {e}");
                }
                tracing::warn!(backend = %backend.name, node = %event.node, %fingerprint, "gate passed: new pin in effect");
                Requalified::Accepted { fingerprint }
            }
            Err(why) => {
                let why = why.to_string();
                tracing::error!(backend = %backend.name, node = %event.node, %fingerprint, "gate failed: {why}");
                let verdict = format!("gate failed for fingerprint {fingerprint}: {why}");
                self.pins.gate_verdict(&event.node, verdict.clone());
                let shared = vec![Change::GateVerdict(event.node.clone(), Some(verdict))];
                if let Err(e) = self.operator.change(shared, "gate").await {
                    tracing::error!("gate: the verdict holds here but is not shared: {e}");
                }
                Requalified::Refused { fingerprint, why }
            }
        }
    }

    async fn run_tasks(
        &self,
        config: &Arc<Config>,
        backend: &str,
        node: &str,
        fingerprint: &str,
    ) -> Result<(), GateError> {
        let tasks: Vec<_> = config
            .tasks
            .iter()
            .filter(|t| t.gate.is_some() && t.backends.iter().any(|b| b == backend))
            .collect();
        if tasks.is_empty() {
            return Err(GateError::NoVouching);
        }
        let snap = self.snapshot.load_full();
        if self.calls.to_node(&snap, backend, node).is_none() {
            return Err(GateError::NodeGone(node.to_string()));
        }
        let mut failures = Vec::new();
        for task in tasks {
            let gate = task.gate.as_ref().expect("filtered on gate");
            if let Some(done) = self.board.latest(&task.name, backend, fingerprint) {
                if done.summary.passed {
                    continue;
                }
            }
            let items = crate::config::golden::load(&gate.golden).map_err(GateError::Golden)?;
            let subject = Subject {
                task: task.name.clone(),
                backend: backend.to_string(),
                fingerprint: fingerprint.to_string(),
                node: Some(node.to_string()),
                trigger: "pin_change".into(),
            };
            let result = run(&self.calls, config, subject, &items, &|_, _| {}).await?;
            if let Err(e) = store::insert_result(&self.store, &result).await {
                tracing::error!("gate: result not stored: {e}");
            }
            self.metrics.observe_gate_run(&task.name, backend, result.summary.passed);
            if !result.summary.passed {
                failures.push(format!("task {}: {}", task.name, result.summary.why));
            }
            self.board.absorb([result]);
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(GateError::Failed(failures))
        }
    }
}

fn now_ms() -> i64 {
    unix_millis(std::time::SystemTime::now())
}
