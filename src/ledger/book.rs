//! From dispatch outcomes to ledger rows: hands each finished request's row, with its hosted
//! list-price cost, to the writer. Self-hosted requests carry no cost of their own: their GPU
//! time is shared out in reports (see `report::allocate`).

use rust_decimal::Decimal;

use super::record::LedgerRecord;
use super::writer::LedgerSender;
use crate::outcome::RequestOutcome;

/// The writer, as the bookkeeping loop uses it.
pub struct LedgerBook {
    sender: LedgerSender,
}

impl LedgerBook {
    pub fn new(sender: LedgerSender) -> Self {
        LedgerBook { sender }
    }

    /// Write the row of a finished request (in-flight outcomes are ignored).
    pub fn record(&self, o: &RequestOutcome, cost: Option<Decimal>) {
        if let Some(row) = LedgerRecord::from_outcome(o, cost) {
            if self.sender.send(row).is_err() {
                tracing::error!(task = %o.task, "ledger writer has stopped: a request row was not written");
            }
        }
    }
}
