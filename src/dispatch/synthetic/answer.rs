//! A synthetic call's whole answer, as graders see it, with its usage, latency and cost; and
//! why a call got none, as data. Every message here comes from dispatch, whose upstream error
//! texts have already been through the redactor.

use std::time::Duration;

use futures::StreamExt;
use rust_decimal::Decimal;
use tokio::time::Instant;

use crate::canonical::{ErrorClass, Event, Usage, WholeAnswer};
use crate::config::BackendId;
use crate::dispatch::{Committed, DispatchError};
use crate::outcome::{AnswerCost, Skip};
use crate::route::Plan;
use crate::snapshot::Snapshot;

/// A whole answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answered {
    /// The backend that answered.
    pub backend: String,
    /// The answer as graders see it ([`GradedText`]).
    pub text: String,
    pub usage: Usage,
    /// The first token's wait, from the call that answered.
    pub ttft: Duration,
    /// From the walk's start to the last event.
    pub latency: Duration,
    /// List price of the call (hosted backends with a price), or for a priced pool an estimate
    /// from its GPU price ([`crate::ledger::slot_cost`]).
    pub cost: Option<Decimal>,
}

/// An answer as graders see it: the text, then each tool call as a `name(arguments)` line.
#[derive(Debug, Default)]
pub struct GradedText(WholeAnswer);

impl GradedText {
    pub fn add(&mut self, event: &Event) {
        self.0.add(event);
    }

    pub fn finish(self) -> String {
        let mut out = self.0.text;
        for call in self.0.tool_calls {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("{}({})", call.name, call.arguments));
        }
        out
    }
}

/// Why a synthetic call got no answer. `Display` is `class: message`, except where noted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SyntheticError {
    /// The bound on synthetic calls in flight is reached (shadows do not wait for room).
    #[error("busy: the synthetic calls allowed in flight are all running")]
    Busy,
    /// The destination is not in the snapshot.
    #[error("no_target: no such backend or node")]
    NoTarget,
    /// The task's data class may not reach the backend.
    #[error("refused: {backend}: {why}")]
    Refused { backend: String, why: String },
    /// The backend lacks what the request needs (tools, images, context window).
    #[error("unfit: {0}")]
    Unfit(String),
    /// Every node of the backend is held by an operator (the message alone).
    #[error("every node is held by an operator")]
    Held,
    /// No node has room for batch work now: no headroom, the batch reserve, a full node.
    #[error("no_capacity: {0}")]
    NoCapacity(String),
    /// The backend's quota for batch work is used up this minute.
    #[error("over_quota: {0} has no quota left for batch work this minute")]
    OverQuota(String),
    /// Every node's breaker is open (or held by an upstream's Retry-After).
    #[error("breaker_open: {0}")]
    BreakerOpen(String),
    /// The upstream failed or refused: `message` as dispatch recorded it.
    #[error("{}: {message}", .class.as_str())]
    Failed { class: ErrorClass, message: String },
    /// Every target was tried or skipped: each attempt, then the last upstream message (the
    /// message alone).
    #[error("{tried}")]
    Exhausted { class: ErrorClass, tried: String },
}

impl SyntheticError {
    /// The class as a label: `busy`, `over_quota`, `breaker_open`, an upstream error class…
    pub fn class(&self) -> &'static str {
        match self {
            SyntheticError::Busy => "busy",
            SyntheticError::NoTarget => "no_target",
            SyntheticError::Refused { .. } => "refused",
            SyntheticError::Unfit(_) => "unfit",
            SyntheticError::Held | SyntheticError::NoCapacity(_) => "no_capacity",
            SyntheticError::OverQuota(_) => "over_quota",
            SyntheticError::BreakerOpen(_) => "breaker_open",
            SyntheticError::Failed { class, .. } | SyntheticError::Exhausted { class, .. } => class.as_str(),
        }
    }

    /// What went wrong, without the class.
    pub fn message(&self) -> String {
        let full = self.to_string();
        match full.strip_prefix(self.class()).and_then(|m| m.strip_prefix(": ")) {
            Some(rest) => rest.to_string(),
            None => full,
        }
    }

    /// A plan with no target: why, from what it spilled past.
    pub(super) fn no_capacity(snap: &Snapshot, plan: &Plan, backend: BackendId) -> SyntheticError {
        let view = &snap.backends[backend];
        if plan.spills.is_empty() && !view.nodes.is_empty() && view.nodes.iter().all(|n| n.held.is_some()) {
            return SyntheticError::Held;
        }
        let why: Vec<String> = plan
            .spills
            .iter()
            .map(|s| format!("{}: {}", snap.backends[s.backend].nodes[s.node].origin, s.reason.as_str()))
            .collect();
        match why.is_empty() {
            true => SyntheticError::NoCapacity(format!("{} has no node to call", view.name)),
            false => SyntheticError::NoCapacity(why.join("; ")),
        }
    }

    /// What dispatch's refusal means for a synthetic call.
    pub(super) fn from_dispatch(e: DispatchError) -> SyntheticError {
        match e {
            DispatchError::Rejected { error, .. } => {
                SyntheticError::Failed { class: error.class, message: error.message }
            }
            DispatchError::Shed { why } => SyntheticError::NoCapacity(why),
            DispatchError::Exhausted { attempts } => {
                let backend = attempts.first().map(|a| a.backend.clone()).unwrap_or_default();
                let skipped = |why: Skip| attempts.iter().all(|a| a.skipped == Some(why));
                if !attempts.is_empty() && attempts.iter().all(|a| a.skipped.is_some()) {
                    if attempts.iter().any(|a| a.skipped == Some(Skip::OverQuota)) {
                        return SyntheticError::OverQuota(backend);
                    }
                    if skipped(Skip::BreakerOpen) {
                        return SyntheticError::BreakerOpen(backend);
                    }
                }
                let mut tried = attempts.iter().map(|a| a.describe()).collect::<Vec<_>>().join("; ");
                let last = attempts.iter().rev().find(|a| a.error_class.is_some());
                if let Some(message) = last.and_then(|a| a.message.as_deref()) {
                    tried = format!("{tried} ({message})");
                }
                let class = last.and_then(|a| a.error_class).unwrap_or(ErrorClass::Overloaded);
                SyntheticError::Exhausted { class, tried }
            }
        }
    }
}

/// Read a committed answer to its end, within `timeout` of the walk's start.
pub(super) async fn collect(
    committed: Committed,
    started: Instant,
    timeout: Duration,
) -> Result<Answered, SyntheticError> {
    let mut answered = Answered { backend: committed.backend, ttft: committed.ttft, ..Answered::default() };
    let mut events = committed.events;
    let mut text = GradedText::default();
    let read = async {
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| SyntheticError::Failed { class: e.class, message: e.message })?;
            if let Event::Usage(u) = event {
                answered.usage = u;
            }
            text.add(&event);
        }
        Ok(())
    };
    let left = timeout.saturating_sub(started.elapsed());
    match tokio::time::timeout(left, read).await {
        Ok(read) => read?,
        Err(_) => {
            let message = format!("no answer in {timeout:?}");
            return Err(SyntheticError::Failed { class: ErrorClass::Timeout, message });
        }
    }
    answered.text = text.finish();
    answered.latency = started.elapsed();
    answered.cost = committed.cost.answer().map(AnswerCost::usd);
    Ok(answered)
}
