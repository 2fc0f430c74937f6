//! Why the pipeline could not serve a request, as the error the client gets: no plan (policy
//! left nothing, or nothing eligible fits the request), or no upstream answered.

use super::error::{ApiError, ErrorCode};
use crate::canonical::ErrorClass;
use crate::dispatch::DispatchError;
use crate::outcome::{AttemptRecord, Skip};
use crate::route::PlanError;

/// No plan: policy left nothing (503, the operator's business), or nothing eligible can serve
/// this request (400 naming the context limit or the missing capability: the client's).
pub fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::Policy(e) => ApiError::new(ErrorCode::NoEligibleBackend, e.0),
        PlanError::Unfit(unfit) if unfit.is_context_length() => {
            ApiError::new(ErrorCode::ContextLengthExceeded, unfit.to_string()).param("messages")
        }
        PlanError::Unfit(unfit) => {
            let param = unfit.missing().first().map_or("model", |c| c.param());
            ApiError::new(ErrorCode::UnsupportedCapability, unfit.to_string()).param(param)
        }
    }
}

/// Dispatch ended without a committed answer.
pub(super) fn dispatch_error(e: DispatchError) -> ApiError {
    match e {
        DispatchError::Rejected { backend, error, .. } => ApiError::from_upstream(&backend, &error),
        DispatchError::Shed { why } => ApiError::new(ErrorCode::Shed, why).retry_after(1),
        DispatchError::Exhausted { attempts } => {
            let detail: Vec<String> = attempts.iter().map(|a| a.describe()).collect();
            let called: Vec<_> = attempts.iter().filter(|a| a.skipped.is_none()).collect();
            let all_rate_limited =
                !called.is_empty() && called.iter().all(|a| a.error_class == Some(ErrorClass::RateLimited));
            let budget = attempts.iter().any(|a| a.skipped == Some(Skip::RetryBudget));
            let message = format!("no backend could serve the request: {}", detail.join("; "));
            let wait = retry_after_secs(&attempts);
            let no_room = called.is_empty()
                && attempts.iter().any(|a| matches!(a.skipped, Some(Skip::NodeFull | Skip::OverQuota)));
            if no_room {
                ApiError::new(ErrorCode::Shed, message).retry_after(wait)
            } else if all_rate_limited {
                ApiError::new(ErrorCode::UpstreamRateLimited, message).retry_after(wait)
            } else {
                let code =
                    if budget { ErrorCode::RetryBudgetExhausted } else { ErrorCode::AllBackendsFailed };
                ApiError::new(code, message).retry_after(wait)
            }
        }
    }
}

/// What the client should wait before trying again: the shortest wait an upstream asked for
/// (`Retry-After`, or what is left of a hold it set), in whole seconds, at least 1; 1 when
/// none asked.
fn retry_after_secs(attempts: &[AttemptRecord]) -> u64 {
    attempts
        .iter()
        .filter_map(|a| a.retry_after)
        .min()
        .map_or(1, |wait| wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
        .max(1)
}
