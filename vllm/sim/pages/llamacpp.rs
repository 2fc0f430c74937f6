//! The simulated node as llama.cpp's `llama-server --metrics` page.
//!
//! Names as `tests/fixtures/engines/llamacpp.prom` (from `tools/server/server.cpp`'s
//! `/metrics` handler): unlabelled, `requests_processing` (busy slots) and `requests_deferred`
//! (tasks waiting for a slot), the prompt and predict counters, `n_decode_total` and the
//! largest batch seen. Like llama-server, prompt tokens count once their prompt is evaluated
//! (only the tokens not reused from the slot's cache), predicted tokens when the slot
//! finishes, and the two throughput gauges cover what happened since the previous `/metrics`
//! call: each call resets them, and with nothing processed they are NaN. There is no latency
//! histogram and, as in current builds, no KV gauge; the slot count is `/props`'s.

use super::{Families, Finished, Load, Page, Step, Token};
use prometheus::{Counter, Gauge, IntCounter, IntGauge};
use std::sync::Mutex;

/// Work done since the last `/metrics` call (llama-server's "bucket").
#[derive(Default)]
struct Bucket {
    prompt_tokens: u64,
    prompt_secs: f64,
    predicted_tokens: u64,
    predicted_secs: f64,
}

/// Handles to the llama.cpp series the simulated node updates.
pub struct LlamacppPage {
    families: Families,
    bucket: Mutex<Bucket>,
    prompt_tokens: IntCounter,
    prompt_seconds: Counter,
    predicted: IntCounter,
    predicted_seconds: Counter,
    decodes: IntCounter,
    tokens_max: IntCounter,
    prompt_tps: Gauge,
    predicted_tps: Gauge,
    processing: IntGauge,
    deferred: IntGauge,
}

impl LlamacppPage {
    pub fn new(_facts: &super::NodeFacts) -> LlamacppPage {
        let f = Families::new(&[]);
        LlamacppPage {
            bucket: Mutex::new(Bucket::default()),
            prompt_tokens: f
                .int_counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed."),
            prompt_seconds: f.counter("llamacpp:prompt_seconds_total", "Prompt process time"),
            predicted: f
                .int_counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed."),
            predicted_seconds: f.counter("llamacpp:tokens_predicted_seconds_total", "Predict process time"),
            decodes: f.int_counter("llamacpp:n_decode_total", "Total number of llama_decode() calls"),
            tokens_max: f.int_counter("llamacpp:n_tokens_max", "Largest observed n_tokens."),
            prompt_tps: f.gauge("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s."),
            predicted_tps: f
                .gauge("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s."),
            processing: f.int_gauge("llamacpp:requests_processing", "Number of requests processing."),
            deferred: f.int_gauge("llamacpp:requests_deferred", "Number of requests deferred."),
            families: f,
        }
    }
}

/// Tokens per second, NaN (llama-server's 0/0) when no time was spent.
fn per_sec(tokens: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        f64::NAN
    }
}

impl Page for LlamacppPage {
    fn load(&self, l: &Load) {
        self.processing.set(l.running as i64);
        self.deferred.set(l.waiting as i64);
    }

    fn stepped(&self, s: &Step) {
        self.decodes.inc();
        let n_tokens = s.prefill_tokens + s.scheduled as u64;
        let max = self.tokens_max.get();
        if n_tokens > max {
            self.tokens_max.inc_by(n_tokens - max);
        }
    }

    fn token(&self, t: &Token) {
        if let Token::First { prefill_secs, prompt_tokens, cached_tokens, .. } = *t {
            let processed = prompt_tokens.saturating_sub(cached_tokens) as u64;
            self.prompt_tokens.inc_by(processed);
            self.prompt_seconds.inc_by(prefill_secs);
            let mut b = self.bucket.lock().expect("bucket");
            b.prompt_tokens += processed;
            b.prompt_secs += prefill_secs;
        }
    }

    fn finished(&self, f: &Finished) {
        self.predicted.inc_by(f.generated as u64);
        self.predicted_seconds.inc_by(f.decode_secs);
        let mut b = self.bucket.lock().expect("bucket");
        b.predicted_tokens += f.generated as u64;
        b.predicted_secs += f.decode_secs;
    }

    fn encode(&self) -> String {
        let b = std::mem::take(&mut *self.bucket.lock().expect("bucket"));
        self.prompt_tps.set(per_sec(b.prompt_tokens, b.prompt_secs));
        self.predicted_tps.set(per_sec(b.predicted_tokens, b.predicted_secs));
        self.families.encode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::engines::{read, Engine};
    use crate::sim::engine::FinishReason;

    #[test]
    fn throughput_covers_the_time_since_the_last_call() {
        let facts = super::super::NodeFacts {
            model: "m".into(),
            max_num_seqs: 2,
            num_gpu_blocks: 10,
            block_size: 16,
            prefix_caching: true,
            legacy_names: false,
        };
        let p = LlamacppPage::new(&facts);
        p.token(&Token::First { ttft: 0.5, prefill_secs: 0.25, prompt_tokens: 100, cached_tokens: 50 });
        let (e2e, queue_secs, ttft, decode_secs) = (2.5, 0.25, 0.5, 2.0);
        let reason = FinishReason::Stop;
        p.finished(&Finished {
            reason,
            prompt_tokens: 100,
            cached_tokens: 50,
            generated: 40,
            e2e,
            queue_secs,
            ttft,
            decode_secs,
        });
        let s = read(Engine::Llamacpp, &p.encode()).unwrap();
        // Only the 50 uncached prompt tokens were evaluated.
        assert_eq!((s.prompt_tokens, s.reported_prefill_tps), (Some(50.0), Some(200.0)));
        assert_eq!((s.generation_tokens, s.reported_decode_tps), (Some(40.0), Some(20.0)));
        // The call reset them: nothing since, so no speed (NaN), while the totals stay.
        let s = read(Engine::Llamacpp, &p.encode()).unwrap();
        assert_eq!((s.reported_prefill_tps, s.reported_decode_tps), (None, None));
        assert_eq!(s.generation_seconds, Some(2.0));
    }
}
