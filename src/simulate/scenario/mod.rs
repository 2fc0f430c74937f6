//! Scenario files: what one simulated run is made of (the router config, the modelled vLLM
//! nodes and hosted providers, the workload, the failure timeline, the strategies to compare).
//!
//! It exists so that a scenario is data an operator can read and change, checked the way the
//! router's own config is: unknown keys are rejected and every problem names its key path
//! (`providers.anthropic.ttft_ms`, `router.backends[1].kind`). The inline `router` section is
//! the same schema as `spillway.example.yaml` and goes through `config::parse` unchanged. It
//! must not model anything itself; the models read these values.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

mod traffic;
mod validate;

use traffic::one;
pub use traffic::{BatchJob, Dist, Rate, SessionStream, Stream};

use crate::config::{self, BackendKind, Config, Problem};

/// A length of time in seconds: a number, or a string like `90s`, `40m`, `1h`, `250ms`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Secs(pub f64);

impl Secs {
    pub fn duration(self) -> Duration {
        Duration::from_secs_f64(self.0.max(0.0))
    }
}

fn parse_secs(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    num.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(|v| v * scale)
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secs, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Secs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("seconds, or a duration like 90s, 40m, 1h")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Secs, E> {
                Ok(Secs(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Secs, E> {
                if v < 0 {
                    return Err(E::custom("must not be negative"));
                }
                Ok(Secs(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Secs, E> {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(E::custom("must be a number ≥ 0"));
                }
                Ok(Secs(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Secs, E> {
                parse_secs(v)
                    .map(Secs)
                    .ok_or_else(|| E::custom(format!("`{v}` is not a duration like 90s, 40m, 1h")))
            }
        }
        d.deserialize_any(V)
    }
}

/// The strategies a scenario can compare (see `strategies.rs` for how each maps onto `plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyName {
    Priority,
    Weighted,
    PidChains,
    Spillway,
}

impl StrategyName {
    pub const ALL: [StrategyName; 4] =
        [StrategyName::Priority, StrategyName::Weighted, StrategyName::PidChains, StrategyName::Spillway];

    pub fn as_str(self) -> &'static str {
        match self {
            StrategyName::Priority => "priority",
            StrategyName::Weighted => "weighted",
            StrategyName::PidChains => "pid-chains",
            StrategyName::Spillway => "spillway",
        }
    }
}

/// One vLLM node, as every node of a pool is modelled.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NodeModel {
    /// Sequence slots (vLLM's `--max-num-seqs`); 0: the pool's `max_running`.
    pub max_num_seqs: u32,
    /// Prefill speed of uncached prompt tokens, tokens per second.
    pub prefill_tps: f64,
    /// What each prompt's prefill takes besides its tokens, ms: the batch's setup and the
    /// engine's scheduling (tens of ms for llama.cpp on a CPU, next to none on a GPU engine).
    pub prefill_setup_ms: f64,
    /// One engine step (one output token for every running sequence) with one sequence, ms.
    pub step_ms: f64,
    /// What each further running sequence adds to a step, ms.
    pub step_per_seq_ms: f64,
    /// The sequences decoding stand still while a prompt is prefilled (llama.cpp, whose one
    /// loop runs a whole prompt in a batch); `false`: prefill is mixed in with the decode steps
    /// (vLLM's and SGLang's chunked prefill).
    pub decode_waits_for_prefill: bool,
    /// KV-cache capacity in tokens (reported as blocks of 16).
    pub kv_tokens: u64,
    /// A project's prefix stays cached on a node this long after its last request there.
    pub prefix_cache: Secs,
    /// The prefix cache's capacity in tokens: past it the least recently used prefixes go
    /// first (an engine's cache is its free KV blocks, or a host-memory prompt cache); 0: no
    /// bound but the time.
    pub prefix_cache_tokens: u64,
    /// How long the node's gauges (running, waiting, KV use) trail its true state: a scrape
    /// reads them as they were this long before (vLLM's trail by seconds; llama.cpp's by none).
    pub gauge_lag: Secs,
}

impl Default for NodeModel {
    fn default() -> Self {
        NodeModel {
            max_num_seqs: 0,
            prefill_tps: 8000.0,
            prefill_setup_ms: 0.0,
            step_ms: 20.0,
            step_per_seq_ms: 0.5,
            decode_waits_for_prefill: false,
            kv_tokens: 400_000,
            prefix_cache: Secs(600.0),
            prefix_cache_tokens: 0,
            gauge_lag: Secs(0.0),
        }
    }
}

/// One hosted provider (a hosted backend of the router config).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderModel {
    /// Median time to first token for a short prompt, ms.
    pub ttft_ms: f64,
    /// Log-normal spread of the TTFT (sigma of its logarithm).
    pub ttft_jitter: f64,
    /// TTFT added per 1000 uncached prompt tokens, ms.
    pub per_1k_prompt_ms: f64,
    /// Output speed, tokens per second.
    pub tokens_per_sec: f64,
    /// The provider's own per-minute request limit (429 beyond it).
    pub rpm: Option<u64>,
    /// The provider's own per-minute limit of uncached input + output tokens (429 beyond it).
    pub tpm: Option<u64>,
    /// Share of requests that fail with a 5xx in normal operation.
    pub error_rate: f64,
    /// How long an error (429, 5xx, 503) takes to come back, ms.
    pub error_ms: f64,
    /// A project's prompt prefix stays cached this long after its last request here.
    pub prompt_cache: Secs,
    /// How long a batch handed to its batch API takes to come back, whatever its size.
    pub batch_turnaround: Secs,
}

impl Default for ProviderModel {
    fn default() -> Self {
        ProviderModel {
            ttft_ms: 450.0,
            ttft_jitter: 0.25,
            per_1k_prompt_ms: 40.0,
            tokens_per_sec: 80.0,
            rpm: None,
            tpm: None,
            error_rate: 0.001,
            error_ms: 150.0,
            prompt_cache: Secs(300.0),
            batch_turnaround: Secs(3600.0),
        }
    }
}

/// Where a scenario's batch jobs run, each a run of its own beside every strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batching {
    /// Batching on: the fleet's free slots first, a provider's batch API (or hosted realtime)
    /// only when the job's window needs it, as the router's batch runner does.
    Fleet,
    /// Batching off: the whole job to a provider's batch API when it is submitted, as teams
    /// without the router do.
    Provider,
}

impl Batching {
    pub fn as_str(self) -> &'static str {
        match self {
            Batching::Fleet => "fleet",
            Batching::Provider => "provider",
        }
    }
}

