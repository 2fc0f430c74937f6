//! What the gate's results mean for routing now: the latest result per (task, backend,
//! fingerprint), and from it which backends a task with a required gate must not use. The
//! router refreshes it from the store, so a run made anywhere (CLI, another replica) counts.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::fingerprint;
use super::store::GateResult;
use crate::canonical::{BackendName, TaskName};
use crate::config::Config;
use crate::control::pins::PinBoard;
use crate::control::snapshot_loop::GateVerdicts;

type Key = (String, String, String);

/// The latest result of each (task, backend, fingerprint).
#[derive(Default)]
pub struct GateBoard {
    latest: Mutex<BTreeMap<Key, GateResult>>,
}

/// Where a (task, backend) stands for its fingerprint in effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub task: String,
    pub backend: String,
    pub fingerprint: String,
    pub required: bool,
    /// The latest result for this fingerprint, if any.
    pub result: Option<GateResult>,
    /// The most recent run of this (task, backend), for any fingerprint, failed.
    pub last_run_failed: bool,
}

impl Standing {
    pub fn passing(&self) -> bool {
        self.result.as_ref().is_some_and(|r| r.summary.passed)
    }

    /// Why the backend may not serve the task (only when the gate is required).
    pub fn refusal(&self) -> Option<String> {
        if !self.required || self.passing() {
            return None;
        }
        Some(match &self.result {
            None => format!("gate: no result yet for fingerprint {}", self.fingerprint),
            Some(r) => format!("gate failed for fingerprint {}: {}", self.fingerprint, r.summary.why),
        })
    }
}

impl GateBoard {
    /// Take in results (any order); the latest per key wins.
    pub(crate) fn absorb(&self, results: impl IntoIterator<Item = GateResult>) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        for r in results {
            let key = (r.task.clone(), r.backend.clone(), r.fingerprint.clone());
            if latest.get(&key).is_none_or(|old| (old.finished_ms, &old.id) <= (r.finished_ms, &r.id)) {
                latest.insert(key, r);
            }
        }
    }

    pub fn latest(&self, task: &str, backend: &str, fingerprint: &str) -> Option<GateResult> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest.get(&(task.to_string(), backend.to_string(), fingerprint.to_string())).cloned()
    }

    /// The latest result of every (task, backend, fingerprint).
    pub fn all(&self) -> Vec<GateResult> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// Every gated (task, backend) of the config and where it stands.
    pub fn standings(&self, config: &Config, pins: &PinBoard) -> Vec<Standing> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for task in &config.tasks {
            let Some(gate) = &task.gate else { continue };
            for name in &task.backends {
                let Some(backend) = config.backend(name) else { continue };
                let fingerprint = current_fingerprint(backend, pins);
                let result = latest.get(&(task.name.clone(), name.clone(), fingerprint.clone())).cloned();
                let last_run_failed = latest
                    .iter()
                    .filter(|((t, b, _), _)| *t == task.name && b == name)
                    .max_by_key(|(_, r)| (r.finished_ms, r.id.clone()))
                    .is_some_and(|(_, r)| !r.summary.passed);
                out.push(Standing {
                    task: task.name.clone(),
                    backend: name.clone(),
                    fingerprint,
                    required: gate.required,
                    result,
                    last_run_failed,
                });
            }
        }
        out
    }
}

impl GateVerdicts for GateBoard {
    /// (task, backend) pairs a required gate keeps apart, and why.
    fn refusals(
        &self,
        config: &Config,
        pins: &PinBoard,
    ) -> BTreeMap<TaskName, BTreeMap<BackendName, String>> {
        let mut refusals: BTreeMap<TaskName, BTreeMap<BackendName, String>> = BTreeMap::new();
        for s in self.standings(config, pins) {
            if let Some(why) = s.refusal() {
                refusals.entry(TaskName::from(s.task)).or_default().insert(BackendName::from(s.backend), why);
            }
        }
        refusals
    }
}

/// A backend's fingerprint now: a pool's under its pin in effect (the gate may have accepted a
/// newer one than the config's), a hosted backend's from its model and version tag.
pub(crate) fn current_fingerprint(backend: &crate::config::BackendConfig, pins: &PinBoard) -> String {
    if let Some(pool) = backend.pool() {
        let pin = pins.in_effect(&backend.name, pool.pin.as_ref()).unwrap_or_default();
        fingerprint::of_pin(&backend.model, &pin)
    } else {
        fingerprint::of_backend(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pin;
    use crate::gate::summary::Summary;

    fn config() -> Config {
        let dir = std::env::temp_dir().join(format!("spillway-board-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let golden = dir.join("g.jsonl");
        std::fs::write(&golden, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"grader\": {\"type\": \"contains\", \"all\": [\"hi\"]}}\n").unwrap();
        let yaml = format!(
            "backends:\n  - {{name: pool, kind: vllm, model: llama, endpoints: ['http://h:1'], pin: {{weights: a}}}}\n  - {{name: oa, kind: openai, model: gpt, version: v1}}\ntasks:\n  - {{name: t, backends: [pool, oa], slo: {{ttft_ms: 800}}, gate: {{golden: '{}'}}}}\n  - {{name: free, backends: [oa], slo: {{ttft_ms: 800}}}}\n",
            golden.display()
        );
        crate::config::parse(&yaml).unwrap()
    }

    fn result(backend: &str, fingerprint: &str, passed: bool, at: i64) -> GateResult {
        GateResult {
            id: format!("{backend}{at}"),
            task: "t".into(),
            backend: backend.into(),
            fingerprint: fingerprint.into(),
            node: None,
            trigger: "cli".into(),
            started_ms: at,
            finished_ms: at,
            summary: Summary {
                items: 10,
                passed_items: if passed { 10 } else { 3 },
                errors: 0,
                p50_ms: Some(1),
                p95_ms: Some(2),
                cost: None,
                passed,
                why: if passed { "10/10 passed".into() } else { "3/10 passed".into() },
            },
        }
    }

    #[test]
    fn a_required_gate_refuses_until_the_current_fingerprint_passes() {
        let (config, pins, board) = (config(), PinBoard::default(), GateBoard::default());
        let pairs = |r: &BTreeMap<TaskName, BTreeMap<BackendName, String>>| {
            r.values().map(BTreeMap::len).sum::<usize>()
        };
        let refused = board.refusals(&config, &pins);
        assert_eq!(pairs(&refused), 2, "{refused:?}");
        assert_eq!(refused["t"]["oa"], "gate: no result yet for fingerprint gpt@v1");
        board.absorb([result("oa", "gpt@v1", true, 1), result("pool", "weights=a", false, 1)]);
        let refused = board.refusals(&config, &pins);
        assert_eq!(pairs(&refused), 1);
        assert!(refused["t"]["pool"].starts_with("gate failed for fingerprint weights=a: 3/10"));
        // A pass for another fingerprint does not count, until that pin is in effect.
        board.absorb([result("pool", "weights=b", true, 2)]);
        assert_eq!(pairs(&board.refusals(&config, &pins)), 1);
        pins.accept("pool", Pin { weights: Some("b".into()), ..Pin::default() });
        assert!(board.refusals(&config, &pins).is_empty());
        // The latest result per fingerprint wins.
        board.absorb([result("oa", "gpt@v1", false, 3)]);
        let standing = board.standings(&config, &pins).into_iter().find(|s| s.backend == "oa").unwrap();
        assert!(standing.last_run_failed && !standing.passing());
    }
}
