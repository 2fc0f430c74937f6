//! The pipeline's side of key limits and budgets: reserve a request's worst case before
//! dispatch, or refuse it (402 over a budget, 429 with `Retry-After` over a rate limit, 503
//! when the shared counters are down and the limit fails closed). Counting is
//! `guard::budget`'s.

use super::error::{ApiError, ErrorCode};
use super::Serving;
use crate::canonical::{ChatRequest, Principal};
use crate::config::BackendId;
use crate::guard::budget::{self, Ask, Refused, Reservation};
use crate::route;
use crate::snapshot::Snapshot;

/// Reserve the request's worst case (its prompt estimate and `max_tokens` at the dearest
/// backend of its plan) against its key's and team's limits, or refuse it: 402 over a budget,
/// 429 with `Retry-After` over a rate limit, 503 when Redis is down and the limit fails closed.
pub(super) async fn reserve(
    serving: &Serving,
    principal: Option<&Principal>,
    snap: &Snapshot,
    plan: &route::Plan,
    canonical: &ChatRequest,
) -> Result<Option<Reservation>, ApiError> {
    let Some(principal) = principal else { return Ok(None) };
    let budgets = serving.budgets.config();
    let ids: Vec<BackendId> = plan.targets.iter().map(|t| t.backend).collect();
    let prompt = u64::from(canonical.estimated_prompt_tokens());
    let max_tokens = u64::from(canonical.max_tokens.unwrap_or(1024));
    let worst_case =
        budget::cost::worst_case(ids.iter().map(|&b| &snap.config.backends[b]), prompt, max_tokens, &budgets);
    let ask = Ask { tokens: prompt + max_tokens, worst_case };
    // An issued key's own limits, given at creation (the config's entry overrides each it sets).
    let own = principal.key_id().map(|id| serving.client_keys.limits(id)).unwrap_or_default();
    serving.budgets.admit(principal, &own, &ask).await.map_err(|refused| match refused {
        Refused::Over { scope, limit, retry_after_secs } => {
            let whose = match principal.team().filter(|_| scope == budget::ScopeKind::Team) {
                Some(team) => format!("team `{team}`"),
                None => format!("key `{}`", principal.name()),
            };
            let error = ApiError::new(
                ErrorCode::OverLimit(scope, limit),
                format!("{whose} is over its {} limit", limit.as_str()),
            );
            if limit.is_budget() {
                error
            } else {
                error.retry_after(retry_after_secs)
            }
        }
        Refused::Unavailable { budget } => {
            let (what, key) = if budget { ("budgets", "budgets") } else { ("rate limits", "rate_limits") };
            ApiError::new(
                ErrorCode::LimitStateUnavailable { budget },
                format!(
                    "the shared counters of this key's {what} (Redis) are unreachable and \
                     budgets.when_redis_down.{key} is closed; retry shortly"
                ),
            )
            .retry_after(1)
        }
    })
}
