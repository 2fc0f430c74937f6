//! The cost report as data: lines per group, each pool's GPU hours, cost over time, and each
//! task's economics (from `economics`). Pure: built from ledger rows and the config, no I/O;
//! the renderers only format it.

use std::collections::{BTreeMap, BTreeSet};

use rust_decimal::Decimal;
use serde::Serialize;

use super::allocate::{allocate, Work};
pub use super::economics::{BackendShare, SelfHosted, TaskEconomics};
use super::figures::{money, per};
pub use super::figures::{Line, PoolUsage, Tokens, UtilisationBasis};
use super::group::Fine;
use super::query::{GroupKey, ReportQuery};
use super::utilisation::Tally;
use crate::canonical::{BackendName, TaskName};
use crate::config::Config;
use crate::ledger::usage::NodeMinute;
use crate::ledger::{LedgerRecord, Outcome};

pub use super::group::NO_BACKEND;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub hosted_usd: Decimal,
    pub gpu_busy_usd: Decimal,
    pub gpu_idle_usd: Decimal,
    pub gpu_unallocated_usd: Decimal,
    /// Every GPU hour paid for: busy + idle + unallocated.
    pub gpu_usd: Decimal,
    /// Hosted + every GPU hour: what the lines plus the unallocated line add up to.
    pub total_usd: Decimal,
}

/// Cost per task over time (hosted by arrival, GPU by node-minute).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CostSeries {
    pub bucket_ms: i64,
    /// Start of each bucket, unix milliseconds.
    pub buckets: Vec<i64>,
    pub by_task: BTreeMap<TaskName, Vec<Decimal>>,
    pub unallocated: Vec<Decimal>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub from: String,
    pub to: String,
    pub group_by: Vec<GroupKey>,
    pub lines: Vec<Line>,
    pub tasks: Vec<TaskEconomics>,
    pub pools: Vec<PoolUsage>,
    pub totals: Totals,
    pub series: CostSeries,
    /// Keys' and teams' spend against their budgets (grouped by key or team; filled by
    /// [`super::generate`], which lists the issued keys).
    pub budgets: Vec<super::figures::BudgetUse>,
}

use crate::ledger::rfc3339;

/// A bucket size that gives at most about 60 points over `span_ms`.
fn bucket_for(span_ms: i64) -> i64 {
    const MIN: i64 = 60_000;
    [MIN, 5 * MIN, 15 * MIN, 60 * MIN, 360 * MIN, 1_440 * MIN, 10_080 * MIN]
        .into_iter()
        .find(|b| span_ms / b <= 60)
        .unwrap_or(10_080 * MIN)
}

/// Whether a backend is a self-hosted pool: a `vllm` backend of the config, or one that has
/// node-minutes in the ledger (a pool since removed from the config).
fn local_pools(config: Option<&Config>, minutes: &[NodeMinute]) -> BTreeSet<String> {
    let mut pools: BTreeSet<String> = minutes.iter().map(|m| m.backend.clone()).collect();
    if let Some(c) = config {
        pools.extend(c.backends.iter().filter(|b| b.kind().is_local()).map(|b| b.name.clone()));
    }
    pools
}

/// Each pool's busy GPU hours that batch-priority requests used: the GPU-cost sharing rule
/// (`allocate`) with every GPU hour priced at 1, over two groups per pool (batch, the rest).
fn batch_gpu_hours(
    records: &[LedgerRecord],
    pools: &BTreeSet<String>,
    minutes: &[NodeMinute],
) -> BTreeMap<String, Decimal> {
    let names: Vec<&String> = pools.iter().collect();
    let index = |pool: &str| names.iter().position(|n| n.as_str() == pool);
    let work: Vec<Work<'_>> = records
        .iter()
        .filter_map(|r| {
            let batch = r.priority == Some(crate::config::Priority::Batch);
            Some(Work {
                group: index(&r.backend)? * 2 + usize::from(batch),
                node: &r.node,
                at_ms: r.at_ms,
                tokens: (r.input_tokens.max(0) + r.output_tokens.max(0)) as u64,
            })
        })
        .collect();
    if !work.iter().any(|w| w.group % 2 == 1) {
        return BTreeMap::new();
    }
    let hours: Vec<NodeMinute> =
        minutes.iter().map(|m| NodeMinute { gpu_hourly_usd: Some(Decimal::ONE), ..m.clone() }).collect();
    let alloc = allocate(names.len() * 2, &work, &hours, crate::ledger::usage::MINUTE_MS);
    names.iter().enumerate().map(|(i, name)| (name.to_string(), alloc.busy[i * 2 + 1])).collect()
}

