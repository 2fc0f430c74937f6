//! The live guards the walk asks before each call: the node's slot (the router's in-flight
//! limit per node) and its breaker through the node's handle, the shared retry budget, and the backend's per-minute quota
//! counted with its own tokenizer. Every target passed over becomes a skipped attempt record.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::lease::{Charge, NodeHold};
use super::walk::Guards;
use super::Dispatcher;
use crate::canonical::ChatRequest;
use crate::config::Priority;
use crate::guard::quota::QuotaDecision;
use crate::outcome::{AttemptRecord, Skip};
use crate::route::Target;
use crate::snapshot::Snapshot;

/// One request's view of the dispatcher's guards, and the attempts it skipped.
pub(super) struct LiveGuards<'a> {
    pub dispatcher: &'a Dispatcher,
    pub snap: &'a Snapshot,
    pub request: &'a ChatRequest,
    pub priority: Priority,
    pub task: &'a str,
    pub request_id: &'a str,
    /// Every target skipped or called so far, in order.
    pub attempts: Vec<AttemptRecord>,
}

impl Guards for LiveGuards<'_> {
    type Node = NodeHold;
    type Charge = Option<Charge>;

    fn take_node(&mut self, target: &Target) -> Result<NodeHold, Skip> {
        let handle = &self.snap.backends[target.backend].nodes[target.node].handle;
        let slot = handle.try_slot().map_err(|_| Skip::NodeFull)?;
        let permit = handle.breaker.try_acquire(Instant::now()).ok_or(Skip::BreakerOpen)?;
        Ok(NodeHold { slot, permit })
    }

    fn withdraw_retry(&mut self) -> bool {
        self.dispatcher.budget.lock().unwrap_or_else(|e| e.into_inner()).try_withdraw(Instant::now())
    }

    /// Charge the request to the backend's per-minute quota, counted with its own tokenizer;
    /// `Skip::OverQuota` when this priority may not take more of it this minute.
    async fn take_quota(&mut self, target: &Target) -> Result<Option<Charge>, Skip> {
        let quota = &self.dispatcher.quota;
        let name = &self.snap.backends[target.backend].name;
        if quota.limits(name).is_none() {
            return Ok(None);
        }
        let config = &self.snap.config.backends[target.backend];
        let counter = crate::adapter::provider::counter(config);
        let counting = config.quota_counting();
        let estimate = u64::from(counter.count_request(self.request))
            + u64::from(self.request.max_tokens.unwrap_or(1024)) * u64::from(counting.output_weight);
        match quota.try_take(name, estimate, self.priority.quota_ceiling()).await {
            QuotaDecision::Granted => {
                Ok(Some(Charge { board: Arc::clone(quota), backend: name.clone(), estimate, counting }))
            }
            QuotaDecision::OverQuota { .. } => Err(Skip::OverQuota),
        }
    }

    fn release(&mut self, node: NodeHold) {
        drop(node);
    }

    fn failed(&mut self, node: NodeHold, counts_against_backend: bool, retry_after: Option<Duration>) {
        let now = Instant::now();
        if let Some(retry_after) = retry_after {
            node.permit.hold(now, retry_after);
        }
        if counts_against_backend {
            node.permit.failure(now);
        }
    }

    fn skipped(&mut self, target: &Target, why: Skip) {
        let backend = &self.snap.backends[target.backend];
        let node = &backend.nodes[target.node];
        let mut record =
            AttemptRecord::skipped(self.task, &backend.name, &node.key, why).for_request(self.request_id);
        if why == Skip::BreakerOpen {
            record.retry_after = node.handle.breaker.held_for(Instant::now());
        }
        self.attempts.push(record);
    }
}
