//! The boards that limit what requests may take, built at start: the hosted quotas and the
//! keys' rate limits and budgets, counted in Redis when there is one (so every replica counts
//! the same minute), waited for briefly so the first requests are counted where the rest are.

use std::sync::Arc;
use std::time::Duration;

use super::Options;
use crate::config::Config;
use crate::guard::budget::{BudgetBoard, BudgetOptions};
use crate::guard::quota::{system_clock, QuotaBoard, QuotaOptions};

pub(super) async fn boards(
    config: &Config,
    redis_url: Option<&str>,
    options: &Options,
) -> (Arc<QuotaBoard>, Arc<BudgetBoard>) {
    let clock = || options.quota_clock.clone().unwrap_or_else(system_clock);
    let redis_url = redis_url.map(str::to_string);
    let quota = QuotaBoard::with_options(
        config,
        QuotaOptions { redis_url: redis_url.clone(), clock: clock(), ..QuotaOptions::default() },
    );
    let budgets = BudgetBoard::new(
        &config.budgets,
        BudgetOptions {
            redis_url: redis_url.clone(),
            clock: clock(),
            key_prefix: options.budget_prefix.clone().unwrap_or_else(|| "spillway:budget".into()),
            timeout: Duration::from_millis(config.budgets.redis_timeout_ms),
        },
    );
    if redis_url.is_some() && !quota.wait_shared(Duration::from_secs(2)).await {
        tracing::warn!("Redis is not reachable: quotas are counted per replica until it is");
    }
    if redis_url.is_some() && !budgets.wait_shared(Duration::from_millis(500)).await {
        tracing::warn!(
            "Redis is not reachable: key limits and budgets follow budgets.when_redis_down until it is"
        );
    }
    (quota, budgets)
}
