//! Counting a request's input tokens (Anthropic's `count_tokens`) for the backend that would
//! serve it now: the task and key as [`super::serve`] checks them, then the plan's first choice.

use tokio::time::Instant;

use super::error::ApiError;
use super::{plan_error, task_for, Serving};
use crate::canonical::{ChatRequest, Principal};
use crate::config::{BackendId, TaskConfig};
use crate::dispatch::TokenCount;
use crate::route::{self, PlanError, RequestFacts};
use crate::snapshot::{NodeView, Snapshot};

/// `request`'s input tokens as the backend its task (named by `model`) would try first counts
/// them, and that backend's name. `to_canonical` turns the decoded request into the canonical
/// one.
pub async fn count_tokens(
    serving: &Serving,
    principal: Option<&Principal>,
    model: &str,
    to_canonical: impl FnOnce() -> Result<ChatRequest, ApiError>,
) -> Result<(TokenCount, String), ApiError> {
    let snap = serving.snapshot.load_full();
    let task = task_for(&snap, model, principal)?;
    let request = to_canonical()?;
    let backend = first_choice(&snap, task, &request)?;
    let name = snap.backends[backend].name.clone();
    let counted = serving
        .dispatcher
        .count_tokens(&snap, backend, &request)
        .await
        .map_err(|e| ApiError::from_upstream(&name, &e))?;
    Ok((counted, name))
}

/// The backend the plan would try first now; when nothing has room (or none fits), the
/// task's first backend that its policy allows. A count sends the prompt to the backend
/// (Anthropic's count endpoint), so a task whose policy allows none gets the policy's 503.
fn first_choice(snap: &Snapshot, task: &TaskConfig, request: &ChatRequest) -> Result<BackendId, ApiError> {
    let eligible = crate::policy::eligible(task, snap).map_err(|e| plan_error(PlanError::Policy(e)))?;
    let first = eligible[0];
    let load = |node: &NodeView| node.handle.load.view();
    let facts = RequestFacts {
        max_output_tokens: 1,
        ..RequestFacts::of(task, request, task.priority, rand::random(), &load)
    };
    match route::plan_among(&facts, snap, eligible, Instant::now()) {
        Ok(plan) if !plan.targets.is_empty() => Ok(plan.targets[0].backend),
        _ => Ok(first),
    }
}
