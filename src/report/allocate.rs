//! Sharing GPU cost among the groups (tasks, backends, keys) that used the GPUs. Pure: no I/O,
//! exact decimals, so the rule can be tested and checked to the cent.
//!
//! The rule, per node:
//! - A request's GPU work is its tokens, input plus output, counted in the minute it arrived.
//! - A **busy** minute's cost (GPUs × hourly price ÷ 60) goes to the groups whose requests
//!   arrived on that node in that minute, in proportion to their tokens. A busy minute with no
//!   arrivals (a long request still running, or traffic from outside this router) is shared like
//!   an idle minute.
//! - An **idle** minute's cost is shared among the groups in proportion to their tokens on that
//!   node over the whole period, and kept apart so that reports can show it on its own line.
//! - Cost of a node that served no group in the period is *unallocated*: it is still reported,
//!   so that the groups plus the unallocated line add up to every GPU hour paid for.

use std::collections::{BTreeMap, HashMap};

use rust_decimal::Decimal;

use crate::canonical::BackendName;
use crate::ledger::usage::NodeMinute;

/// One request as the allocation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work<'a> {
    /// Index of the group the request belongs to.
    pub group: usize,
    pub node: &'a str,
    pub at_ms: i64,
    /// Tokens processed (input + output).
    pub tokens: u64,
}

/// GPU cost by group, and what no group used.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocation {
    /// By group index: cost of busy minutes.
    pub busy: Vec<Decimal>,
    /// By group index: cost of idle minutes.
    pub idle: Vec<Decimal>,
    /// By pool (backend): cost of nodes that served no group in the period.
    pub unallocated_busy: BTreeMap<BackendName, Decimal>,
    pub unallocated_idle: BTreeMap<BackendName, Decimal>,
    /// Cost by (start of time bucket, group), busy and idle together; `None` group: unallocated.
    pub by_bucket: BTreeMap<(i64, Option<usize>), Decimal>,
}

impl Allocation {
    /// Everything shared out plus everything unallocated.
    pub fn total(&self) -> Decimal {
        self.busy.iter().chain(&self.idle).sum::<Decimal>()
            + self.unallocated_busy.values().sum::<Decimal>()
            + self.unallocated_idle.values().sum::<Decimal>()
    }
}

/// Tokens by group, kept sorted so that results do not depend on hash order.
type Shares = BTreeMap<usize, u64>;

/// Add `cost × share ÷ total` to each group's entry of `into` (and its time bucket).
fn split(
    cost: Decimal,
    shares: &Shares,
    into: &mut [Decimal],
    bucket: i64,
    by_bucket: &mut BTreeMap<(i64, Option<usize>), Decimal>,
) {
    let total = Decimal::from(shares.values().sum::<u64>());
    for (&group, &tokens) in shares {
        let part = cost * Decimal::from(tokens) / total;
        into[group] += part;
        *by_bucket.entry((bucket, Some(group))).or_default() += part;
    }
}

