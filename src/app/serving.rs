//! The request side of a router, built on its boards: dispatch, the evaluation gate, the
//! client keys, reload and canaries, then the pipeline every door shares, the front door's
//! checks and what the operator's routes read (`AppState`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

use super::boards::Boards;
use super::ledger::Ledger;
use crate::api::{self, AppState};
use crate::config::secrets::Secrets;
use crate::config::Config;
use crate::control::access::AccessLog;
use crate::control::canary::Canaries;
use crate::control::reload::Reloader;
use crate::control::Loops;
use crate::dispatch::Dispatcher;
use crate::gate::board::GateBoard;
use crate::gate::service::GateService;
use crate::guard::wait_queue::WaitQueues;
use crate::outcome::Record;

/// The state every route is handed; the gate's verdicts go to `gate_board`.
pub(super) async fn state(
    boards: &Boards,
    secrets: Secrets,
    ledger: Option<&Ledger>,
    (records, access, gate_board): (mpsc::UnboundedSender<Record>, AccessLog, Arc<GateBoard>),
    tracing: crate::trace::Tracing,
    loops: &mut Loops,
) -> std::io::Result<AppState> {
    let config = boards.config.load_full();
    let dispatcher = dispatcher(&config, &secrets, records, boards);
    let gate = gate(boards, &dispatcher, ledger, gate_board, loops).await;
    let client_keys = client_keys(&config, &secrets.client_keys, ledger, loops).await?;
    let queues = WaitQueues::new();
    let serving = Arc::new(crate::serve::Serving {
        snapshot: Arc::clone(&boards.snapshot),
        dispatcher: Arc::clone(&dispatcher),
        client_keys: Arc::clone(&client_keys),
        budgets: Arc::clone(&boards.budgets),
        shadows: gate.shadows.clone(),
        share_feedback: Arc::clone(&boards.share_feedback),
        queues: Arc::clone(&queues),
    });
    let door = api::front::Door {
        client_keys: Arc::clone(&client_keys),
        limiter: Arc::new(Semaphore::new(config.limits.max_concurrency)),
        max_body_bytes: config.limits.max_body_bytes,
        body_read_timeout: config.limits.body_read_timeout(),
    };
    let ops = operations(
        boards,
        &dispatcher,
        client_keys,
        (gate, queues, access),
        ledger,
        secrets.admin_token,
        tracing,
    );
    let canary_every = config.canary.interval_secs;
    if canary_every > 0 {
        loops.spawn(Canaries::clone(&ops.canaries).run(Duration::from_secs(canary_every)));
    }
    #[cfg(unix)]
    loops.spawn(super::signal::reload_on_sighup(Arc::clone(&ops.reloader)));
    Ok(AppState { serving, door, ops: Arc::new(ops) })
}

fn dispatcher(
    config: &Config,
    secrets: &Secrets,
    records: mpsc::UnboundedSender<Record>,
    boards: &Boards,
) -> Arc<Dispatcher> {
    let keys = crate::dispatch::Keys {
        api_keys: secrets.backend_keys.clone(),
        client_keys: secrets.client_keys.keys().cloned().collect(),
        admin_token: secrets.admin_token.clone(),
    };
    Arc::new(Dispatcher::new(config.dispatch.clone(), &config.tls, keys, records, Arc::clone(&boards.quota)))
}

/// The evaluation gate: its results, accepted pins, re-runs and shadow traffic.
async fn gate(
    boards: &Boards,
    dispatcher: &Arc<Dispatcher>,
    ledger: Option<&Ledger>,
    board: Arc<GateBoard>,
    loops: &mut Loops,
) -> GateService {
    let calls = crate::gate::call::Calls {
        dispatcher: Arc::clone(dispatcher),
        snapshot: Arc::clone(&boards.snapshot),
        planned: true,
    };
    let parts = crate::gate::service::Parts {
        config: Arc::clone(&boards.config),
        snapshot: Arc::clone(&boards.snapshot),
        pins: Arc::clone(&boards.pins),
        store: ledger.map(|l| l.store.clone()),
        operator: Arc::clone(&boards.operator),
        calls,
        metrics: Arc::clone(&boards.metrics),
    };
    GateService::start(parts, board, loops).await
}

/// What the admin API, `/metrics`, `/readyz`, the dashboard and the layers read.
fn operations(
    boards: &Boards,
    dispatcher: &Arc<Dispatcher>,
    client_keys: Arc<crate::keys::KeyBoard>,
    (gate, queues, access): (GateService, Arc<WaitQueues>, AccessLog),
    ledger: Option<&Ledger>,
    admin_token: Option<String>,
    tracing: crate::trace::Tracing,
) -> api::Ops {
    let reloader = Arc::new(Reloader {
        config: Arc::clone(&boards.config),
        client_keys: Arc::clone(&client_keys),
        dispatcher: Arc::clone(dispatcher),
        quota: Arc::clone(&boards.quota),
        budgets: Arc::clone(&boards.budgets),
        availability: Arc::clone(&boards.availability),
        metrics: Arc::clone(&boards.metrics),
    });
    let canaries = Arc::new(Canaries {
        snapshot: Arc::clone(&boards.snapshot),
        dispatcher: Arc::clone(dispatcher),
        metrics: Arc::clone(&boards.metrics),
        board: Arc::clone(&boards.canaries),
    });
    api::Ops {
        snapshot: Arc::clone(&boards.snapshot),
        lanes: dispatcher.lanes().clone(),
        load: Arc::clone(&boards.load),
        client_keys,
        quota: Arc::clone(&boards.quota),
        budgets: Arc::clone(&boards.budgets),
        ledger: ledger.map(|l| (l.store.clone(), l.sender.clone())),
        admin_token,
        metrics: Arc::clone(&boards.metrics),
        telemetry: Arc::clone(&boards.telemetry),
        holds: Arc::clone(&boards.holds),
        operator: Arc::clone(&boards.operator),
        canaries,
        reloader,
        gate,
        readiness: Arc::clone(&boards.readiness),
        tracing,
        sessions: Arc::clone(&boards.sessions),
        queues,
        access,
    }
}

/// Static keys now; issued keys read once before the first request, then on an interval.
async fn client_keys(
    config: &Config,
    keys: &std::collections::HashMap<String, String>,
    ledger: Option<&Ledger>,
    loops: &mut Loops,
) -> std::io::Result<Arc<crate::keys::KeyBoard>> {
    let client_keys = Arc::new(crate::keys::KeyBoard::new(crate::keys::StaticKeys::new(keys)));
    if let Some(l) = ledger {
        crate::keys::reload(&client_keys, &l.store).await.map_err(std::io::Error::other)?;
        let refresh = crate::control::keys::run(
            Arc::clone(&client_keys),
            l.store.clone(),
            config.issued_keys.refresh(),
        );
        loops.spawn(refresh);
    }
    Ok(client_keys)
}
