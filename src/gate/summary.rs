//! One gate run summed up: pass rate, latency percentiles, cost per item, and the verdict
//! against the task's thresholds. Pure, so the verdict rule is tested exactly.

use rust_decimal::Decimal;

use crate::config::GateConfig;

/// How one golden item went.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemOutcome {
    pub passed: bool,
    /// Whole answer, from sending to the last byte.
    pub latency_ms: u64,
    /// What the item cost (hosted list price; `None` when unpriced).
    pub cost: Option<Decimal>,
    /// The backend failed to answer (counts as a failed item).
    pub error: Option<String>,
    /// Why the grader failed it.
    pub why: Option<String>,
}

/// The figures and verdict of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub items: u64,
    pub passed_items: u64,
    pub errors: u64,
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
    /// Total cost of the run (`None`: nothing was priced).
    pub cost: Option<Decimal>,
    pub passed: bool,
    pub why: String,
}

impl Summary {
    pub fn pass_rate(&self) -> f64 {
        if self.items == 0 {
            0.0
        } else {
            self.passed_items as f64 / self.items as f64
        }
    }

    pub(crate) fn cost_per_item(&self) -> Option<Decimal> {
        self.cost.filter(|_| self.items > 0).map(|c| (c / Decimal::from(self.items)).round_dp(6))
    }
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1).
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// Sum up a run and judge it: the pass rate must reach `min_pass` and the p95 latency (of
/// answered items) stay within `max_p95_ms`.
pub fn summarise(outcomes: &[ItemOutcome], gate: &GateConfig) -> Summary {
    let items = outcomes.len() as u64;
    let passed_items = outcomes.iter().filter(|o| o.passed).count() as u64;
    let errors = outcomes.iter().filter(|o| o.error.is_some()).count() as u64;
    let mut latencies: Vec<u64> =
        outcomes.iter().filter(|o| o.error.is_none()).map(|o| o.latency_ms).collect();
    latencies.sort_unstable();
    let costs: Vec<Decimal> = outcomes.iter().filter_map(|o| o.cost).collect();
    let cost = (!costs.is_empty()).then(|| costs.iter().sum());
    let mut summary = Summary {
        items,
        passed_items,
        errors,
        p50_ms: percentile(&latencies, 0.50),
        p95_ms: percentile(&latencies, 0.95),
        cost,
        passed: false,
        why: String::new(),
    };
    let rate = summary.pass_rate();
    let enough = items > 0 && rate + 1e-12 >= gate.min_pass;
    let slow = matches!((gate.max_p95_ms, summary.p95_ms), (Some(limit), Some(p95)) if p95 > limit);
    let mut problems = Vec::new();
    if items == 0 {
        problems.push("no items ran".to_string());
    } else if !enough {
        problems.push(format!("pass rate {:.1} % is below {:.1} %", rate * 100.0, gate.min_pass * 100.0));
    }
    if let (true, Some(limit), Some(p95)) = (slow, gate.max_p95_ms, summary.p95_ms) {
        problems.push(format!("p95 latency {p95} ms is above {limit} ms"));
    }
    if errors > 0 {
        // Not a verdict of its own: an item with no answer has already failed.
        let first = outcomes.iter().find_map(|o| o.error.as_deref()).unwrap_or_default();
        problems.push(format!("{errors} item(s) got no answer (first: {first})"));
    }
    summary.passed = enough && !slow;
    summary.why = if problems.is_empty() {
        format!("{passed_items}/{items} passed")
    } else {
        format!("{passed_items}/{items} passed; {}", problems.join("; "))
    };
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(min_pass: f64, max_p95_ms: Option<u64>) -> GateConfig {
        GateConfig {
            golden: "g.jsonl".into(),
            min_pass,
            max_p95_ms,
            required: true,
            concurrency: 1,
            judge: None,
        }
    }

    fn item(passed: bool, latency_ms: u64) -> ItemOutcome {
        ItemOutcome { passed, latency_ms, cost: Some(Decimal::new(1, 3)), error: None, why: None }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 0.5), Some(10));
        assert_eq!(percentile(&v, 0.95), Some(19));
        assert_eq!(percentile(&[7], 0.95), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn the_verdict_needs_the_pass_rate_and_the_latency() {
        let mut outcomes: Vec<ItemOutcome> = (0..10).map(|i| item(i != 0, 100 + i)).collect();
        let s = summarise(&outcomes, &gate(0.9, Some(4000)));
        assert!(s.passed, "{}", s.why);
        assert_eq!((s.items, s.passed_items), (10, 9));
        assert_eq!(s.cost, Some(Decimal::new(10, 3)));
        assert_eq!(s.cost_per_item(), Some(Decimal::new(1, 3)));
        assert_eq!(s.p95_ms, Some(109));
        assert!(!summarise(&outcomes, &gate(0.95, None)).passed);
        let slow = summarise(&outcomes, &gate(0.9, Some(105)));
        assert!(!slow.passed && slow.why.contains("p95 latency 109 ms is above 105 ms"), "{}", slow.why);
        outcomes[1] = ItemOutcome { error: Some("timeout".into()), passed: false, ..item(false, 0) };
        let s = summarise(&outcomes, &gate(0.8, None));
        assert!(s.passed && s.why.contains("1 item(s) got no answer (first: timeout)"), "{}", s.why);
        assert!(!summarise(&[], &gate(0.0, None)).passed);
    }
}