/// Build the report of `records` and `minutes` (already limited to the query's period).
/// `config` supplies hosted prices for break-even; without it those fields are empty.
pub fn build(
    query: &ReportQuery,
    records: &[LedgerRecord],
    minutes: &[NodeMinute],
    config: Option<&Config>,
) -> Report {
    let pools = local_pools(config, minutes);
    // Fine groups (task, backend, key, team): every line, share and series is a sum of these.
    let mut fine: BTreeMap<Fine, usize> = BTreeMap::new();
    let groups: Vec<Fine> = records.iter().map(Fine::of).collect();
    for g in &groups {
        let next = fine.len();
        fine.entry(g.clone()).or_insert(next);
    }
    let work: Vec<Work<'_>> = records
        .iter()
        .zip(&groups)
        .filter(|(r, _)| pools.contains(&r.backend))
        .map(|(r, g)| Work {
            group: fine[g],
            node: &r.node,
            at_ms: r.at_ms,
            tokens: (r.input_tokens.max(0) + r.output_tokens.max(0)) as u64,
        })
        .collect();
    let bucket_ms = bucket_for(query.to_ms - query.from_ms);
    let alloc = allocate(fine.len(), &work, minutes, bucket_ms);

    // Per fine group: the line before grouping.
    let mut fine_lines = vec![Line::default(); fine.len()];
    for (r, g) in records.iter().zip(&groups) {
        let l = &mut fine_lines[fine[g]];
        l.requests += 1;
        l.failed += u64::from(matches!(r.outcome, Outcome::Failed | Outcome::Shed));
        l.tokens.add(r);
        if !pools.contains(&r.backend) {
            l.hosted_usd += r.cost_usd.unwrap_or_default();
        }
    }
    for (i, l) in fine_lines.iter_mut().enumerate() {
        l.gpu_busy_usd = alloc.busy[i];
        l.gpu_idle_usd = alloc.idle[i];
    }

    // Lines at the asked grouping.
    let mut grouped: BTreeMap<Vec<String>, Line> = BTreeMap::new();
    for (g, &i) in &fine {
        let group = g.pick(&query.group_by);
        grouped
            .entry(group.clone())
            .or_insert_with(|| Line { group, ..Line::default() })
            .absorb(&fine_lines[i]);
    }
    let lines: Vec<Line> = grouped.into_values().map(finish_line).collect();

    // Pools.
    let mut pool_usage: BTreeMap<BackendName, PoolUsage> = BTreeMap::new();
    let mut pool_nodes: BTreeMap<BackendName, BTreeSet<&str>> = BTreeMap::new();
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    for m in minutes {
        let p = pool_usage.entry(m.backend.as_str().into()).or_default();
        pool_nodes.entry(m.backend.as_str().into()).or_default().insert(&m.node);
        tallies.entry(&m.backend).or_default().add(m);
        let gpu_hours = Decimal::from(m.gpu_count) / Decimal::from(60);
        if m.busy {
            p.gpu_hours_busy += gpu_hours;
        } else {
            p.gpu_hours_idle += gpu_hours;
        }
        p.unpriced_node_minutes += u64::from(m.gpu_hourly_usd.is_none());
    }
    for (g, &i) in &fine {
        if let Some(p) = pool_usage.get_mut(g.backend.as_str()) {
            p.busy_usd += alloc.busy[i];
            p.idle_usd += alloc.idle[i];
        }
    }
    let batch_hours = batch_gpu_hours(records, &pools, minutes);
    for (pool, p) in pool_usage.iter_mut() {
        p.pool = pool.to_string();
        p.gpu_hours_batch = money(batch_hours.get(pool.as_str()).copied().unwrap_or_default());
        p.nodes = pool_nodes.get(pool).map_or(0, BTreeSet::len);
        p.unallocated_usd = money(
            alloc.unallocated_busy.get(pool).copied().unwrap_or_default()
                + alloc.unallocated_idle.get(pool).copied().unwrap_or_default(),
        );
        let u = tallies.get(pool.as_str()).map(Tally::finish).unwrap_or_default();
        p.utilisation = u.utilisation;
        p.utilisation_basis = u.basis;
        p.busy_share = u.busy_share;
        p.unmeasured_node_minutes = u.unmeasured_node_minutes;
        p.busy_usd = money(p.busy_usd);
        p.idle_usd = money(p.idle_usd);
        p.gpu_hours_busy = money(p.gpu_hours_busy);
        p.gpu_hours_idle = money(p.gpu_hours_idle);
    }

    let tasks = super::economics::economics(&fine, &fine_lines, &pools, &pool_usage, config);
    let unallocated: Decimal =
        alloc.unallocated_busy.values().chain(alloc.unallocated_idle.values()).copied().sum();
    let hosted: Decimal = fine_lines.iter().map(|l| l.hosted_usd).sum();
    let busy: Decimal = alloc.busy.iter().copied().sum();
    let idle: Decimal = alloc.idle.iter().copied().sum();
    let totals = Totals {
        requests: records.len() as u64,
        hosted_usd: money(hosted),
        gpu_busy_usd: money(busy),
        gpu_idle_usd: money(idle),
        gpu_unallocated_usd: money(unallocated),
        gpu_usd: money(busy + idle + unallocated),
        total_usd: money(hosted + busy + idle + unallocated),
    };
    let series = series(query, bucket_ms, records, &fine, &alloc.by_bucket, &pools);
    Report {
        from: rfc3339(query.from_ms),
        to: rfc3339(query.to_ms),
        group_by: query.group_by.clone(),
        lines,
        tasks,
        pools: pool_usage.into_values().collect(),
        totals,
        series,
        budgets: Vec::new(),
    }
}

