//! What a call costs: a hosted request at its backend's list prices, a pool's answer as a
//! share of its node's GPU price. Exact decimal arithmetic; no I/O.

use std::time::Duration;

use rust_decimal::Decimal;
use serde::Serialize;

use super::LedgerRecord;
use crate::canonical::Usage;
use crate::config::{BackendConfig, PoolSpec, Price};
use crate::outcome::AnswerCost;

/// Token counts to price or report, summed over any number of requests. `input` counts every
/// prompt token, those read from the prompt cache (`cached_input`) and written to it
/// (`cache_write`) included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub cached_input: u64,
    pub cache_write: u64,
    pub output: u64,
}

impl Tokens {
    /// One request's counts.
    pub fn of(u: &Usage) -> Tokens {
        Tokens {
            input: u64::from(u.input_tokens),
            cached_input: u64::from(u.cached_input_tokens),
            cache_write: u64::from(u.cache_write_tokens),
            output: u64::from(u.output_tokens),
        }
    }

    /// Add a stored row's counts (a negative count, which no writer stores, as zero).
    pub fn add(&mut self, r: &LedgerRecord) {
        self.input += r.input_tokens.max(0) as u64;
        self.cached_input += r.cached_input_tokens.max(0) as u64;
        self.cache_write += r.cache_write_tokens.max(0) as u64;
        self.output += r.output_tokens.max(0) as u64;
    }

    /// Input and output.
    pub fn total(&self) -> u64 {
        self.input + self.output
    }
}

impl std::ops::AddAssign for Tokens {
    fn add_assign(&mut self, other: Tokens) {
        self.input += other.input;
        self.cached_input += other.cached_input;
        self.cache_write += other.cache_write;
        self.output += other.output;
    }
}

/// Dollars for `t` at `price` (per million tokens): input neither read from the provider's
/// prompt cache nor written to it at `input_per_mtok`, cache reads at `cached_input_per_mtok`
/// and cache writes at `cache_write_per_mtok` (each the input price when not given), output
/// at `output_per_mtok`. Reads and writes beyond `input` are cut to it, reads first.
pub fn hosted_cost(price: &Price, t: &Tokens) -> Decimal {
    let read = t.cached_input.min(t.input);
    let written = t.cache_write.min(t.input - read);
    let uncached = t.input - read - written;
    let read_price = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
    let write_price = price.cache_write_per_mtok.unwrap_or(price.input_per_mtok);
    let dollars = Decimal::from(uncached) * price.input_per_mtok
        + Decimal::from(read) * read_price
        + Decimal::from(written) * write_price
        + Decimal::from(t.output) * price.output_per_mtok;
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
pub fn call_cost(backend: &BackendConfig, usage: &Usage, latency: Duration) -> Option<AnswerCost> {
    if let Some(p) = &backend.price {
        return Some(AnswerCost::ListPrice(hosted_cost(p, &Tokens::of(usage))));
    }
    let pool = backend.pool()?;
    pool.gpu_hourly_usd.map(|hourly| AnswerCost::GpuSlot(slot_cost(pool, hourly, latency)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn price(cached: Option<&str>, write: Option<&str>) -> Price {
        Price {
            input_per_mtok: d("5"),
            cached_input_per_mtok: cached.map(d),
            output_per_mtok: d("20"),
            cache_write_per_mtok: write.map(d),
        }
    }

    fn tokens(input: u64, cached_input: u64, cache_write: u64, output: u64) -> Tokens {
        Tokens { input, cached_input, cache_write, output }
    }

    #[test]
    fn charges_each_kind_at_its_price() {
        // 1,000 fresh input at $5, 2,000 cached at $0.50, 300 output at $20 per million.
        assert_eq!(hosted_cost(&price(Some("0.5"), None), &tokens(3_000, 2_000, 0, 300)), d("0.012"));
        // No cache discount: every input token at the input price.
        assert_eq!(hosted_cost(&price(None, None), &tokens(3_000, 2_000, 0, 300)), d("0.021"));
        assert_eq!(hosted_cost(&price(Some("0.5"), None), &tokens(10, 50, 0, 0)), d("0.000005"));
        assert_eq!(hosted_cost(&price(None, None), &tokens(0, 0, 0, 0)), Decimal::ZERO);
    }

    #[test]
    fn cache_writes_cost_their_own_price_and_reads_a_tenth() {
        // Anthropic's Sonnet prices: $3 input, $3.75 five-minute writes, $0.30 reads, $15 output.
        let sonnet = Price {
            input_per_mtok: d("3"),
            cached_input_per_mtok: Some(d("0.3")),
            output_per_mtok: d("15"),
            cache_write_per_mtok: Some(d("3.75")),
        };
        // A first request: 12 fresh tokens, 6,000 written, 200 out:
        // 12 × 3 + 6,000 × 3.75 + 200 × 15 = 36 + 22,500 + 3,000 = 25,536 per million.
        assert_eq!(hosted_cost(&sonnet, &tokens(6_012, 0, 6_000, 200)), d("0.025536"));
        // The same prompt again, read back: 12 × 3 + 6,000 × 0.3 + 200 × 15 = 4,836.
        assert_eq!(hosted_cost(&sonnet, &tokens(6_012, 6_000, 0, 200)), d("0.004836"));
        // Uncached, the prompt would have cost 6,012 × 3 + 3,000 = 21,036.
        assert_eq!(hosted_cost(&sonnet, &tokens(6_012, 0, 0, 200)), d("0.021036"));
        // Both at once: 100 fresh, 4,000 read, 1,900 written.
        // 300 + 1,200 + 7,125 = 8,625, + 200 × 15 = 11,625.
        assert_eq!(hosted_cost(&sonnet, &tokens(6_000, 4_000, 1_900, 200)), d("0.011625"));
        // No write price: writes cost what input does.
        assert_eq!(hosted_cost(&price(Some("0.5"), None), &tokens(6_012, 0, 6_000, 0)), d("0.03006"));
        // Counts beyond the input are cut to it, reads first.
        assert_eq!(hosted_cost(&sonnet, &tokens(100, 80, 50, 0)), d("0.000099"));
    }

    #[test]
    fn one_token_is_not_rounded_away() {
        let p = Price {
            input_per_mtok: d("0.15"),
            cached_input_per_mtok: None,
            output_per_mtok: d("0.6"),
            cache_write_per_mtok: None,
        };
        assert_eq!(hosted_cost(&p, &tokens(1, 0, 0, 1)), d("0.00000075"));
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
