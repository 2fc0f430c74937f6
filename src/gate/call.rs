//! One call made beside live traffic (a gate item, a judge's score, a shadow copy): the
//! backend's prompt variant, its adapter, its quota at batch priority, and the whole answer
//! collected with its latency, usage and list-price cost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rust_decimal::Decimal;
use tokio::time::Instant;

use crate::adapter::redact::{self, Redactor};
use crate::adapter::{Transport, Upstream};
use crate::canonical::{ChatRequest, Event, Usage};
use crate::config::{BackendConfig, PoolSpec, Priority, TaskConfig};
use crate::dispatch::{variant, wire_format};
use crate::guard::quota::{QuotaBoard, QuotaDecision};
use crate::ledger::hosted_cost;
use crate::tokens;

/// A backend's API key by backend name (read at call time, so a reload's keys apply).
pub type KeyLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What scrubs error texts of secrets now (read at call time, so a reload's keys apply).
pub type RedactorLookup = Arc<dyn Fn() -> Arc<Redactor> + Send + Sync>;

/// What a call needs from its surroundings.
#[derive(Clone)]
pub struct Caller {
    pub transport: Transport,
    /// API key by backend name.
    pub keys: KeyLookup,
    /// Scrubs every upstream error text before it becomes a [`CallError`].
    pub redactor: RedactorLookup,
    pub quota: Option<Arc<QuotaBoard>>,
    /// How long one call may take.
    pub timeout: Duration,
    /// Wait this long for quota before giving up on a call (gate runs wait; shadows do not).
    pub quota_wait: Duration,
}

impl Caller {
    /// A caller with keys from a fixed map (the CLI reads them from the environment); error
    /// texts are scrubbed of those keys.
    pub fn with_keys(
        transport: Transport,
        keys: HashMap<String, String>,
        quota: Option<Arc<QuotaBoard>>,
    ) -> Caller {
        let redactor = Arc::new(Redactor::new(keys.values()));
        Caller {
            transport,
            keys: Arc::new(move |b: &str| keys.get(b).cloned()),
            redactor: Arc::new(move || Arc::clone(&redactor)),
            quota,
            timeout: Duration::from_secs(120),
            quota_wait: Duration::from_secs(120),
        }
    }
}

/// A whole answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answered {
    /// The answer as graders see it ([`GradedText`]).
    pub text: String,
    pub usage: Usage,
    pub latency: Duration,
    /// List price of the call (hosted backends with a price), or for a priced pool an estimate
    /// from its GPU price (see [`slot_cost`]).
    pub cost: Option<Decimal>,
}

/// An answer as graders see it: the text, then each tool call as a `name(arguments)` line.
#[derive(Debug, Default)]
pub struct GradedText {
    text: String,
    calls: Vec<(String, String)>,
}

impl GradedText {
    pub fn add(&mut self, event: &Event) {
        match event {
            Event::TextDelta(t) => self.text.push_str(t),
            Event::ToolCallDelta { index, name, arguments, .. } => {
                let i = *index as usize;
                if self.calls.len() <= i {
                    self.calls.resize(i + 1, (String::new(), String::new()));
                }
                self.calls[i].0.push_str(name.as_deref().unwrap_or_default());
                self.calls[i].1.push_str(arguments);
            }
            Event::Usage(_) | Event::Finish(_) | Event::Relay(_) => {}
        }
    }

    pub fn finish(self) -> String {
        let mut out = self.text;
        for (name, arguments) in self.calls {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("{name}({arguments})"));
        }
        out
    }
}

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{class}: {message}")]
pub struct CallError {
    /// `over_quota` or the upstream error class.
    pub class: String,
    pub message: String,
    /// Whether the failure is the backend's (for its breaker): a timeout or an upstream error
    /// that counts against it, never a quota the router itself refused.
    pub counts_against_backend: bool,
}