fn finish_line(mut l: Line) -> Line {
    let total = l.hosted_usd + l.gpu_busy_usd + l.gpu_idle_usd;
    l.per_request_usd = per(total, l.requests, 1);
    l.per_mtok_output_usd = per(total, l.tokens.output, 1_000_000);
    l.total_usd = money(total);
    l.hosted_usd = money(l.hosted_usd);
    l.gpu_busy_usd = money(l.gpu_busy_usd);
    l.gpu_idle_usd = money(l.gpu_idle_usd);
    l
}

fn series(
    query: &ReportQuery,
    bucket_ms: i64,
    records: &[LedgerRecord],
    fine: &BTreeMap<Fine, usize>,
    gpu: &BTreeMap<(i64, Option<usize>), Decimal>,
    pools: &BTreeSet<String>,
) -> CostSeries {
    let first = query.from_ms.div_euclid(bucket_ms) * bucket_ms;
    let buckets: Vec<i64> = (0..).map(|i| first + i * bucket_ms).take_while(|b| *b < query.to_ms).collect();
    let index = |at: i64| ((at.div_euclid(bucket_ms) * bucket_ms - first) / bucket_ms) as usize;
    let task_of: Vec<&str> = {
        let mut v = vec![""; fine.len()];
        for (g, &i) in fine {
            v[i] = g.task.as_str();
        }
        v
    };
    let mut s = CostSeries { bucket_ms, buckets: buckets.clone(), ..Default::default() };
    let zeros = vec![Decimal::ZERO; buckets.len()];
    s.unallocated = zeros.clone();
    for r in records {
        let row = s.by_task.entry(r.task.as_str().into()).or_insert_with(|| zeros.clone());
        if !pools.contains(&r.backend) {
            if let Some(slot) = row.get_mut(index(r.at_ms)) {
                *slot += r.cost_usd.unwrap_or_default();
            }
        }
    }
    for (&(bucket, group), &cost) in gpu {
        let row = match group {
            Some(g) => s.by_task.entry(task_of[g].into()).or_insert_with(|| zeros.clone()),
            None => &mut s.unallocated,
        };
        if let Some(slot) = row.get_mut(index(bucket)) {
            *slot += cost;
        }
    }
    for v in s.by_task.values_mut().chain(std::iter::once(&mut s.unallocated)) {
        v.iter_mut().for_each(|c| *c = money(*c));
    }
    s
}

#[cfg(test)]
#[path = "build_utilisation_tests.rs"]
mod utilisation_tests;

