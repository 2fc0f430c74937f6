//! The simulated node as Hugging Face TGI's `/metrics` page.
//!
//! Names as `tests/fixtures/engines/tgi.prom` (TGI's router, `metrics::counter!/gauge!/
//! histogram!` rendered by `metrics-exporter-prometheus`): no labels but `method`, counters
//! without `_total`, durations in seconds with the router's 35 geometric buckets and length
//! histograms bucketed by hundredths of the token limits. Like TGI's router, the request count
//! and input length are recorded on arrival, the queue size and the running batch's size and
//! tokens after every scheduler change, and the durations and generated tokens when a
//! request finishes; TGI has no TTFT histogram, no KV ratio and no capacity on this page (its
//! token budget is on `/info`), and neither does the sim.

use super::{Families, Finished, Load, NodeFacts, Page, Step};
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};

/// TGI's per-request limits for a node of `facts`: (`max_input_tokens`, `max_total_tokens`).
/// The sim refuses only what can never fit its KV cache, so both come from its size.
pub fn limits(facts: &NodeFacts) -> (usize, usize) {
    let total = facts.kv_tokens().max(2);
    (total - 1, total)
}

/// The router's duration buckets: 35 steps of ×1.5 from 0.1 ms.
fn duration_buckets() -> Vec<f64> {
    (1..=35).map(|k| 0.0001 * 1.5f64.powi(k)).collect()
}

/// Hundredths of `limit`, as the router buckets its length histograms.
fn length_buckets(limit: usize) -> Vec<f64> {
    (1..=100).map(|x| limit as f64 / 100.0 * x as f64).collect()
}

/// Handles to the TGI series the simulated node updates.
pub struct TgiPage {
    families: Families,
    block_size: usize,
    requests: IntCounter,
    success: IntCounter,
    queue_size: IntGauge,
    batch_size: IntGauge,
    batch_tokens: IntGauge,
    batches: IntCounterVec,
    queue: Histogram,
    inference: Histogram,
    per_token: Histogram,
    duration: Histogram,
    input_length: Histogram,
    max_new_tokens: Histogram,
    generated: Histogram,
}

impl TgiPage {
    pub fn new(facts: &NodeFacts) -> TgiPage {
        let f = Families::new(&[]);
        let (max_input, max_total) = limits(facts);
        let d = duration_buckets();
        let seconds = |name: &str, help: &str| f.histogram(name, help, &d);
        TgiPage {
            block_size: facts.block_size,
            requests: f.int_counter("tgi_request_count", "Total number of requests"),
            success: f.int_counter("tgi_request_success", "Number of successful requests"),
            queue_size: f.int_gauge("tgi_queue_size", "Current queue size"),
            batch_size: f.int_gauge("tgi_batch_current_size", "Current batch size"),
            batch_tokens: f.int_gauge("tgi_batch_current_max_tokens", "Maximum tokens for the current batch"),
            batches: f.int_counter_vec(
                "tgi_batch_inference_count",
                "Inference calls per method",
                &["method"],
            ),
            queue: seconds("tgi_request_queue_duration", "Time spent in the queue per request"),
            inference: seconds("tgi_request_inference_duration", "Request inference duration"),
            per_token: seconds("tgi_request_mean_time_per_token_duration", "Mean time per token per request"),
            duration: seconds("tgi_request_duration", "Request duration"),
            input_length: f.histogram(
                "tgi_request_input_length",
                "Input token length per request",
                &length_buckets(max_input),
            ),
            max_new_tokens: f.histogram(
                "tgi_request_max_new_tokens",
                "Maximum new tokens per request",
                &length_buckets(max_total),
            ),
            generated: f.histogram(
                "tgi_request_generated_tokens",
                "Generated tokens per request",
                &length_buckets(max_total),
            ),
            families: f,
        }
    }
}

impl Page for TgiPage {
    fn arrived(&self, prompt_tokens: u32, max_tokens: u32) {
        self.requests.inc();
        self.input_length.observe(prompt_tokens as f64);
        self.max_new_tokens.observe(max_tokens as f64);
    }

    fn load(&self, l: &Load) {
        self.queue_size.set(l.waiting as i64);
        self.batch_size.set(l.running as i64);
        self.batch_tokens.set((l.used_blocks * self.block_size) as i64);
    }

    fn stepped(&self, s: &Step) {
        if s.prefilling > 0 {
            self.batches.with_label_values(&["prefill"]).inc();
        }
        if s.scheduled > s.prefilling {
            self.batches.with_label_values(&["decode"]).inc();
        }
    }

    fn finished(&self, f: &Finished) {
        let inference = (f.e2e - f.queue_secs).max(0.0);
        self.success.inc();
        self.queue.observe(f.queue_secs);
        self.inference.observe(inference);
        self.per_token.observe(inference / f.generated.max(1) as f64);
        self.duration.observe(f.e2e);
        self.generated.observe(f.generated as f64);
    }

    fn encode(&self) -> String {
        self.families.encode()
    }
}