impl Caller {
    /// Send `request` (its messages as the client wrote them) to `backend` at `base_url`.
    pub async fn ask(
        &self,
        task: Option<&TaskConfig>,
        backend: &BackendConfig,
        base_url: &str,
        request: &ChatRequest,
    ) -> Result<Answered, CallError> {
        let mut req = request.clone();
        req.model = backend.model.clone();
        req.stream = true;
        if let Some(task) = task {
            variant::apply(task, &backend.name, backend.kind(), &mut req);
        }
        let charged = self.take_quota(backend, &req).await?;
        let upstream = Upstream { base_url: base_url.to_string(), api_key: (self.keys)(&backend.name) };
        let started = Instant::now();
        let collected = tokio::time::timeout(
            self.timeout,
            collect(&self.redactor, backend, &self.transport, &upstream, &req),
        )
        .await;
        let result = match collected {
            Ok(result) => result,
            Err(_) => Err(CallError {
                class: "timeout".into(),
                message: format!("no answer in {:?}", self.timeout),
                counts_against_backend: true,
            }),
        };
        if let (Some(board), Some(estimate)) = (&self.quota, charged) {
            let actual =
                result.as_ref().map_or(0, |a| u64::from(a.usage.input_tokens + a.usage.output_tokens));
            board.refund(&backend.name, estimate, actual);
        }
        let mut answered = result?;
        answered.latency = started.elapsed();
        answered.cost = match (&backend.price, backend.pool()) {
            (Some(p), _) => {
                let u = answered.usage;
                let (input, cached, output) = (u.input_tokens, u.cached_input_tokens, u.output_tokens);
                Some(hosted_cost(p, u64::from(input), u64::from(cached), u64::from(output)))
            }
            (None, Some(pool)) => pool.gpu_hourly_usd.map(|hourly| slot_cost(pool, hourly, answered.latency)),
            _ => None,
        };
        Ok(answered)
    }

    /// Charge the backend's quota at batch priority, waiting up to `quota_wait` for room.
    async fn take_quota(&self, backend: &BackendConfig, req: &ChatRequest) -> Result<Option<u64>, CallError> {
        let Some(board) = &self.quota else { return Ok(None) };
        if board.limits(&backend.name).is_none() {
            return Ok(None);
        }
        let estimate = u64::from(tokens::counter_for(backend).count_request(req))
            + u64::from(req.max_tokens.unwrap_or(1024));
        let give_up = Instant::now() + self.quota_wait;
        loop {
            match board.try_take(&backend.name, estimate, Priority::Batch.quota_ceiling()).await {
                QuotaDecision::Granted => return Ok(Some(estimate)),
                QuotaDecision::OverQuota { .. } if Instant::now() < give_up => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                QuotaDecision::OverQuota { .. } => {
                    return Err(CallError {
                        class: "over_quota".into(),
                        message: format!("{} has no quota left for batch work this minute", backend.name),
                        counts_against_backend: false,
                    })
                }
            }
        }
    }
}

/// A self-hosted answer's cost, estimated: one of the node's `max_running` sequence slots,
/// for as long as the answer took, at the node's GPU price.
fn slot_cost(pool: &PoolSpec, gpu_hourly_usd: Decimal, latency: Duration) -> Decimal {
    let node_hourly = gpu_hourly_usd * Decimal::from(pool.gpu_count);
    let millis = Decimal::from(latency.as_millis() as u64);
    (node_hourly * millis / Decimal::from(3_600_000u64) / Decimal::from(pool.max_running.max(1))).round_dp(9)
}

async fn collect(
    redactor: &RedactorLookup,
    backend: &BackendConfig,
    transport: &Transport,
    upstream: &Upstream,
    req: &ChatRequest,
) -> Result<Answered, CallError> {
    let upstream_error = |e: crate::canonical::UpstreamError| CallError {
        class: e.class.as_str().to_string(),
        message: e.to_string(),
        counts_against_backend: e.class.counts_against_backend(),
    };
    let mut events = redact::send_scrubbed(redactor(), wire_format(backend.kind()), transport, upstream, req)
        .await
        .map_err(upstream_error)?;
    let mut answered = Answered::default();
    let mut text = GradedText::default();
    while let Some(event) = events.next().await {
        let event = event.map_err(upstream_error)?;
        if let Event::Usage(u) = event {
            answered.usage = u;
        }
        text.add(&event);
    }
    answered.text = text.finish();
    Ok(answered)
}

#[cfg(test)]
mod tests {
    use super::*;

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
