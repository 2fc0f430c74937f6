//! What planning saw of each pool's own projects (those sticky spill has it take first)
//! between two steps of the shares: the request paths count each plan, the loop that steps
//! the shares takes the counts. Counting takes no lock: each pool's counters are atomics, in a
//! map that is only replaced when a pool is seen for the first time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::canonical::BackendName;
use crate::snapshot::Snapshot;

use super::Plan;

/// Requests of the projects a pool takes first, since the last step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Kept {
    /// One of its nodes could take them.
    pub taken: u64,
    /// None could: they left the fleet though the pool takes their project first.
    pub refused: u64,
    /// Their prompts' tokens (as planning estimated them), taken and refused together.
    pub prompt_tokens: u64,
}

impl Kept {
    /// Their mean prompt in tokens; `None` when none was counted.
    pub(crate) fn prompt_mean(&self) -> Option<f64> {
        let n = self.taken + self.refused;
        (n > 0).then(|| self.prompt_tokens as f64 / n as f64)
    }
}

#[derive(Debug, Default)]
struct Counters {
    taken: AtomicU64,
    refused: AtomicU64,
    prompt_tokens: AtomicU64,
}

/// Shared by the request paths (which record each plan) and the loop that steps the shares.
#[derive(Debug, Default)]
pub struct ShareFeedback {
    pools: ArcSwap<BTreeMap<BackendName, Arc<Counters>>>,
}

impl ShareFeedback {
    /// Count the pools that took `plan`'s project first, whether they could take it, and its
    /// prompt's size.
    pub fn record(&self, snap: &Snapshot, plan: &Plan, prompt_tokens: u32) {
        for &(backend, taken) in &plan.kept {
            let counters = self.counters(&snap.backends[backend].name);
            if taken {
                counters.taken.fetch_add(1, Relaxed);
            } else {
                counters.refused.fetch_add(1, Relaxed);
            }
            counters.prompt_tokens.fetch_add(u64::from(prompt_tokens), Relaxed);
        }
    }

    /// What was counted since the last call, and start afresh.
    pub fn take(&self) -> BTreeMap<BackendName, Kept> {
        let swap = |c: &AtomicU64| c.swap(0, Relaxed);
        let pools = self.pools.load();
        pools
            .iter()
            .map(|(name, c)| {
                let kept = Kept {
                    taken: swap(&c.taken),
                    refused: swap(&c.refused),
                    prompt_tokens: swap(&c.prompt_tokens),
                };
                (name.clone(), kept)
            })
            .filter(|(_, kept)| *kept != Kept::default())
            .collect()
    }

    /// `pool`'s counters, added to the map the first time the pool is counted.
    fn counters(&self, pool: &str) -> Arc<Counters> {
        if let Some(c) = self.pools.load().get(pool) {
            return Arc::clone(c);
        }
        self.pools.rcu(|pools| {
            let mut pools = BTreeMap::clone(pools);
            pools.entry(BackendName::from(pool)).or_default();
            pools
        });
        self.pools.load().get(pool).map(Arc::clone).unwrap_or_default()
    }
}
