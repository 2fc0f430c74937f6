//! One request's token stream, whatever produces it, with its faults applied.
//!
//! The wire modules only translate; they read a `Generation` with `next()` and turn each
//! `GenEvent` into the provider's frames. Tokens come either from the vLLM engine loop or
//! from a hosted-provider pacer (fixed time to first token, then a fixed token rate). The
//! fault plan's timing (`hang`, `ttft_ms`, `token_delay_ms`) and its stream faults
//! (`drop_after`, `error_after`) are applied here, once, for every wire format, and so is the
//! quote of the request's credentials an error carries with `--echo-credentials`.

use super::engine::FinishReason;
use super::faults::FaultPlan;
use super::text::TextGen;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Token counts reported in a reply's usage.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub prompt_tokens: u32,
    /// Prompt tokens served from a prompt/prefix cache.
    pub cached_tokens: u32,
    /// Prompt tokens written to the cache (Anthropic's `cache_creation_input_tokens`).
    pub cache_write_tokens: u32,
    pub completion_tokens: u32,
}

/// What a reader of a `Generation` sees next.
#[derive(Clone, Debug, PartialEq)]
pub enum GenEvent {
    Token(String),
    /// The last token, with the reply's usage and finish reason.
    Final(String, Usage, FinishReason),
    /// Fault: close the connection abruptly now.
    Drop,
    /// Fault: send an in-band error event and end the stream.
    Fail,
}

/// A request in provider-neutral form, as the wire modules decode it.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// All prompt text (system + messages) in order; drives token counts and the reply.
    pub prompt: String,
    pub max_tokens: Option<u32>,
    /// Anthropic Messages: where each content block of `prompt` ends (tools, system,
    /// messages) and which carry `cache_control`; empty for the other wire formats.
    pub cache_blocks: Vec<super::prompt_cache::BlockEnd>,
    /// The tool this request would have called (the one `tool_choice` names, else the first
    /// declared), when it declares tools and its last message is not a tool result.
    pub tool: Option<String>,
}

/// Output length for a request: the default length, cut by `max_tokens` (then "length").
pub fn output_len(default: u32, max_tokens: Option<u32>) -> (u32, bool) {
    match max_tokens {
        Some(m) if m < default => (m.max(1), true),
        _ => (default.max(1), false),
    }
}

/// The token stream of one request.
pub struct Generation {
    pub prompt_tokens: u32,
    rx: mpsc::UnboundedReceiver<GenEvent>,
    plan: FaultPlan,
    /// Extra wait before the first token (engine kinds; hosted kinds pace it themselves).
    first_delay: Duration,
    emitted: u32,
    failed: bool,
    shutdown: watch::Receiver<bool>,
    /// `--echo-credentials`: what every error of this answer quotes back.
    pub echo: Option<String>,
}

