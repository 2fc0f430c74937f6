//! A modelled hosted provider: a log-normal time to first token that grows with the uncached
//! prompt, a fixed output speed, its own per-minute request and token limits (429 beyond them,
//! counting input plus output, less the prompt read from its cache where the backend's
//! `quota.count_cached_tokens` says the provider leaves those out), a background error rate,
//! outage windows (503), and a prompt cache per project that is warm when the project's
//! previous request here came within the cache window: a warm prefix is read from the cache,
//! a cold one is written to it (priced at `cache_write_per_mtok`, which router-placed
//! breakpoints make happen on Anthropic too).
//!
//! It decides each call's fate the moment the call is made; the engine turns the answer into
//! events. It must not know about the router's quotas or breakers: those are the router's
//! business, and a provider that the router over-drives answers 429 like a real one.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::Rng;

use super::clock::{from_ms, from_secs, Micros};
use super::scenario::ProviderModel;
use super::workload::normal;
use crate::canonical::ErrorClass;

/// What a call comes to, relative to when it was made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    /// The first token after `ttft`; the stream ends after `done`.
    Served {
        ttft: Micros,
        done: Micros,
        /// Prompt tokens read from the cache.
        cached: u32,
        /// Prompt tokens written to the cache.
        written: u32,
    },
    Failed {
        class: ErrorClass,
        after: Micros,
    },
}

/// One call's request as the provider sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub prompt: u32,
    pub prefix: u32,
    pub output: u32,
    pub project: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct Provider {
    model: ProviderModel,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub error_rate: f64,
    /// Outages in force (they may overlap).
    pub outages: u32,
    /// A slowdown in force: (ttft × factor, tokens per second ÷ factor); 1 and 1 without one.
    pub slowdown: (f64, f64),
    /// Whether tokens read from the cache count toward `tpm`.
    counts_cached: bool,
    minute: u64,
    requests: u64,
    tokens: u64,
    cache: HashMap<usize, Micros>,
}

impl Provider {
    pub fn new(model: &ProviderModel, counts_cached: bool) -> Provider {
        Provider {
            model: model.clone(),
            rpm: model.rpm,
            tpm: model.tpm,
            error_rate: model.error_rate,
            outages: 0,
            slowdown: (1.0, 1.0),
            counts_cached,
            minute: 0,
            requests: 0,
            tokens: 0,
            cache: HashMap::new(),
        }
    }

    pub fn model(&self) -> &ProviderModel {
        &self.model
    }

    /// Make a call at `now` (in wall-clock minute `minute`).
    pub fn call(&mut self, call: Call, now: Micros, minute: u64, rng: &mut StdRng) -> Answer {
        let error_after = from_ms(self.model.error_ms);
        if self.outages > 0 {
            return Answer::Failed { class: ErrorClass::Overloaded, after: error_after };
        }
        if minute != self.minute {
            (self.minute, self.requests, self.tokens) = (minute, 0, 0);
        }
        let warm = self
            .cache
            .get(&call.project)
            .is_some_and(|last| now.saturating_sub(*last) <= from_secs(self.model.prompt_cache.0));
        let prefix = call.prefix.min(call.prompt);
        let (cached, written) = if warm { (prefix, 0) } else { (0, prefix) };
        let counted = if self.counts_cached { call.prompt } else { call.prompt - cached };
        let tokens = u64::from(counted) + u64::from(call.output);
        let over = self.rpm.is_some_and(|rpm| self.requests + 1 > rpm)
            || self.tpm.is_some_and(|tpm| self.tokens + tokens > tpm);
        if over {
            return Answer::Failed { class: ErrorClass::RateLimited, after: error_after / 3 };
        }
        self.requests += 1;
        self.tokens += tokens;
        if rng.gen::<f64>() < self.error_rate {
            return Answer::Failed { class: ErrorClass::ServerError, after: error_after };
        }
        self.cache.insert(call.project, now);
        let base = self.model.ttft_ms * (self.model.ttft_jitter * normal(rng)).exp();
        let prefill = self.model.per_1k_prompt_ms * f64::from(call.prompt - cached) / 1000.0;
        let (ttft_factor, tps_factor) = self.slowdown;
        let ttft = from_ms((base + prefill) * ttft_factor);
        let done = ttft + from_secs(f64::from(call.output) * tps_factor / self.model.tokens_per_sec);
        Answer::Served { ttft, done, cached, written }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn quota_outage_and_cache() {
        let model =
            ProviderModel { rpm: Some(2), error_rate: 0.0, ttft_jitter: 0.0, ..ProviderModel::default() };
        let mut p = Provider::new(&model, false);
        let mut rng = StdRng::seed_from_u64(1);
        let call = Call { prompt: 1000, prefix: 600, output: 80, project: 3 };
        let Answer::Served { cached, written, .. } = p.call(call, 0, 0, &mut rng) else { panic!() };
        assert_eq!((cached, written), (0, 600), "a cold prefix is written");
        let Answer::Served { cached, written, ttft, .. } = p.call(call, 1_000_000, 0, &mut rng) else {
            panic!()
        };
        assert_eq!((cached, written), (600, 0), "and read back");
        assert_eq!(ttft, from_ms(450.0 + 40.0 * 0.4));
        assert!(matches!(
            p.call(call, 2_000_000, 0, &mut rng),
            Answer::Failed { class: ErrorClass::RateLimited, .. }
        ));
        assert!(matches!(p.call(call, 61_000_000, 1, &mut rng), Answer::Served { .. }), "a new minute");
        // Slowed down three times (first token) and twice (output): the cache is warm, so 400
        // uncached tokens at 40 ms per 1k on 450 ms; 80 tokens at half the default speed.
        p.slowdown = (3.0, 2.0);
        let Answer::Served { ttft, done, .. } = p.call(call, 200_000_000, 3, &mut rng) else { panic!() };
        assert_eq!(ttft, from_ms(466.0 * 3.0));
        assert_eq!(done - ttft, from_secs(80.0 * 2.0 / model.tokens_per_sec));
        p.slowdown = (1.0, 1.0);
        p.outages = 1;
        assert!(matches!(
            p.call(call, 62_000_000, 1, &mut rng),
            Answer::Failed { class: ErrorClass::Overloaded, .. }
        ));
    }

    #[test]
    fn the_token_limit_counts_cache_reads_only_where_the_provider_does() {
        let model = ProviderModel { tpm: Some(2_000), error_rate: 0.0, ..ProviderModel::default() };
        let call = Call { prompt: 1000, prefix: 900, output: 0, project: 1 };
        let served = |counts_cached: bool| {
            let mut p = Provider::new(&model, counts_cached);
            let mut rng = StdRng::seed_from_u64(1);
            (0..5)
                .take_while(|i| matches!(p.call(call, i * 1_000_000, 0, &mut rng), Answer::Served { .. }))
                .count()
        };
        // Counting reads: 1,000 tokens each, two fit in 2,000.
        assert_eq!(served(true), 2);
        // Leaving them out: 1,000, then 100 a request once the prefix is warm.
        assert_eq!(served(false), 5);
    }
}
