//! The baseline orderings of the first seed document: configured priority, weighted random,
//! and cheapest first by the request's estimated cost. Pure; randomness comes from the seed.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use super::{Reason, RequestFacts, Snapshot};
use crate::config::Strategy;

/// Order the eligible backends (indices into `snap.backends`, in preference order).
pub fn order(facts: &RequestFacts<'_>, snap: &Snapshot, eligible: &[usize]) -> Vec<(usize, Reason)> {
    match facts.task.strategy {
        Strategy::Priority => {
            eligible.iter().enumerate().map(|(rank, &b)| (b, Reason::Preferred { rank })).collect()
        }
        Strategy::Weighted => weighted(facts, snap, eligible),
        Strategy::Cost => cheapest_first(facts, snap, eligible),
    }
}

/// Sample without replacement in proportion to weight; zero weights follow in preference order.
fn weighted(facts: &RequestFacts<'_>, snap: &Snapshot, eligible: &[usize]) -> Vec<(usize, Reason)> {
    let weight_of = |b: usize| {
        let weights = &facts.task.weights;
        if weights.is_empty() {
            1.0
        } else {
            weights.get(&snap.backends[b].name).copied().unwrap_or(0.0)
        }
    };
    let mut rng = SmallRng::seed_from_u64(facts.seed);
    let mut pool: Vec<(usize, f64)> = eligible.iter().map(|&b| (b, weight_of(b))).collect();
    let mut out = Vec::with_capacity(pool.len());
    loop {
        let total: f64 = pool.iter().map(|(_, w)| w).sum();
        if total <= 0.0 {
            break;
        }
        let mut x = rng.gen::<f64>() * total;
        let mut pick = pool.iter().rposition(|(_, w)| *w > 0.0).unwrap_or(0);
        for (i, (_, w)) in pool.iter().enumerate() {
            if *w > 0.0 && x < *w {
                pick = i;
                break;
            }
            x -= w;
        }
        let (b, w) = pool.remove(pick);
        out.push((b, Reason::Weighted { weight: w }));
    }
    out.extend(pool.into_iter().map(|(b, w)| (b, Reason::Weighted { weight: w })));
    out
}

/// Estimated dollars for this request on each backend; a backend without a price (a local
/// pool whose GPUs are already paid for) counts as free. Ties keep preference order.
fn cheapest_first(facts: &RequestFacts<'_>, snap: &Snapshot, eligible: &[usize]) -> Vec<(usize, Reason)> {
    let million = Decimal::from(1_000_000);
    let mut costed: Vec<(usize, Decimal)> = eligible
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
