//! From dispatch outcomes to ledger rows: prices each hosted request at its backend's list
//! price and hands the row to the writer. Self-hosted requests carry no cost of their own:
//! their GPU time is shared out in reports (see `report::allocate`).

use std::collections::HashMap;

use super::price::hosted_cost;
use super::record::LedgerRecord;
use super::writer::LedgerSender;
use crate::config::{Config, Price};
use crate::outcome::RequestOutcome;

/// The writer and the prices it needs. Cheap to call from the bookkeeping loop.
pub struct LedgerBook {
    sender: LedgerSender,
    /// Hosted backends with a price.
    hosted_prices: HashMap<String, Price>,
}

impl LedgerBook {
    pub fn new(config: &Config, sender: LedgerSender) -> Self {
        let hosted_prices = config
            .backends
            .iter()
            .filter(|b| !b.kind.is_local())
            .filter_map(|b| b.price.clone().map(|p| (b.name.clone(), p)))
            .collect();
        LedgerBook { sender, hosted_prices }
    }

    /// Write the row of a finished request (in-flight outcomes are ignored).
    pub fn record(&self, o: &RequestOutcome) {
        let u = &o.usage;
        let cost = self.hosted_prices.get(&o.backend).map(|p| {
            hosted_cost(
                p,
                u64::from(u.input_tokens),
                u64::from(u.cached_input_tokens),
                u64::from(u.output_tokens),
            )
        });
        if let Some(row) = LedgerRecord::from_outcome(o, cost) {
            if self.sender.send(row).is_err() {
                tracing::error!(task = %o.task, "ledger writer has stopped: a request row was not written");
            }
        }
    }

    pub fn sender(&self) -> &LedgerSender {
        &self.sender
    }
}