/// One run of a scenario: a strategy, and where its batch jobs go (`None`: it has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub strategy: StrategyName,
    pub batching: Option<Batching>,
}

impl Run {
    /// The run's name in reports: the strategy, and where batches went when there are any.
    pub fn label(self) -> String {
        match self.batching {
            None => self.strategy.as_str().to_string(),
            Some(b) => format!("{}/{}", self.strategy.as_str(), b.as_str()),
        }
    }
}

/// A provider-side limit change.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QuotaChange {
    pub backend: String,
    #[serde(default)]
    pub rpm: Option<u64>,
    #[serde(default)]
    pub tpm: Option<u64>,
}

/// A provider's error rate for a while.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ErrorChange {
    pub backend: String,
    pub rate: f64,
}

/// A provider that stays up but answers slower for a while: its time to first token is
/// multiplied by `ttft_factor` and its output speed divided by `tps_factor`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slowdown {
    pub backend: String,
    #[serde(default = "one")]
    pub ttft_factor: f64,
    #[serde(default = "one")]
    pub tps_factor: f64,
}

/// Something that happens at `at` and (if `until` is given) is undone then. Exactly one of
/// `outage`, `node_down`, `quota`, `errors`, `slowdown` is set.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimelineEvent {
    pub at: Secs,
    #[serde(default)]
    pub until: Option<Secs>,
    /// A hosted backend answers every request with 503.
    #[serde(default)]
    pub outage: Option<String>,
    /// A vLLM node (`backend#index`) is gone: in-flight requests break, scrapes fail.
    #[serde(default)]
    pub node_down: Option<String>,
    /// The provider's own limits change (restored at `until`).
    #[serde(default)]
    pub quota: Option<QuotaChange>,
    /// The provider's error rate changes (restored at `until`).
    #[serde(default)]
    pub errors: Option<ErrorChange>,
    /// The provider answers slower (restored at `until`).
    #[serde(default)]
    pub slowdown: Option<Slowdown>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    description: String,
    duration: Secs,
    #[serde(default)]
    seed: u64,
    #[serde(default = "all_strategies")]
    strategies: Vec<StrategyName>,
    /// Weights of the `weighted` baseline, by backend name (equal when empty).
    #[serde(default)]
    weights: BTreeMap<String, f64>,
    /// Width of one chart bucket; default: a 120th of the duration, at least 10 s.
    #[serde(default)]
    sample: Option<Secs>,
    router: serde_yaml_ng::Value,
    #[serde(default)]
    nodes: BTreeMap<String, NodeModel>,
    #[serde(default)]
    providers: BTreeMap<String, ProviderModel>,
    #[serde(default)]
    workload: Vec<Stream>,
    #[serde(default)]
    sessions: Vec<SessionStream>,
    #[serde(default)]
    timeline: Vec<TimelineEvent>,
    #[serde(default)]
    batches: Vec<BatchJob>,
    /// Where batch jobs go, a run each (default: both, when there are batch jobs).
    #[serde(default = "both_batchings")]
    batching: Vec<Batching>,
}

fn both_batchings() -> Vec<Batching> {
    vec![Batching::Fleet, Batching::Provider]
}

fn all_strategies() -> Vec<StrategyName> {
    StrategyName::ALL.to_vec()
}

