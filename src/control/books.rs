//! The bookkeeping loop: reads the outcome records dispatch emits, off the request path, and
//! hands them to the metrics, the hosted availability board and the ledger.

use crate::outcome::{Ending, Record};

/// Running totals of the records, for `GET /stats` until the metrics exposition exists.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Tally {
    /// Requests by `backend/ending` (backend empty when none served).
    pub requests: std::collections::BTreeMap<String, u64>,
    /// Requests that left the fleet, by spill reason.
    pub spills: std::collections::BTreeMap<&'static str, u64>,
    /// Upstream calls that failed, by `backend/class`.
    pub failed_attempts: std::collections::BTreeMap<String, u64>,
    /// Chain choice: how often each backend came first in a task's plan, by `task/backend`.
    pub first_choice: std::collections::BTreeMap<String, u64>,
}

/// Where the bookkeeping loop puts what it reads.
pub struct Books {
    pub tally: std::sync::Arc<std::sync::Mutex<Tally>>,
    pub availability: std::sync::Arc<super::balancing::AvailabilityBoard>,
    /// `None` when the ledger is off.
    pub ledger: Option<crate::ledger::LedgerBook>,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Swapped on a config reload.
    pub prices: std::sync::Arc<arc_swap::ArcSwap<crate::ledger::HostedPrices>>,
}

/// Read records until the channel closes or `stop` fires (then read what is already queued):
/// log them, keep the tally and write the ledger.
pub async fn consume(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Record>,
    books: Books,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let Books { tally, availability, ledger, metrics, prices } = books;
    let mut stopping = false;
    loop {
        let record = tokio::select! {
            biased;
            record = rx.recv() => match record {
                Some(record) => record,
                None => break,
            },
            _ = &mut stop, if !stopping => {
                stopping = true;
                rx.close();
                continue;
            }
        };
        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
        match record {
            Record::Planned { task, first } => {
                *t.first_choice.entry(format!("{task}/{first}")).or_default() += 1;
            }
            Record::Failover { task, from, to, reason } => {
                metrics.observe_failover(&task, &from, &to, reason);
            }
            Record::Attempt(a) => {
                metrics.observe_attempt(&a);
                tracing::debug!(request_id = %a.request_id, task = %a.task, node = %a.node, "{}", a.describe());
                if a.skipped.is_none() {
                    availability.record(&a.backend, a.error_class);
                }
                if let Some(class) = a.error_class {
                    *t.failed_attempts.entry(format!("{}/{}", a.backend, class.as_str())).or_default() += 1;
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
                    "request"
                );
                let ending = match r.ending {
                    Ending::Completed => "completed",
                    Ending::Failed(_) => "failed",
                    Ending::Cancelled => "cancelled",
                    Ending::Shed => "shed",
                    Ending::InFlight => "in_flight",
                };
                *t.requests.entry(format!("{}/{ending}", r.backend)).or_default() += 1;
                if let Some(reason) = r.spill {
                    *t.spills.entry(reason.as_str()).or_default() += 1;
                }
                drop(t);
                let cost = prices.load().cost(&r);
                metrics
                    .observe_request(&r, cost.and_then(|c| rust_decimal::prelude::ToPrimitive::to_f64(&c)));
                if let Some(ledger) = &ledger {
                    ledger.record(&r, cost);
                }
            }
        }
    }
}
