//! The baseline orderings of the first seed document: configured priority, weighted random,
//! and cheapest first by the request's estimated cost. Pure; randomness comes from the seed.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use super::{chain, weights, Reason, RequestFacts, Snapshot};
use crate::config::{BackendId, Strategy};

/// Order the eligible backends (in preference order).
/// `has_headroom(b)` says whether local pool `b` has a node that may take this request.
pub fn order(
    facts: &RequestFacts<'_>,
    snap: &Snapshot,
    eligible: &[BackendId],
    has_headroom: &dyn Fn(BackendId) -> bool,
) -> Vec<(BackendId, Reason)> {
    match facts.task.strategy {
        Strategy::Adaptive => adaptive(facts, snap, eligible, has_headroom),
        Strategy::Priority => {
            eligible.iter().enumerate().map(|(rank, &b)| (b, Reason::Preferred { rank })).collect()
        }
        Strategy::Weighted => weighted(facts, snap, eligible),
        Strategy::Cost => cheapest_first(facts, snap, eligible),
    }
}

/// Live weights (availability filled in preference order) drawn into the affinity key's
/// sticky chain for this window. A local pool's availability is 1 while it has headroom for
/// this request and 0 otherwise: "the fleet first, hosted as it fills" and "hosted as failover"
/// are the same mechanism.
fn adaptive(
    facts: &RequestFacts<'_>,
    snap: &Snapshot,
    eligible: &[BackendId],
    has_headroom: &dyn Fn(BackendId) -> bool,
) -> Vec<(BackendId, Reason)> {
    let availability: Vec<f64> = eligible
        .iter()
        .map(|&b| match snap.backends[b].is_local() {
            true if has_headroom(b) => 1.0,
            true => 0.0,
            false => snap.backends[b].availability,
        })
        .collect();
    let w = weights::weights(&availability);
    let named: Vec<(&str, f64)> =
        eligible.iter().zip(&w).map(|(&b, &w)| (snap.backends[b].name.as_str(), w)).collect();
    let key = format!("{:016x}", facts.affinity.unwrap_or(facts.seed));
    chain::chain(&key, facts.window, &named)
        .into_iter()
        .map(|i| (eligible[i], Reason::Chain { weight: w[i] }))
        .collect()
}

/// Sample without replacement in proportion to weight; zero weights follow in preference order.
/// An exponential race: each backend draws `-ln(u) / weight` and the smallest goes first, which
/// is exactly a weighted draw without replacement, in O(n log n).
fn weighted(facts: &RequestFacts<'_>, snap: &Snapshot, eligible: &[BackendId]) -> Vec<(BackendId, Reason)> {
    let weights = &facts.task.weights;
    let weight_of = |b: BackendId| {
        if weights.is_empty() {
            1.0
        } else {
            weights.get(&snap.backends[b].name).copied().unwrap_or(0.0)
        }
    };
    let mut rng = SmallRng::seed_from_u64(facts.seed);
    let mut drawn: Vec<(f64, BackendId, f64)> = Vec::with_capacity(eligible.len());
    let mut zero = Vec::new();
    for &b in eligible {
        let w = weight_of(b);
        if w > 0.0 {
            let u: f64 = 1.0 - rng.gen::<f64>(); // in (0, 1]
            drawn.push((-u.ln() / w, b, w));
        } else {
            zero.push(b);
        }
    }
    drawn.sort_by(|a, b| a.0.total_cmp(&b.0));
    drawn
        .into_iter()
        .map(|(_, b, w)| (b, Reason::Weighted { weight: w }))
        .chain(zero.into_iter().map(|b| (b, Reason::Weighted { weight: 0.0 })))
        .collect()
}

/// Estimated dollars for this request on each backend; a backend without a price (a local
/// pool whose GPUs are already paid for) counts as free. Ties keep preference order.
fn cheapest_first(
    facts: &RequestFacts<'_>,
    snap: &Snapshot,
    eligible: &[BackendId],
) -> Vec<(BackendId, Reason)> {
    let million = Decimal::from(1_000_000);
    let mut costed: Vec<(BackendId, Decimal)> = eligible
        .iter()
        .map(|&b| {
            let cost = snap.backends[b].price.as_ref().map_or(Decimal::ZERO, |p| {
                (Decimal::from(facts.prompt_tokens) * p.input_per_mtok
                    + Decimal::from(facts.max_output_tokens) * p.output_per_mtok)
                    / million
            });
            (b, cost)
        })
        .collect();
    costed.sort_by_key(|c| c.1);
    costed
        .into_iter()
        .map(|(b, cost)| (b, Reason::Cheapest { estimated_usd: cost.to_f64().unwrap_or(f64::MAX) }))
        .collect()
}