/// A checked scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub duration: Duration,
    pub seed: u64,
    pub strategies: Vec<StrategyName>,
    pub weights: BTreeMap<String, f64>,
    pub sample: Duration,
    pub config: Arc<Config>,
    /// By vLLM backend name; every vLLM backend has one (the default when not given).
    pub nodes: BTreeMap<String, NodeModel>,
    /// By hosted backend name; every hosted backend has one.
    pub providers: BTreeMap<String, ProviderModel>,
    pub workload: Vec<Stream>,
    pub sessions: Vec<SessionStream>,
    pub timeline: Vec<TimelineEvent>,
    pub batches: Vec<BatchJob>,
    pub batching: Vec<Batching>,
    /// How planning judges large pools (not read from the file).
    pub planning: Planning,
}

/// How the simulated router judges a pool's nodes for each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planning {
    /// Every node of every pool, as the server does.
    Full,
    /// Pools of at least `min_nodes` nodes through a bounded candidate set
    /// (`route::candidates`) that finds `k` admitted nodes: the same first targets, fewer
    /// nodes judged.
    Bounded { min_nodes: usize, k: usize },
}

impl Default for Planning {
    fn default() -> Self {
        Planning::Bounded { min_nodes: 64, k: crate::route::candidates::DEFAULT_K }
    }
}

impl Scenario {
    /// Every run: each strategy, with each place batch jobs may go when there are any.
    pub fn runs(&self) -> Vec<Run> {
        let batchings: Vec<Option<Batching>> = if self.batches.is_empty() {
            vec![None]
        } else {
            self.batching.iter().copied().map(Some).collect()
        };
        self.strategies
            .iter()
            .flat_map(|&strategy| batchings.iter().map(move |&batching| Run { strategy, batching }))
            .collect()
    }

    /// The task of the scenario's first stream (workload, else sessions): the one its report
    /// gives the SLO of.
    pub fn first_task(&self) -> Option<&str> {
        let sessions = self.sessions.iter().map(|w| w.task.as_str());
        self.workload.iter().map(|w| w.task.as_str()).chain(sessions).next()
    }

    /// The `(backend index, node index)` a `backend#index` reference names.
    pub(crate) fn node_ref(&self, reference: &str) -> Option<(usize, usize)> {
        let (name, index) = reference.split_once('#')?;
        let b = self.config.backends.iter().position(|b| b.name == name && b.kind() == BackendKind::Local)?;
        let i: usize = index.parse().ok()?;
        (i < self.config.backends[b].endpoints().len()).then_some((b, i))
    }

    /// Shorten the scenario (tests): timeline and rate points scale with it.
    pub(crate) fn scaled_to(&mut self, duration: Duration) {
        let f = duration.as_secs_f64() / self.duration.as_secs_f64().max(1e-9);
        let scale = |s: &mut Secs| s.0 *= f;
        for e in &mut self.timeline {
            scale(&mut e.at);
            if let Some(u) = &mut e.until {
                scale(u);
            }
        }
        for w in &mut self.workload {
            if let Rate::Points(points) = &mut w.rps {
                points.iter_mut().for_each(|(t, _)| scale(t));
            }
        }
        for w in &mut self.sessions {
            scale(&mut w.at);
        }
        for b in &mut self.batches {
            scale(&mut b.at);
            scale(&mut b.window);
        }
        self.sample = self.sample.mul_f64(f).max(Duration::from_secs(1));
        self.duration = duration;
    }
}

/// Read and check a scenario file.
pub fn load_file(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let name = path.file_stem().map_or("scenario".into(), |s| s.to_string_lossy().into_owned());
    parse(&name, &text).map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        format!("{}:\n{}", path.display(), lines.join("\n"))
    })
}

/// Parse and check scenario text.
pub fn parse(name: &str, text: &str) -> Result<Scenario, Vec<Problem>> {
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| vec![Problem::new("", format!("not valid YAML: {e}"))])?;
    let file: File = serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        vec![Problem::new(if path == "." { String::new() } else { path }, err.into_inner().to_string())]
    })?;
    let router_text = serde_yaml_ng::to_string(&file.router)
        .map_err(|e| vec![Problem::new("router", format!("cannot read: {e}"))])?;
    let config = config::parse(&router_text).map_err(|problems| {
        problems
            .into_iter()
            .map(|p| Problem::new(format!("router.{}", p.path), p.message))
            .collect::<Vec<_>>()
    })?;
    let sample = file.sample.map(Secs::duration).unwrap_or_else(|| {
        Duration::from_secs_f64((file.duration.0 / 120.0).max(10.0).min(file.duration.0.max(1.0)))
    });
    let mut scenario = Scenario {
        name: name.to_string(),
        description: file.description,
        duration: file.duration.duration(),
        seed: file.seed,
        strategies: file.strategies,
        weights: file.weights,
        sample,
        config: Arc::new(config),
        nodes: file.nodes,
        providers: file.providers,
        workload: file.workload,
        sessions: file.sessions,
        timeline: file.timeline,
        batches: file.batches,
        batching: file.batching,
        planning: Planning::default(),
    };
    let problems = validate::check(&mut scenario);
    if problems.is_empty() {
        Ok(scenario)
    } else {
        Err(problems)
    }
}