impl Generation {
    pub fn new(
        prompt_tokens: u32,
        rx: mpsc::UnboundedReceiver<GenEvent>,
        plan: FaultPlan,
        first_delay: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Generation {
        Generation { prompt_tokens, rx, plan, first_delay, emitted: 0, failed: false, shutdown, echo: None }
    }

    /// The words of this answer's in-band error: `what`, and the echo when there is one.
    pub fn failure(&self, what: &str) -> String {
        super::echo::with(what.to_string(), self.echo.as_deref())
    }

    /// The next event; `None` means the producer vanished (treat as an abrupt close).
    pub async fn next(&mut self) -> Option<GenEvent> {
        if self.plan.hang {
            let _ = self.shutdown.wait_for(|down| *down).await;
            return None;
        }
        if self.failed {
            return None;
        }
        if self.plan.drop_after.is_some_and(|n| self.emitted >= n) {
            return Some(GenEvent::Drop);
        }
        if self.plan.error_after.is_some_and(|n| self.emitted >= n) {
            self.failed = true;
            return Some(GenEvent::Fail);
        }
        let ev = self.rx.recv().await?;
        if let GenEvent::Token(_) | GenEvent::Final(..) = ev {
            let mut wait = Duration::from_millis(self.plan.token_delay_ms);
            if self.emitted == 0 {
                wait += self.first_delay;
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            self.emitted += 1;
        }
        Some(ev)
    }

    /// Read to the end: the whole text, usage and finish reason, or the fault that ended it.
    pub async fn collect(&mut self) -> Result<(String, Usage, FinishReason), GenEvent> {
        let mut text = String::new();
        loop {
            match self.next().await {
                Some(GenEvent::Token(t)) => text.push_str(&t),
                Some(GenEvent::Final(t, u, f)) => {
                    text.push_str(&t);
                    return Ok((text, u, f));
                }
                Some(GenEvent::Fail) => return Err(GenEvent::Fail),
                Some(GenEvent::Drop) | None => return Err(GenEvent::Drop),
            }
        }
    }
}

/// Hosted-provider pacing: fixed time to first token, then a fixed token rate.
pub struct HostedPacer {
    pub ttft: Duration,
    pub tokens_per_sec: f64,
}

impl HostedPacer {
    /// Spawn the pacer for one reply of `n` tokens; events go to the returned receiver.
    pub fn start(
        &self,
        ttft: Option<Duration>,
        mut text: TextGen,
        n: u32,
        limited: bool,
        usage: Usage,
    ) -> mpsc::UnboundedReceiver<GenEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let ttft = ttft.unwrap_or(self.ttft);
        let gap = Duration::from_secs_f64(1.0 / self.tokens_per_sec.max(0.001));
        tokio::spawn(async move {
            tokio::time::sleep(ttft).await;
            let finish = if limited { FinishReason::Length } else { FinishReason::Stop };
            for i in 1..=n {
                let t = text.next_token();
                let ev = if i == n {
                    GenEvent::Final(t, Usage { completion_tokens: n, ..usage }, finish)
                } else {
                    GenEvent::Token(t)
                };
                if tx.send(ev).is_err() {
                    return;
                }
                tokio::time::sleep(gap).await;
            }
        });
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_len_cuts_with_length() {
        assert_eq!(output_len(64, None), (64, false));
        assert_eq!(output_len(64, Some(100)), (64, false));
        assert_eq!(output_len(64, Some(5)), (5, true));
    }

    #[tokio::test]
    async fn drop_after_and_error_event() {
        let (_tx, shutdown) = watch::channel(false);
        let pacer = HostedPacer { ttft: Duration::ZERO, tokens_per_sec: 10_000.0 };
        let rx = pacer.start(None, TextGen::new(1, "p"), 10, false, Usage::default());
        let plan = FaultPlan { drop_after: Some(2), ..FaultPlan::default() };
        let mut g = Generation::new(1, rx, plan, Duration::ZERO, shutdown.clone());
        assert!(matches!(g.next().await, Some(GenEvent::Token(_))));
        assert!(matches!(g.next().await, Some(GenEvent::Token(_))));
        assert_eq!(g.next().await, Some(GenEvent::Drop));

        let rx = pacer.start(None, TextGen::new(1, "p"), 10, false, Usage::default());
        let plan = FaultPlan { error_after: Some(1), ..FaultPlan::default() };
        let mut g = Generation::new(1, rx, plan, Duration::ZERO, shutdown.clone());
        assert!(matches!(g.next().await, Some(GenEvent::Token(_))));
        assert_eq!(g.collect().await.unwrap_err(), GenEvent::Fail);

        let rx = pacer.start(None, TextGen::new(1, "p"), 10, false, Usage::default());
        let plan = FaultPlan { error_after: Some(0), ..FaultPlan::default() };
        let mut g = Generation::new(1, rx, plan, Duration::ZERO, shutdown);
        assert_eq!(g.next().await, Some(GenEvent::Fail), "before the first token");
        g.echo = Some("[echo]".into());
        assert_eq!(g.failure("broke"), "broke [echo]");
    }
}
