//! The boards a router is made of: the state its loops write and its requests read (nodes,
//! snapshot, telemetry, pins, holds, canaries, readiness, availability, metrics, sessions,
//! quotas and budgets, the operator state), built before anything is served.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::ledger::Ledger;
use super::{limits, Options};
use crate::api::readiness::Readiness;
use crate::config::secrets::Secrets;
use crate::config::Config;
use crate::control::balancing::AvailabilityBoard;
use crate::control::canary::CanaryBoard;
use crate::control::opstate::{self, OperatorBoard};
use crate::control::pins::PinBoard;
use crate::control::sessions::SessionBook;
use crate::control::Loops;
use crate::fleet::load::NodeLoad;
use crate::fleet::telemetry::TelemetryBoard;
use crate::guard::breaker::BreakerBoard;
use crate::guard::budget::BudgetBoard;
use crate::guard::holds::HoldBoard;
use crate::guard::node::NodeBoard;
use crate::guard::quota::QuotaBoard;
use crate::metrics::Metrics;
use crate::route::sticky::ShareFeedback;
use crate::snapshot::Snapshot;

/// Every board, shared (each is an `Arc`).
pub(super) struct Boards {
    /// The config in effect (a reload swaps it).
    pub config: Arc<ArcSwap<Config>>,
    pub nodes: Arc<NodeBoard>,
    pub load: Arc<NodeLoad>,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub telemetry: Arc<TelemetryBoard>,
    pub pins: Arc<PinBoard>,
    pub holds: Arc<HoldBoard>,
    pub canaries: Arc<CanaryBoard>,
    pub readiness: Arc<Readiness>,
    pub availability: Arc<AvailabilityBoard>,
    pub metrics: Arc<Metrics>,
    pub sessions: Arc<Mutex<SessionBook>>,
    pub quota: Arc<QuotaBoard>,
    pub budgets: Arc<BudgetBoard>,
    pub share_feedback: Arc<ShareFeedback>,
    pub operator: Arc<OperatorBoard>,
}

impl Boards {
    /// The boards for `config`; the operator state is read before the first request, and the
    /// loops that keep it in step join `loops`.
    pub async fn new(
        config: &Arc<Config>,
        secrets: &Secrets,
        options: &Options,
        ledger: Option<&Ledger>,
        loops: &mut Loops,
    ) -> Boards {
        let breakers = BreakerBoard::new(config.dispatch.breaker.clone());
        let load = NodeLoad::new();
        let nodes = NodeBoard::new(Arc::clone(&breakers), Arc::clone(&load));
        let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_config_on(Arc::clone(config), &nodes)));
        let startup_wait = Duration::from_millis(config.telemetry.startup_wait_ms);
        let metrics = Arc::new(Metrics::new());
        metrics.configure(config);
        let (quota, budgets) = limits::boards(config, secrets.redis_url.as_deref(), options).await;
        let (pins, holds, canaries) = (Arc::new(PinBoard::default()), Arc::default(), Arc::default());
        // Holds, forced breakers, canary results and pins: read before the first request,
        // then kept in step with every other replica.
        let targets = opstate::Targets {
            holds: Arc::clone(&holds),
            breakers,
            canaries: Arc::clone(&canaries),
            pins: Arc::clone(&pins),
        };
        let redis_url = secrets.redis_url.as_deref();
        let operator = operator_board(config, targets, ledger, redis_url, loops).await;
        Boards {
            config: Arc::new(ArcSwap::new(Arc::clone(config))),
            nodes,
            load,
            snapshot,
            telemetry: TelemetryBoard::new(),
            pins,
            holds,
            canaries,
            readiness: Arc::new(Readiness::new(startup_wait)),
            availability: AvailabilityBoard::new(config),
            metrics,
            sessions: Arc::default(),
            quota,
            budgets,
            share_feedback: Arc::default(),
            operator,
        }
    }
}

/// The operator state: shared through the ledger's store (and Redis, for speed) when there is
/// a ledger, read before the first request and then polled; in memory otherwise.
async fn operator_board(
    config: &Config,
    targets: opstate::Targets,
    ledger: Option<&Ledger>,
    redis_url: Option<&str>,
    loops: &mut Loops,
) -> Arc<OperatorBoard> {
    let Some(l) = ledger else { return OperatorBoard::in_memory(targets) };
    let board = OperatorBoard::shared(targets, l.store.clone(), redis_url);
    if let Err(e) = board.sync().await {
        tracing::error!("operator state: not loaded at start ({e}); retrying every poll");
    }
    loops.spawn(Arc::clone(&board).run(config.state.operator_poll()));
    board
}
