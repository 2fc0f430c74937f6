//! One admitted request's hold on its key's and team's limits, and how it ends: settled at
//! the actual cost, released when no upstream answered, or (dropped unsettled) charged the
//! worst case it reserved. Whatever happens to the request, its reservation ends exactly once.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::limits::{Demand, Scope};
use super::window::{from_nanos, to_nanos};
use super::BudgetBoard;

/// How a reservation ended.
pub(super) struct Settlement {
    pub scopes: Vec<Scope>,
    pub id: u64,
    pub shared: bool,
    pub actual_nanos: i64,
    pub token_delta: i64,
}

/// One admitted request's hold on its key's and team's limits. Settle it with the actual cost
/// when the request ends; [`Reservation::release`] it when no upstream answered (nothing was
/// spent). Dropped unsettled (a client gone mid-answer, a task cancelled), it is settled at
/// the worst case it reserved: a budget is never charged less than a request may have cost.
pub struct Reservation {
    board: Arc<BudgetBoard>,
    scopes: Vec<Scope>,
    id: u64,
    /// Counted in Redis (else on this replica).
    shared: bool,
    demand: Demand,
    done: bool,
}

impl Reservation {
    pub(super) fn new(
        board: Arc<BudgetBoard>,
        scopes: Vec<Scope>,
        id: u64,
        shared: bool,
        demand: Demand,
    ) -> Self {
        Reservation { board, scopes, id, shared, demand, done: false }
    }

    /// The worst case it reserved.
    pub(crate) fn reserved(&self) -> Decimal {
        from_nanos(self.demand.reserve_nanos)
    }

    /// End it at `actual` dollars, correcting its tokens to `tokens` when the usage is known;
    /// done once this returns.
    pub async fn settle(mut self, actual: Decimal, tokens: Option<u64>) {
        if let Some(end) = self.end(to_nanos(actual), tokens) {
            self.board.settle(end).await;
        }
    }

    /// End it with nothing spent and its tokens given back (no upstream answered).
    pub async fn release(mut self) {
        if let Some(end) = self.end(0, Some(0)) {
            self.board.settle(end).await;
        }
    }

    fn end(&mut self, actual_nanos: i64, tokens: Option<u64>) -> Option<Settlement> {
        if std::mem::replace(&mut self.done, true) {
            return None;
        }
        let token_delta = tokens.map_or(0, |t| {
            (t as i128 - self.demand.tokens as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
        });
        Some(Settlement {
            scopes: std::mem::take(&mut self.scopes),
            id: self.id,
            shared: self.shared,
            actual_nanos,
            token_delta,
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some(end) = self.end(self.demand.reserve_nanos, None) else { return };
        let board = Arc::clone(&self.board);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { board.settle(end).await });
            }
            Err(_) => {
                let mut counters = board.local.lock().unwrap_or_else(|e| e.into_inner());
                counters.settle((board.clock)(), &end.scopes, end.id, end.actual_nanos, end.token_delta);
            }
        }
    }
}
