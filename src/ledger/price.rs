//! What a call costs: a hosted request at its backend's list prices, a pool's answer as a
//! share of its node's GPU price. Exact decimal arithmetic; no I/O.

use std::collections::HashMap;
use std::time::Duration;

use rust_decimal::Decimal;

use crate::canonical::Usage;
use crate::config::{BackendConfig, Config, PoolSpec, Price};
use crate::outcome::RequestOutcome;

/// The list prices of the config's priced hosted backends.
#[derive(Debug, Clone, Default)]
pub struct HostedPrices(HashMap<String, Price>);

impl HostedPrices {
    pub fn new(config: &Config) -> Self {
        HostedPrices(
            config
                .backends
                .iter()
                .filter(|b| !b.kind().is_local())
                .filter_map(|b| b.price.clone().map(|p| (b.name.clone(), p)))
                .collect(),
        )
    }

    /// What the request cost at list price; `None` when its backend is self-hosted, unpriced
    /// or absent.
    pub fn cost(&self, o: &RequestOutcome) -> Option<Decimal> {
        let u = &o.usage;
        self.0.get(&o.backend).map(|p| {
            hosted_cost(
                p,
                u64::from(u.input_tokens),
                u64::from(u.cached_input_tokens),
                u64::from(u.output_tokens),
            )
        })
    }
}

/// Dollars for `input` tokens (of which `cached` were read from the provider's prompt cache)
/// and `output` tokens at `price` (per million tokens). Cached tokens are charged at
/// `cached_input_per_mtok`, or at the input price when the provider gives no discount; a
/// `cached` above `input` is treated as all of `input`.
pub fn hosted_cost(price: &Price, input: u64, cached: u64, output: u64) -> Decimal {
    let cached = cached.min(input);
    let cached_price = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
    let dollars = Decimal::from(input - cached) * price.input_per_mtok
        + Decimal::from(cached) * cached_price
        + Decimal::from(output) * price.output_per_mtok;
    dollars / Decimal::from(1_000_000)
}

/// A self-hosted answer's cost, estimated: one of the node's `max_running` sequence slots,
/// for as long as the answer took, at the node's GPU price.
pub fn slot_cost(pool: &PoolSpec, gpu_hourly_usd: Decimal, latency: Duration) -> Decimal {
    let node_hourly = gpu_hourly_usd * Decimal::from(pool.gpu_count);
    let millis = Decimal::from(latency.as_millis() as u64);
    (node_hourly * millis / Decimal::from(3_600_000u64) / Decimal::from(pool.max_running.max(1))).round_dp(9)
}

/// What one whole answer cost: list price on a priced hosted backend, a slot of its node
/// (see [`slot_cost`]) on a priced pool, else `None`.
pub fn call_cost(backend: &BackendConfig, usage: &Usage, latency: Duration) -> Option<Decimal> {
    if let Some(p) = &backend.price {
        let (input, cached, output) = (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens);
        return Some(hosted_cost(p, u64::from(input), u64::from(cached), u64::from(output)));
    }
    let pool = backend.pool()?;
    pool.gpu_hourly_usd.map(|hourly| slot_cost(pool, hourly, latency))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn price(cached: Option<&str>) -> Price {
        Price { input_per_mtok: d("5"), cached_input_per_mtok: cached.map(d), output_per_mtok: d("20") }
    }

    #[test]
    fn charges_each_kind_at_its_price() {
        // 1,000 fresh input at $5, 2,000 cached at $0.50, 300 output at $20 per million.
        assert_eq!(hosted_cost(&price(Some("0.5")), 3_000, 2_000, 300), d("0.012"));
        // No cache discount: every input token at the input price.
        assert_eq!(hosted_cost(&price(None), 3_000, 2_000, 300), d("0.021"));
        assert_eq!(hosted_cost(&price(Some("0.5")), 10, 50, 0), d("0.000005"));
        assert_eq!(hosted_cost(&price(None), 0, 0, 0), Decimal::ZERO);
    }

    #[test]
    fn one_token_is_not_rounded_away() {
        let p = Price { input_per_mtok: d("0.15"), cached_input_per_mtok: None, output_per_mtok: d("0.6") };
        assert_eq!(hosted_cost(&p, 1, 0, 1), d("0.00000075"));
    }

    #[test]
    fn a_pool_answer_costs_its_slot_for_as_long_as_it_took() {
        let pool: BackendConfig = serde_yaml_ng::from_str(
            "{name: p, kind: vllm, model: m, endpoints: ['http://h:1'], gpu_count: 2, max_running: 16}",
        )
        .unwrap();
        // 2 GPUs × $2.50 = $5/h for the node; 16 slots; 1.8 s → 5 × 1.8 / 3600 / 16.
        let cost = slot_cost(pool.pool().unwrap(), Decimal::new(250, 2), Duration::from_millis(1_800));
        assert_eq!(cost, Decimal::new(15625, 8));
    }
}
