//! The bookkeeping loop: reads the outcome records dispatch emits, off the request path, and
//! hands them to the metrics, the hosted availability board and the ledger. Synthetic calls
//! stay out of the request metrics and SLO windows; of them only canaries and judges reach
//! the ledger (`Purpose::ledgered`: gate items and shadows are costed in their own tables).

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::access::AccessLine;
use super::sessions::SessionBook;
use crate::outcome::{AnswerCost, Ending, Record, RequestOutcome};

/// Where the bookkeeping loop puts what it reads.
pub struct Books {
    pub availability: std::sync::Arc<super::balancing::AvailabilityBoard>,
    /// `None` when the ledger is off.
    pub ledger: Option<crate::ledger::LedgerBook>,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Where each session was served last, and its moves.
    pub sessions: Arc<Mutex<SessionBook>>,
}

/// Read records (and access lines, when the edge sends them) until the channel closes or `stop`
/// is cancelled (then read what is already queued): log them, feed the metrics and write the
/// ledger.
pub(crate) async fn consume(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Record>,
    mut access: Option<tokio::sync::mpsc::Receiver<AccessLine>>,
    books: Books,
    stop: tokio_util::sync::CancellationToken,
) {
    let Books { availability, ledger, metrics, sessions } = books;
    let mut stopping = false;
    loop {
        let record = tokio::select! {
            biased;
            record = rx.recv() => match record {
                Some(record) => record,
                None => break,
            },
            line = async { access.as_mut()?.recv().await }, if access.is_some() => {
                match line {
                    Some(line) => line.write(),
                    None => access = None,
                }
                continue;
            }
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                rx.close();
                if let Some(access) = access.as_mut() {
                    access.close();
                }
                continue;
            }
        };
        match record {
            Record::Planned { task, first } => metrics.observe_planned(&task, &first),
            Record::Queue(q) => metrics.observe_queue(&q),
            Record::Spilled(s) => metrics.observe_spilled(&s),
            Record::Failover { task, from, to, reason } => {
                metrics.observe_failover(&task, &from, &to, reason);
            }
            Record::Attempt(a) => {
                metrics.observe_attempt(&a);
                tracing::debug!(request_id = %a.request_id, task = %a.task, node = %a.node, "{}", a.describe());
                if a.skipped.is_none() {
                    availability.record(&a.backend, a.error_class, a.slow);
                }
            }
            Record::Request(r) if r.ending == Ending::InFlight => {}
            Record::Request(r) => {
                tracing::debug!(
                    request_id = %r.meta.request_id,
                    task = %r.task,
                    backend = %r.backend,
                    attempts = r.attempts,
                    ttft_ms = r.ttft.map(|t| t.as_millis() as u64),
                    duration_ms = r.duration.as_millis() as u64,
                    input_tokens = r.usage.input_tokens,
                    output_tokens = r.usage.output_tokens,
                    ending = ?r.ending,
                    spill = r.spill.map(|s| s.as_str()),
                    unmeasured = r.unmeasured,
                    "request"
                );
                // The list price dispatch's lease put on the answer (a pool's GPU hours are
                // allocated by the reports, not ledgered per request).
                let cost = r.cost.and_then(AnswerCost::billed);
                metrics
                    .observe_request(&r, cost.and_then(|c| rust_decimal::prelude::ToPrimitive::to_f64(&c)));
                note_session(&sessions, &metrics, &r);
                // A synthetic call's cost is ledgered only where it has no other home.
                if let Some(ledger) = ledger.as_ref().filter(|_| r.meta.ledgered()) {
                    ledger.record(&r, cost);
                }
            }
        }
    }
    while let Some(line) = access.as_mut().and_then(|a| a.try_recv().ok()) {
        line.write();
    }
}

/// A served request of a session: note where, and count and log a move.
fn note_session(sessions: &Mutex<SessionBook>, metrics: &crate::metrics::Metrics, r: &RequestOutcome) {
    let (Some(affinity), Some(kind), false) = (r.meta.affinity, r.kind, r.meta.synthetic) else { return };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let moved =
        sessions.lock().unwrap_or_else(|e| e.into_inner()).record(affinity, &r.task, &r.backend, kind, now);
    if let Some(moved) = moved {
        metrics.observe_session_move(&r.task, moved.as_str());
        tracing::info!(
            request_id = %r.meta.request_id,
            session = %affinity.hex(),
            task = %r.task,
            backend = %r.backend,
            moved = moved.as_str(),
            "session moved"
        );
    }
}
