//! What a request is charged against its budgets: reserved at its worst case before dispatch,
//! settled at its actual cost when it ends. Both are priced by the ledger's own functions
//! (`ledger::price`), so a budget, the `x-spillway-cost-usd` header and the ledger agree. Pure.

use std::time::Duration;

use rust_decimal::Decimal;

use crate::canonical::Usage;
use crate::config::{BackendConfig, BudgetsConfig};
use crate::ledger::{call_cost, hosted_cost, slot_cost, Tokens};

/// The most the request could cost on any of `backends` (those policy lets it use): its
/// prompt estimate and `max_tokens` at a hosted backend's list prices, or one sequence slot
/// of a pool's node for `self_hosted_reserve_secs` when self-hosted answers count. An
/// unpriced backend costs nothing.
pub fn worst_case<'a>(
    backends: impl IntoIterator<Item = &'a BackendConfig>,
    prompt_tokens: u64,
    max_tokens: u64,
    budgets: &BudgetsConfig,
) -> Decimal {
    let tokens = Tokens { input: prompt_tokens, output: max_tokens, ..Tokens::default() };
    let reserve = Duration::from_secs(budgets.self_hosted_reserve_secs);
    backends
        .into_iter()
        .filter_map(|b| match (&b.price, b.pool()) {
            (Some(price), _) => Some(hosted_cost(price, &tokens)),
            (None, Some(pool)) if budgets.count_self_hosted => {
                pool.gpu_hourly_usd.map(|hourly| slot_cost(pool, hourly, reserve))
            }
            _ => None,
        })
        .max()
        .unwrap_or(Decimal::ZERO)
}

/// What the answer cost (the figure in `x-spillway-cost-usd`): list price of its usage on a
/// hosted backend, the marginal GPU estimate on a pool; `None` when its backend is unpriced.
pub(crate) fn answer_cost(backend: &BackendConfig, usage: &Usage, took: Duration) -> Option<Decimal> {
    call_cost(backend, usage, took).map(|c| c.normalize())
}

/// What the answer counts toward budgets: its cost, except a pool's when self-hosted answers
/// do not count.
pub fn counted(backend: &BackendConfig, cost: Option<Decimal>, budgets: &BudgetsConfig) -> Decimal {
    if backend.pool().is_some() && !budgets.count_self_hosted {
        return Decimal::ZERO;
    }
    cost.unwrap_or(Decimal::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(yaml: &str) -> BackendConfig {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn the_worst_case_is_the_dearest_eligible_backend() {
        let cheap = backend(
            "{name: c, kind: openai, model: m, price: {input_per_mtok: '0.15', output_per_mtok: '0.6'}}",
        );
        let dear =
            backend("{name: d, kind: anthropic, model: m, price: {input_per_mtok: 3, output_per_mtok: 15}}");
        let free = backend("{name: f, kind: openai, model: m}");
        let pool = backend(
            "{name: p, kind: vllm, model: m, endpoints: ['http://h:1'], gpu_count: 2, max_running: 16, gpu_hourly_usd: '2.50'}",
        );
        let mut budgets = BudgetsConfig::default();
        // 1,000 prompt tokens and 500 out: 1,000 × 3 + 500 × 15 = 10,500 per million.
        assert_eq!(worst_case([&cheap, &dear, &free], 1_000, 500, &budgets), d("0.0105"));
        // 1,000 × 0.15 + 500 × 0.6 = 450 per million.
        assert_eq!(worst_case([&cheap, &free], 1_000, 500, &budgets), d("0.00045"));
        assert_eq!(worst_case([&free], 1_000, 500, &budgets), Decimal::ZERO);
        // A slot of a $5/h node (2 GPUs × $2.50) for 60 s: 5 × 60 / 3600 / 16 = 0.005208333…
        assert_eq!(worst_case([&pool, &cheap], 1_000, 500, &budgets), d("0.005208333"));
        budgets.count_self_hosted = false;
        assert_eq!(worst_case([&pool, &cheap], 1_000, 500, &budgets), d("0.00045"));
        assert_eq!(counted(&pool, Some(d("0.001")), &budgets), Decimal::ZERO);
        assert_eq!(counted(&dear, Some(d("0.001")), &budgets), d("0.001"));
    }

    #[test]
    fn an_answer_costs_its_usage_or_its_slot_time() {
        let dear =
            backend("{name: d, kind: anthropic, model: m, price: {input_per_mtok: 3, output_per_mtok: 15}}");
        let usage = Usage { input_tokens: 12, output_tokens: 7, ..Usage::default() };
        // 12 × 3 + 7 × 15 = 141 per million.
        assert_eq!(answer_cost(&dear, &usage, Duration::from_secs(9)), Some(d("0.000141")));
        let pool = backend(
            "{name: p, kind: vllm, model: m, endpoints: ['http://h:1'], max_running: 8, gpu_hourly_usd: 4}",
        );
        // $4/h, 8 slots, 1.8 s: 4 × 1.8 / 3600 / 8 = 0.00025.
        assert_eq!(answer_cost(&pool, &usage, Duration::from_millis(1_800)), Some(d("0.00025")));
        assert_eq!(answer_cost(&backend("{name: f, kind: openai, model: m}"), &usage, Duration::ZERO), None);
    }
}
