//! The figures every part of a report is made of: token counts, one group's line of requests
//! and cost, a pool's GPU time and utilisation, and the rounding and ratios they are computed
//! with.

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde::Serialize;

pub use super::utilisation::UtilisationBasis;

/// Money in reports is kept to a millionth of a dollar.
const MONEY_DP: u32 = 6;

/// Token counts: the ledger's, so that a report prices them as the ledger did.
pub use crate::ledger::Tokens;

/// One group's requests and cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Line {
    /// The group's value for each `group_by` key, in order (`-` for no client key).
    pub group: Vec<String>,
    pub requests: u64,
    /// Requests no backend served: failed or shed.
    pub failed: u64,
    pub tokens: Tokens,
    pub hosted_usd: Decimal,
    /// Self-hosted marginal cost: the busy GPU minutes this group used.
    pub gpu_busy_usd: Decimal,
    /// Its share of idle GPU minutes.
    pub gpu_idle_usd: Decimal,
    /// Hosted + busy + idle: fully loaded.
    pub total_usd: Decimal,
    pub per_request_usd: Option<Decimal>,
    pub per_mtok_output_usd: Option<Decimal>,
}

/// One vLLM pool's GPU time in the period.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolUsage {
    pub pool: String,
    pub nodes: usize,
    pub gpu_hours_busy: Decimal,
    pub gpu_hours_idle: Decimal,
    /// Of the busy hours, those batch-priority requests used (their token share of each minute,
    /// as busy cost is shared): hours the batches filled that would have stood idle.
    pub gpu_hours_batch: Decimal,
    pub busy_usd: Decimal,
    pub idle_usd: Decimal,
    /// Cost of nodes that served none of the period's requests (in no line).
    pub unallocated_usd: Decimal,
    /// Share of the pool's sequence capacity that ran (running × time over slots × time), or
    /// its busy share where no node-minute carries that (`utilisation_basis`).
    pub utilisation: f64,
    pub utilisation_basis: UtilisationBasis,
    /// GPU-weighted share of its node-minutes in which anything ran.
    pub busy_share: f64,
    /// Node-minutes written before running × time was recorded: not in `utilisation`.
    pub unmeasured_node_minutes: u64,
    pub unpriced_node_minutes: u64,
}

pub(super) fn money(d: Decimal) -> Decimal {
    d.round_dp(MONEY_DP).normalize()
}

pub(super) fn per(amount: Decimal, count: u64, scale: u64) -> Option<Decimal> {
    (count > 0).then(|| money(amount * Decimal::from(scale) / Decimal::from(count)))
}

pub(super) fn ratio(a: Decimal, b: Decimal) -> f64 {
    if b.is_zero() {
        0.0
    } else {
        (a / b).to_f64().unwrap_or(0.0)
    }
}

impl Line {
    /// Add another line's counts and costs to this one.
    pub(super) fn absorb(&mut self, other: &Line) {
        self.requests += other.requests;
        self.failed += other.failed;
        self.tokens += other.tokens;
        self.hosted_usd += other.hosted_usd;
        self.gpu_busy_usd += other.gpu_busy_usd;
        self.gpu_idle_usd += other.gpu_idle_usd;
    }
}

/// The span a USD budget covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    Day,
    Month,
}

/// Who a budget belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Key,
    Team,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Team => "team",
        }
    }
}

/// One key's or team's spend in the period against the budget that covers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetUse {
    pub scope: Scope,
    pub name: String,
    /// The report's fully loaded spend of the key or team in the period (its lines' total).
    pub spend_usd: Decimal,
    /// The span of the budget set against it, and the budget.
    pub period: BudgetPeriod,
    pub limit_usd: Decimal,
    /// `spend_usd ÷ limit_usd` (`None` for a zero budget).
    pub used: Option<f64>,
}
