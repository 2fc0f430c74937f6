//! What a hosted request costs at its backend's list prices. Exact decimal arithmetic; no I/O.

use std::collections::HashMap;

use rust_decimal::Decimal;

use crate::config::{Config, Price};
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
}
