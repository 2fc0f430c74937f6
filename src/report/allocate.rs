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

use crate::ledger::usage::NodeMinute;

/// One request as the allocation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work<'a> {
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
    pub unallocated_busy: BTreeMap<String, Decimal>,
    pub unallocated_idle: BTreeMap<String, Decimal>,
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
pub fn allocate(groups: usize, work: &[Work<'_>], minutes: &[NodeMinute], bucket_ms: i64) -> Allocation {
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
    for m in minutes {
        let cost = m.cost();
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
                *pool.entry(m.backend.clone()).or_default() += cost;
                *a.by_bucket.entry((bucket, None)).or_default() += cost;
            }
        }
    }
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
}
