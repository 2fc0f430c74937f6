//! The gate inside a running router: results and accepted pins loaded from the store at start
//! and refreshed every few seconds (runs made by the CLI or another replica count), re-runs on
//! pin changes, operator-started runs, shadow traffic and its offline grading.

use std::sync::Arc;
use std::time::Duration;

use super::board::{current_fingerprint, GateBoard};
use super::call::Calls;
use super::error::GateError;
use super::requalify::Requalifier;
use super::run::{run, Subject};
use super::shadow::{self, Shadows};
use super::store::{self, GateResult};
use crate::config::Config;
use crate::control::pins::PinBoard;
use crate::control::Loops;
use crate::ledger::Store;
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;
use arc_swap::ArcSwap;

/// How often results are re-read from the store, and shadows graded.
const REFRESH: Duration = Duration::from_secs(5);
const GRADE_SHADOWS: Duration = Duration::from_secs(2);

/// The gate's parts a router holds.
pub struct GateService {
    pub board: Arc<GateBoard>,
    pub pins: Arc<PinBoard>,
    /// Present when the ledger store is (results live there).
    pub requalifier: Option<Arc<Requalifier>>,
    pub shadows: Option<Arc<Shadows>>,
}

/// What the service is built from.
pub struct Parts {
    pub config: Arc<ArcSwap<Config>>,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub pins: Arc<PinBoard>,
    pub store: Option<Store>,
    /// The shared operator state (gate verdicts and accepted pins go there).
    pub operator: Arc<crate::control::opstate::OperatorBoard>,
    /// Every gate item, judge and shadow goes through it.
    pub calls: Calls,
    pub metrics: Arc<Metrics>,
}

impl GateService {
    /// Load what the store knows, then start the loops on `loops`.
    pub async fn start(parts: Parts, board: Arc<GateBoard>, loops: &mut Loops) -> GateService {
        let Some(store) = parts.store else {
            return GateService { board, pins: parts.pins, requalifier: None, shadows: None };
        };
        if let Err(e) = refresh(&store, &board, &parts.pins).await {
            tracing::error!("gate: results not loaded at start: {e}");
        }
        let requalifier = Arc::new(Requalifier::new(
            parts.calls.clone(),
            Arc::clone(&parts.config),
            Arc::clone(&parts.snapshot),
            Arc::clone(&parts.pins),
            Arc::clone(&board),
            store.clone(),
            Arc::clone(&parts.metrics),
            Arc::clone(&parts.operator),
        ));
        loops.spawn(Arc::clone(&requalifier).listen(parts.pins.watch()));
        let (refresh_store, refresh_board, refresh_pins) =
            (store.clone(), Arc::clone(&board), Arc::clone(&parts.pins));
        loops.spawn(async move {
            let mut tick = tokio::time::interval(REFRESH);
            loop {
                tick.tick().await;
                if let Err(e) = refresh(&refresh_store, &refresh_board, &refresh_pins).await {
                    tracing::warn!("gate: refresh from the store failed: {e}");
                }
            }
        });
        let shadows = Arc::new(Shadows {
            calls: parts.calls.clone(),
            store: store.clone(),
            metrics: Arc::clone(&parts.metrics),
        });
        loops.spawn(shadow::grade_loop(store, parts.config, parts.calls, parts.metrics, GRADE_SHADOWS));
        GateService { board, pins: parts.pins, requalifier: Some(requalifier), shadows: Some(shadows) }
    }

    /// Run `task`'s golden set on `backend` now, under its current fingerprint, and store it.
    pub(crate) async fn run_now(&self, task: &str, backend: &str) -> Result<GateResult, GateError> {
        let r = self.requalifier.as_ref().ok_or(GateError::NoStore)?;
        let config = r.config.load_full();
        let t = config.task(task).ok_or_else(|| GateError::NoTask(task.to_string()))?;
        let gate = t.gate.as_ref().ok_or_else(|| GateError::NoGate(task.to_string()))?;
        let b = config.backend(backend).ok_or_else(|| GateError::NoBackend(backend.to_string()))?;
        let items = crate::config::golden::load(&gate.golden).map_err(GateError::Golden)?;
        let subject = Subject {
            task: task.to_string(),
            backend: backend.to_string(),
            fingerprint: current_fingerprint(b, &self.pins),
            node: None,
            trigger: "admin".into(),
        };
        let result = run(&r.calls, &config, subject, &items, &|_, _| {}).await?;
        store::insert_result(&r.store, &result).await?;
        r.metrics.observe_gate_run(task, backend, result.summary.passed);
        self.board.absorb([result.clone()]);
        Ok(result)
    }
}

async fn refresh(store: &Store, board: &GateBoard, pins: &PinBoard) -> Result<(), GateError> {
    board.absorb(store::results(store).await?);
    // Oldest first, so the newest ends up in effect.
    for (backend, pin) in store::accepted_pins(store).await? {
        pins.accept(&backend, pin);
    }
    Ok(())
}