#[cfg(test)]
#[path = "build_group_tests.rs"]
mod group_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::usage::Occupancy;
    use crate::report::query::ReportFormat;

    const T0: i64 = 1_700_000_040_000; // a minute boundary

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    pub(super) fn config() -> Config {
        crate::config::parse(
            r#"
backends:
  - {name: pool, kind: vllm, endpoints: ["http://10.0.0.1:8000"], model: m, region: eu}
  - {name: openai, kind: openai, model: g, region: us, price: {input_per_mtok: 5, output_per_mtok: 20}}
tasks:
  - {name: t, backends: [pool, openai], slo: {ttft_ms: 500}}
  - {name: r, backends: [pool, openai], data_class: restricted, slo: {ttft_ms: 500}}
policy:
  data_classes:
    restricted: {allow_hosted: false}
"#,
        )
        .unwrap()
    }

    pub(super) fn record(task: &str, backend: &str, cost: Option<&str>) -> LedgerRecord {
        LedgerRecord {
            id: crate::ledger::new_record_id(),
            at_ms: T0 + 1_000,
            task: task.into(),
            client_key: None,
            team: None,
            priority: None,
            affinity_hash: None,
            backend: backend.into(),
            model: "m".into(),
            node: if backend == "pool" { "a".into() } else { String::new() },
            attempts: 1,
            outcome: if backend.is_empty() { Outcome::Shed } else { Outcome::Completed },
            error_class: None,
            input_tokens: if backend.is_empty() { 0 } else { 1_000 },
            cached_input_tokens: 0,
            cache_write_tokens: 0,
            output_tokens: if backend.is_empty() { 0 } else { 500 },
            ttft_ms: Some(50),
            duration_ms: 400,
            cost_usd: cost.map(d),
        }
    }

    pub(super) fn minute(i: i64, busy: bool) -> NodeMinute {
        NodeMinute {
            minute_ms: T0 + i * 60_000,
            backend: "pool".into(),
            node: "a".into(),
            gpu_count: 1,
            gpu_hourly_usd: Some(d("0.6")), // $0.01 a minute
            busy,
            // A busy minute runs 4 of 16 slots throughout; an idle one none.
            occupancy: Some(Occupancy {
                running_seq_ms: if busy { 4 * 60_000 } else { 0 },
                capacity_seq_ms: 16 * 60_000,
            }),
        }
    }

    /// A row written before occupancy was recorded.
    pub(super) fn old(m: NodeMinute) -> NodeMinute {
        NodeMinute { occupancy: None, ..m }
    }

    pub(super) fn query() -> ReportQuery {
        ReportQuery {
            from_ms: T0,
            to_ms: T0 + 3_600_000,
            group_by: vec![GroupKey::Task],
            format: ReportFormat::Json,
        }
    }

    #[test]
    fn the_busy_hours_batch_lines_used_are_counted_per_pool() {
        // Minute 0: a batch line alone; minute 1: a batch and an interactive line, equal
        // tokens; minute 2: interactive alone; minute 3: idle.
        let at = |r: LedgerRecord, minute: i64, batch: bool| LedgerRecord {
            at_ms: T0 + minute * 60_000 + 1_000,
            priority: batch.then_some(crate::config::Priority::Batch),
            ..r
        };
        let records = vec![
            at(record("t", "pool", None), 0, true),
            at(record("t", "pool", None), 1, true),
            at(record("t", "pool", None), 1, false),
            at(record("t", "pool", None), 2, false),
        ];
        let minutes: Vec<NodeMinute> = (0..4).map(|i| minute(i, i < 3)).collect();
        let r = build(&query(), &records, &minutes, Some(&config()));
        let pool = r.pools.iter().find(|p| p.pool == "pool").unwrap();
        // One and a half GPU-minutes of three busy ones.
        assert_eq!(pool.gpu_hours_batch, d("0.025"));
        assert_eq!((pool.gpu_hours_busy, pool.gpu_hours_idle), (d("0.05"), d("0.016667")));
        let none = build(&query(), &records[2..], &minutes, Some(&config()));
        assert!(none.pools.iter().all(|p| p.gpu_hours_batch.is_zero()), "no batch, no batch hours");
    }

    #[test]
    fn costs_break_even_and_policy() {
        let records = [
            record("t", "pool", None),
            record("r", "pool", None),
            record("t", "openai", Some("0.015")),
            record("r", "", None),
        ];
        // One busy minute (4 of 16 slots) and three idle ones: a 25 % busy share but 4 × 60 of
        // 16 × 240 sequence-seconds, 6.25 % of capacity; $0.04 in all.
        let minutes = [minute(0, true), minute(1, false), minute(2, false), minute(3, false)];
        let r = build(&query(), &records, &minutes, Some(&config()));
        let t = &r.lines[1];
        assert_eq!((t.group[0].as_str(), t.requests, t.failed), ("t", 2, 0));
        // t and r did equal work on the node: half of each minute each.
        assert_eq!((t.hosted_usd, t.gpu_busy_usd, t.gpu_idle_usd), (d("0.015"), d("0.005"), d("0.015")));
        assert_eq!(t.total_usd, d("0.035"));
        assert_eq!(t.per_request_usd, Some(d("0.0175")));
        assert_eq!(r.lines[0].failed, 1, "shed counts as not served");
        assert_eq!(r.totals.total_usd, d("0.055"));
        let pool = &r.pools[0];
        assert_eq!((pool.utilisation, pool.busy_share), (0.0625, 0.25));
        assert_eq!((pool.utilisation_basis, pool.unmeasured_node_minutes), (UtilisationBasis::Capacity, 0));

        let sh = &r.tasks.iter().find(|e| e.task == "t").unwrap().self_hosted[0];
        assert_eq!(sh.cheapest_hosted.as_deref(), Some("openai"));
        // Loaded $0.02 for 1,500 tokens; openai would charge $0.015 for the same mix.
        assert_eq!((sh.marginal_per_mtok, sh.loaded_per_mtok), (Some(d("3.333333")), Some(d("13.333333"))));
        assert_eq!(sh.hosted_per_mtok, Some(d("10")));
        // Loaded cost per token scales with 1 / utilisation: 6.25 % × 0.02 / 0.015 = 1/12.
        assert_eq!((sh.utilisation, sh.busy_share), (0.0625, 0.25));
        assert!((sh.break_even_utilisation.unwrap() - 1.0 / 12.0).abs() < 1e-12);
        let restricted = &r.tasks.iter().find(|e| e.task == "r").unwrap();
        assert_eq!(restricted.by_backend[0].backend, NO_BACKEND);
        let rsh = &restricted.self_hosted[0];
        assert_eq!((rsh.cheapest_hosted.as_deref(), rsh.break_even_utilisation), (None, None));
    }

    #[test]
    fn lines_count_cache_reads_and_writes_and_every_format_shows_them() {
        let mut cached = record("t", "openai", Some("0.01"));
        (cached.cached_input_tokens, cached.cache_write_tokens) = (600, 300);
        let records = [cached, record("t", "openai", Some("0.02"))];
        let r = build(&query(), &records, &[], None);
        let tokens = Tokens { input: 2_000, cached_input: 600, cache_write: 300, output: 1_000 };
        assert_eq!(r.lines[0].tokens, tokens);
        let csv = crate::report::render::csv(&r).unwrap();
        assert!(csv.contains(",input_tokens,cached_input_tokens,cache_write_tokens,output_tokens,"), "{csv}");
        assert!(csv.contains("line,t,2,0,2000,600,300,1000,0.03,"), "{csv}");
        let table = crate::report::render::table(&r);
        assert!(table.contains("cached_tok  cache_write_tok  output_tok"), "{table}");
    }

    #[test]
    fn series_buckets_cover_the_period_and_sum_to_the_costs() {
        let records = [record("t", "pool", None), record("t", "openai", Some("0.015"))];
        let minutes = [minute(0, true), minute(59, false)];
        let r = build(&query(), &records, &minutes, None);
        assert_eq!((r.series.bucket_ms, r.series.buckets.len()), (60_000, 60));
        let t: Decimal = r.series.by_task["t"].iter().sum();
        assert_eq!(t, r.totals.total_usd);
        assert_eq!(r.series.by_task["t"][59], d("0.01"), "the idle minute lands in its own bucket");
        assert!(r.tasks[0].self_hosted[0].break_even_utilisation.is_none(), "no config: no prices");
    }
}