/// Share the cost of `minutes` among `groups` groups by the `work` done on each node.
/// `bucket_ms` sets the time buckets of `by_bucket` (at least one minute).
pub(crate) fn allocate(
    groups: usize,
    work: &[Work<'_>],
    minutes: &[NodeMinute],
    bucket_ms: i64,
) -> Allocation {
    let bucket_ms = bucket_ms.max(crate::ledger::usage::MINUTE_MS);
    let mut in_minute: HashMap<(&str, i64), Shares> = HashMap::new();
    let mut in_period: HashMap<&str, Shares> = HashMap::new();
    for w in work.iter().filter(|w| w.tokens > 0) {
        let minute = crate::ledger::usage::minute_of(w.at_ms);
        *in_minute.entry((w.node, minute)).or_default().entry(w.group).or_default() += w.tokens;
        *in_period.entry(w.node).or_default().entry(w.group).or_default() += w.tokens;
    }
    let mut a = Allocation {
        busy: vec![Decimal::ZERO; groups],
        idle: vec![Decimal::ZERO; groups],
        ..Default::default()
    };
    // Costs are summed in hourly-rate units (60 × a minute's cost) and divided once at the end,
    // so that whole minutes add up exactly.
    for m in minutes {
        let cost = m.hourly_rate();
        if cost.is_zero() {
            continue;
        }
        let bucket = m.minute_ms.div_euclid(bucket_ms) * bucket_ms;
        let this_minute = in_minute.get(&(m.node.as_str(), m.minute_ms)).filter(|_| m.busy);
        let period = in_period.get(m.node.as_str());
        match (this_minute, period) {
            (Some(shares), _) => split(cost, shares, &mut a.busy, bucket, &mut a.by_bucket),
            (None, Some(shares)) if m.busy => split(cost, shares, &mut a.busy, bucket, &mut a.by_bucket),
            (None, Some(shares)) => split(cost, shares, &mut a.idle, bucket, &mut a.by_bucket),
            (None, None) => {
                let pool = if m.busy { &mut a.unallocated_busy } else { &mut a.unallocated_idle };
                *pool.entry(m.backend.as_str().into()).or_default() += cost;
                *a.by_bucket.entry((bucket, None)).or_default() += cost;
            }
        }
    }
    let sixty = Decimal::from(60);
    let per_minute = |c: &mut Decimal| *c /= sixty;
    a.busy.iter_mut().chain(&mut a.idle).for_each(per_minute);
    a.unallocated_busy.values_mut().chain(a.unallocated_idle.values_mut()).for_each(per_minute);
    a.by_bucket.values_mut().for_each(per_minute);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_040_000; // a minute boundary

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn minute(node: &str, i: i64, busy: bool) -> NodeMinute {
        NodeMinute {
            minute_ms: T0 + i * 60_000,
            backend: "pool".into(),
            node: node.into(),
            gpu_count: 1,
            gpu_hourly_usd: Some(d("6")), // $0.10 a minute
            busy,
            occupancy: None,
        }
    }

    fn work(group: usize, node: &str, i: i64, tokens: u64) -> Work<'_> {
        Work { group, node, at_ms: T0 + i * 60_000 + 5_000, tokens }
    }

    #[test]
    fn busy_minutes_follow_that_minutes_tokens_and_idle_follows_the_period() {
        let minutes = [minute("a", 0, true), minute("a", 1, true), minute("a", 2, false)];
        // Minute 0: group 0 did 300 tokens, group 1 did 100. Minute 1: only group 1 (400).
        let w = [work(0, "a", 0, 300), work(1, "a", 0, 100), work(1, "a", 1, 400)];
        let a = allocate(2, &w, &minutes, 3_600_000);
        assert_eq!(a.busy, vec![d("0.075"), d("0.125")]);
        // Idle minute by period tokens: 300 vs 500 of 800.
        assert_eq!(a.idle, vec![d("0.0375"), d("0.0625")]);
        assert_eq!(a.total(), d("0.3"));
        assert!(a.unallocated_busy.is_empty() && a.unallocated_idle.is_empty());
    }

    #[test]
    fn a_busy_minute_without_arrivals_is_shared_by_the_period() {
        let minutes = [minute("a", 0, true), minute("a", 1, true)];
        let w = [work(0, "a", 0, 100), work(1, "a", 0, 300)];
        let a = allocate(2, &w, &minutes, 60_000);
        assert_eq!(a.busy, vec![d("0.05"), d("0.15")]);
        assert_eq!(a.by_bucket[&(T0 + 60_000, Some(1))], d("0.075"));
    }

    #[test]
    fn an_unused_node_is_unallocated_not_lost() {
        let minutes = [minute("a", 0, true), minute("b", 0, false), minute("b", 1, true)];
        let w = [work(0, "a", 0, 10)];
        let a = allocate(1, &w, &minutes, 60_000);
        assert_eq!(a.busy, vec![d("0.1")]);
        assert_eq!(a.unallocated_idle["pool"], d("0.1"));
        assert_eq!(a.unallocated_busy["pool"], d("0.1"));
        assert_eq!(a.total(), d("0.3"));
    }

    #[test]
    fn work_on_unpriced_or_unrecorded_nodes_costs_nothing() {
        let mut free = minute("a", 0, true);
        free.gpu_hourly_usd = None;
        let a = allocate(1, &[work(0, "a", 0, 10), work(0, "z", 0, 10)], &[free], 60_000);
        assert_eq!((a.busy[0], a.total()), (Decimal::ZERO, Decimal::ZERO));
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        const NODES: [&str; 3] = ["a", "b", "c"];
        const GROUPS: usize = 4;

        fn minutes() -> impl Strategy<Value = Vec<NodeMinute>> {
            prop::collection::vec((0..3usize, 0..12i64, any::<bool>(), 1..8i64, 0..2_000i64), 0..40).prop_map(
                |rows| {
                    let mut seen = std::collections::BTreeSet::new();
                    rows.into_iter()
                        .filter(|(n, i, ..)| seen.insert((*n, *i)))
                        .map(|(n, i, busy, gpus, cents)| NodeMinute {
                            minute_ms: super::T0 + i * 60_000,
                            backend: format!("pool-{}", n % 2),
                            node: NODES[n].into(),
                            gpu_count: gpus,
                            gpu_hourly_usd: Some(Decimal::new(cents, 2)),
                            busy,
                            occupancy: None,
                        })
                        .collect()
                },
            )
        }

        fn work() -> impl Strategy<Value = Vec<(usize, usize, i64, u64)>> {
            prop::collection::vec((0..GROUPS, 0..3usize, 0..12i64 * 60_000, 0..5_000u64), 0..30)
        }

        fn to_work(w: &[(usize, usize, i64, u64)], scale: u64) -> Vec<Work<'static>> {
            w.iter()
                .map(|&(group, n, offset, tokens)| Work {
                    group,
                    node: NODES[n],
                    at_ms: super::T0 + offset,
                    tokens: tokens * scale,
                })
                .collect()
        }

        fn close(a: Decimal, b: Decimal) -> bool {
            (a - b).abs() < Decimal::new(1, 18)
        }

        proptest! {
            /// Every dollar of GPU time ends up in exactly one place.
            #[test]
            fn nothing_is_lost_or_made_up(m in minutes(), w in work()) {
                let a = allocate(GROUPS, &to_work(&w, 1), &m, 300_000);
                let paid: Decimal = m.iter().map(NodeMinute::cost).sum();
                prop_assert!(close(a.total(), paid), "{} vs {}", a.total(), paid);
                prop_assert!(close(a.by_bucket.values().sum::<Decimal>(), paid));
                prop_assert!(a.busy.iter().chain(&a.idle).all(|c| !c.is_sign_negative()));
            }

            /// A group is charged only for nodes it used, and node by node the shares add up.
            #[test]
            fn groups_pay_only_for_nodes_they_used(m in minutes(), w in work()) {
                let work = to_work(&w, 1);
                let whole = allocate(GROUPS, &work, &m, 60_000);
                let mut sum = [Decimal::ZERO; GROUPS];
                for node in NODES {
                    let own: Vec<NodeMinute> = m.iter().filter(|x| x.node == node).cloned().collect();
                    let part = allocate(GROUPS, &work, &own, 60_000);
                    for (g, total) in sum.iter_mut().enumerate() {
                        let used = work.iter().any(|x| x.group == g && x.node == node && x.tokens > 0);
                        if !used {
                            prop_assert!(part.busy[g].is_zero() && part.idle[g].is_zero());
                        }
                        *total += part.busy[g] + part.idle[g];
                    }
                }
                for (g, total) in sum.iter().enumerate() {
                    prop_assert!(close(*total, whole.busy[g] + whole.idle[g]));
                }
            }

            /// Only proportions matter: scaling every request's tokens changes nothing.
            #[test]
            fn shares_depend_on_proportions_only(m in minutes(), w in work(), k in 2..50u64) {
                let once = allocate(GROUPS, &to_work(&w, 1), &m, 60_000);
                let scaled = allocate(GROUPS, &to_work(&w, k), &m, 60_000);
                for g in 0..GROUPS {
                    prop_assert!(close(once.busy[g], scaled.busy[g]) && close(once.idle[g], scaled.idle[g]));
                }
            }

            /// The only group working on a node in a busy minute pays all of that minute.
            #[test]
            fn a_sole_user_pays_its_busy_minute(cents in 1..5_000i64, gpus in 1..8i64, tokens in 1..9_000u64) {
                let m = NodeMinute {
                    minute_ms: super::T0,
                    backend: "pool".into(),
                    node: "a".into(),
                    gpu_count: gpus,
                    gpu_hourly_usd: Some(Decimal::new(cents, 2)),
                    busy: true,
                    occupancy: None,
                };
                let work = [Work { group: 2, node: "a", at_ms: super::T0 + 59_999, tokens }];
                let a = allocate(GROUPS, &work, std::slice::from_ref(&m), 60_000);
                prop_assert_eq!(a.busy[2], m.cost());
            }
        }
    }
}
