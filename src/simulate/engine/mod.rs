//! The discrete-event loop of one strategy's run: the router's state (snapshot, telemetry,
//! breakers, in-flight credit, PID availability, retry budget, quota windows), the modelled
//! nodes and providers, and the events that move them: arrivals, scrape ticks that rebuild
//! the snapshot with `Snapshot::build` exactly as the snapshot loop does, PID ticks, chart
//! samples, and timeline events. Dispatch (walking a plan) lives in `dispatch.rs`.
//!
//! Time is virtual (`clock.rs`); the run never sleeps and never reads a clock. It must not
//! plan by itself: every ordering decision is `route::plan` on the snapshot it built.
//!
//! Memory follows the work in flight, not the run's length: arrivals are drawn as they come
//! (`workload::Arrivals`), a request lives in a slot of `reqs` that is reused once it ends
//! (`free`), and outcomes are folded into `stats` as they happen. Attempt numbers are unique
//! across the run, so an event left over from a request that ended never matches the request
//! that reuses its slot.

mod batch;
mod dispatch;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rust_decimal::prelude::ToPrimitive;

use super::clock::{from_ms, from_secs, Clock, Micros, Queue};
use super::hosted::Provider;
use super::node::{Node, Started};
use super::scenario::{Batching, Planning, Run, Scenario, StrategyName};
use super::stats::Stats;
use super::strategies::{self, Tracked};
use super::workload::{Arrivals, Sessions};
use crate::canonical::{ErrorClass, NodeKey};
use crate::config::TaskConfig;
use crate::fleet::load::{LoadView, NodeCounters, NodeLoad};
use crate::fleet::telemetry::NodeTelemetry;
use crate::guard::breaker::Breaker;
use crate::guard::node::NodeHandle;
use crate::guard::quota::{Limits, MinuteWindow};
use crate::guard::retry_budget::RetryBudget;
use crate::route::availability::Availability;
use crate::route::candidates::{AffinityTable, Candidates};
use crate::route::sticky::{PoolShares, ShareFeedback};
use crate::snapshot::{NodeView, Snapshot, SnapshotInputs};
use dispatch::Req;

/// Something that happens at a virtual instant.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ev {
    Scrape,
    Pid,
    Sample,
    /// Timeline event `.0` starts (`true`) or ends.
    Timeline(usize, bool),
    /// An attempt whose backoff is over is sent.
    Begin {
        req: usize,
        attempt: u32,
    },
    FirstToken {
        req: usize,
        attempt: u32,
        cached: u32,
        /// Prompt tokens written to a hosted provider's cache.
        written: u32,
    },
    Done {
        req: usize,
        attempt: u32,
    },
    Failed {
        req: usize,
        attempt: u32,
        class: ErrorClass,
        /// How long the provider asked to be left alone (`Retry-After`), if it did.
        retry_after: Option<Micros>,
    },
    /// The first-token deadline of an attempt.
    Deadline {
        req: usize,
        attempt: u32,
    },
    /// The batch runner's poll.
    BatchTick,
    /// Batch job `.0` is submitted.
    BatchSubmit(usize),
    /// A provider's batch of `lines` of job `job` comes back.
    BatchBack {
        job: usize,
        lines: u64,
    },
    /// The end of the run's length: the fleet's hours are counted.
    End,
}

enum Next {
    Arrival,
    Event,
}

/// One strategy's run.
pub struct Engine<'a> {
    pub(super) s: &'a Scenario,
    pub(super) strategy: StrategyName,
    pub(super) clock: Clock,
    pub(super) q: Queue<Ev>,
    pub(super) rng: StdRng,
    pub(super) arrivals: Arrivals,
    /// The config's tasks as this strategy configures them.
    pub(super) tasks: Vec<TaskConfig>,
    /// The same tasks with their fleet pools only (batch lines that run on the fleet only).
    pub(super) fleet_tasks: Vec<TaskConfig>,
    /// Where this run's batch jobs go (`None`: the scenario has none).
    pub(super) batching: Option<Batching>,
    pub(super) jobs: Vec<batch::JobRun>,
    pub(super) snap: Snapshot,
    /// The snapshot's index of its large pools (`Planning::Bounded`), rebuilt with it.
    pub(super) candidates: Option<Candidates>,
    version: u64,
    /// Each large pool's affinity node per project (by backend index), for `Candidates`.
    affinity: Vec<Option<Arc<AffinityTable>>>,
    /// Flat node index of each backend's first node.
    pub(super) node_base: Vec<usize>,
    /// (backend, node) of each flat node; its key.
    pub(super) flat: Vec<(usize, usize, NodeKey)>,
    pub(super) key_to_flat: HashMap<NodeKey, usize>,
    pub(super) load: Arc<NodeLoad>,
    /// Each flat node's counters in `load`, looked up once.
    pub(super) counters: Vec<NodeCounters>,
    telemetry: Vec<NodeTelemetry>,
    pub(super) breakers: Vec<Breaker>,
    pub(super) router_in_flight: Vec<u32>,
    pub(super) availability: Availability,
    /// Each pool's sticky-spill share, stepped after a rebuild (at most once a second) as the snapshot loop does.
    shares: PoolShares,
    /// What planning saw of each pool's own projects since the shares last stepped.
    pub(super) share_feedback: ShareFeedback,
    tracked: Vec<String>,
    pub(super) budget: RetryBudget,
    pub(super) quota: Vec<(Option<Limits>, MinuteWindow)>,
    /// vLLM models by flat node index (`None` for hosted endpoints).
    pub(super) nodes: Vec<Option<Node>>,
    /// Provider models by backend index (`None` for pools).
    pub(super) providers: Vec<Option<Provider>>,
    /// Requests in flight, by slot; a slot is reused once its request has ended.
    pub(super) reqs: Vec<Req>,
    /// Slots of `reqs` free for the next request.
    pub(super) free: Vec<usize>,
    /// Requests arrived so far (each request's `seq`).
    pub(super) arrived: u64,
    /// The last attempt number handed out (numbers are unique across the run).
    pub(super) attempts: u32,
    pub(super) stats: Stats,
    end: Micros,
    last_pid: Micros,
}

impl<'a> Engine<'a> {
    pub fn new(s: &'a Scenario, run: Run) -> Engine<'a> {
        let strategy = run.strategy;
        let clock = Clock::new();
        let config = Arc::clone(&s.config);
        let snap = Snapshot::from_config(Arc::clone(&config));
        let mut node_base = Vec::new();
        let mut flat = Vec::new();
        let mut nodes = Vec::new();
        let mut providers = Vec::new();
        for (b, view) in snap.backends.iter().enumerate() {
            node_base.push(flat.len());
            for (n, node) in view.nodes.iter().enumerate() {
                flat.push((b, n, node.key.clone()));
                nodes.push(view.is_local().then(|| Node::new(&s.nodes[&view.name], view.limits.max_running)));
            }
            let counts_cached = config.backends[b].quota_counts_cached();
            let model = s.providers.get(&view.name).filter(|_| !view.is_local());
            providers.push(model.map(|m| Provider::new(m, counts_cached)));
        }
        let key_to_flat = flat.iter().enumerate().map(|(i, (_, _, k))| (k.clone(), i)).collect();
        let tracked: Vec<String> = config
            .backends
            .iter()
            .filter(|b| match strategy.tracked() {
                Tracked::None => false,
                Tracked::Hosted => !b.kind().is_local(),
                Tracked::All => true,
            })
            .map(|b| b.name.clone())
            .collect();
        let mut availability = Availability::from_settings(&config.balancing);
        tracked.iter().for_each(|b| availability.track(b));
        let dispatch = &config.dispatch;
        let quota = config
            .backends
            .iter()
            .map(|b| {
                (
                    b.hosted().and_then(|h| h.quota.as_ref()).map(|q| Limits { rpm: q.rpm, tpm: q.tpm }),
                    MinuteWindow::default(),
                )
            })
            .collect();
        let projects = s.workload.iter().map(|w| w.projects as usize).sum::<usize>() + Sessions::projects(s);
        let buckets = (s.duration.as_secs_f64() / s.sample.as_secs_f64()).ceil() as usize;
        let base = clock.instant(0);
        let arrivals = Arrivals::new(s);
        let tasks: Vec<TaskConfig> = config.tasks.iter().map(|t| strategy.task(t, &s.weights)).collect();
        let fleet_tasks = tasks
            .iter()
            .map(|t| {
                let mut fleet = t.clone();
                fleet.backends.retain(|b| config.backend(b).is_some_and(|b| b.kind().is_local()));
                fleet
            })
            .collect();
        let load = NodeLoad::new();
        let counters = flat.iter().map(|(_, _, key)| load.node(key)).collect();
        let affinity = snap
            .backends
            .iter()
            .map(|view| match s.planning {
                Planning::Bounded { min_nodes, .. } if view.is_local() && view.nodes.len() >= min_nodes => {
                    Some(Arc::new(AffinityTable::new(&view.nodes, arrivals.affinity_keys())))
                }
                _ => None,
            })
            .collect();
        Engine {
            s,
            strategy,
            clock,
            q: Queue::new(),
            rng: StdRng::seed_from_u64(s.seed.wrapping_add(0x5eed)),
            arrivals,
            tasks,
            fleet_tasks,
            batching: run.batching,
            jobs: Vec::new(),
            snap,
            candidates: None,
            version: 1,
            affinity,
            node_base,
            breakers: flat.iter().map(|_| Breaker::new(base)).collect(),
            router_in_flight: vec![0; flat.len()],
            telemetry: flat.iter().map(|_| NodeTelemetry::new()).collect(),
            flat,
            key_to_flat,
            load,
            counters,
            availability,
            shares: PoolShares::default(),
            share_feedback: ShareFeedback::default(),
            tracked,
            budget: RetryBudget::new(dispatch.retry_budget_ratio, dispatch.retry_budget_min_per_sec, base),
            quota,
            nodes,
            providers,
            reqs: Vec::new(),
            free: Vec::new(),
            arrived: 0,
            attempts: 0,
            stats: Stats::new(run, s.batches.len(), s.duration.as_secs_f64() / 3600.0, projects, buckets),
            end: from_secs(s.duration.as_secs_f64()),
            last_pid: 0,
        }
    }

    pub(super) fn bucket_of(&self, t: Micros) -> usize {
        (t / from_secs(self.s.sample.as_secs_f64()).max(1)) as usize
    }

    /// Run to the end (and until every request has ended); `progress` gets the share done.
    pub fn run(mut self, progress: &mut dyn FnMut(f64)) -> Stats {
        for (i, e) in self.s.timeline.iter().enumerate() {
            self.q.push(from_secs(e.at.0), Ev::Timeline(i, true));
            if let Some(until) = e.until {
                self.q.push(from_secs(until.0), Ev::Timeline(i, false));
            }
        }
        self.q.push(0, Ev::Scrape);
        self.q.push(self.end, Ev::End);
        if self.batching.is_some() {
            self.jobs = self.batch_jobs();
            self.q.push(0, Ev::BatchTick);
        }
        self.q.push(from_secs(self.pid_interval()), Ev::Pid);
        self.q.push(from_secs(self.s.sample.as_secs_f64()), Ev::Sample);
        let last_window = self.s.batches.iter().map(|b| from_secs(b.at.0 + b.window.0)).max().unwrap_or(0);
        let hard_stop = self.end.max(last_window) + from_secs(600.0);
        let mut reported = 0;
        loop {
            // An arrival goes before any event due at the same instant.
            let next = match (self.arrivals.peek_at(), self.q.peek_at()) {
                (Some(a), Some(e)) if a <= e => Next::Arrival,
                (Some(_), None) => Next::Arrival,
                (_, Some(_)) => Next::Event,
                (None, None) => break,
            };
            let now = match next {
                Next::Arrival => {
                    let a = self.arrivals.next().expect("peeked");
                    let now = a.at_us;
                    self.arrive(a, now);
                    now
                }
                Next::Event => {
                    let (now, ev) = self.q.pop().expect("peeked");
                    if now > hard_stop {
                        break;
                    }
                    self.handle(now, ev);
                    now
                }
            };
            let pct = (now.min(self.end) * 100 / self.end.max(1)) as u32;
            if pct > reported {
                reported = pct;
                progress(f64::from(pct) / 100.0);
            }
        }
        self.stats
    }

    fn pid_interval(&self) -> f64 {
        self.s.config.balancing.interval_secs as f64
    }

    fn handle(&mut self, now: Micros, ev: Ev) {
        let ticking = now < self.end;
        match ev {
            Ev::Scrape => {
                self.scrape(now);
                if ticking {
                    self.q.push(now + from_ms(self.s.config.telemetry.interval_ms as f64), Ev::Scrape);
                }
            }
            Ev::Pid => {
                let dt = std::time::Duration::from_micros(now - self.last_pid);
                self.last_pid = now;
                self.availability.tick(dt);
                self.rebuild(now);
                if ticking {
                    self.q.push(now + from_secs(self.pid_interval()), Ev::Pid);
                }
            }
            Ev::Sample => {
                self.sample(now);
                if ticking {
                    self.q.push(now + from_secs(self.s.sample.as_secs_f64()), Ev::Sample);
                }
            }
            Ev::Timeline(i, start) => self.timeline(i, start, now),
            Ev::Begin { req, attempt } => self.begin(req, attempt, now),
            Ev::FirstToken { req, attempt, cached, written } => {
                self.first_token(req, attempt, (cached, written), now)
            }
            Ev::Done { req, attempt } => self.done(req, attempt, now),
            Ev::Failed { req, attempt, class, retry_after } => {
                self.failed(req, attempt, class, retry_after, now)
            }
            Ev::Deadline { req, attempt } => self.deadline(req, attempt, now),
            Ev::BatchTick => self.batch_tick(now),
            Ev::BatchSubmit(job) => self.batch_submit(job, now),
            Ev::BatchBack { job, lines } => self.batch_back(job, lines, now),
            Ev::End => self.count_fleet_hours(now),
        }
    }

    /// Every live node is scraped (the router's credit since then is cleared); dead nodes fail
    /// their scrape. Then the snapshot is rebuilt, as the snapshot loop does.
    fn scrape(&mut self, now: Micros) {
        let at = self.clock.instant(now);
        let lag = std::time::Duration::from_millis(self.s.config.telemetry.gauge_lag_ms);
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            if node.alive {
                self.telemetry[i].on_scrape(crate::canonical::Engine::Vllm, node.sample(now), at);
                self.counters[i].mark_scraped(at, at, lag);
            } else {
                self.telemetry[i].on_failure("connection refused".into(), at);
            }
        }
        self.rebuild(now);
    }

    pub(super) fn rebuild(&mut self, now: Micros) {
        let at = self.clock.instant(now);
        let minute = self.clock.unix_ms(now) / 60_000;
        let headroom = self.strategy.uses_headroom();
        let flat_of = |key: &NodeKey| self.key_to_flat.get(key).copied();
        let signals = |key: &NodeKey| {
            let i = flat_of(key)?;
            if headroom {
                let t = &self.telemetry[i];
                (t.scrapes > 0).then(|| t.signals())
            } else {
                Some(strategies::idle_signals(at))
            }
        };
        let breaker = |key: &NodeKey| flat_of(key).map(|i| self.breakers[i].view(at)).unwrap_or_default();
        let over_quota = |name: &str| match &self.quota[self.backend_index(name)] {
            (Some(limits), window) => window.exhausted(minute, limits),
            _ => false,
        };
        let availability = |name: &str| self.availability.effective(name);
        let slow = |name: &str| self.availability.slow(name);
        let share = |name: &str| self.shares.get(name);
        let none = BTreeMap::new();
        let inputs = SnapshotInputs {
            discovered: &none,
            breaker: &breaker,
            handle: &NodeHandle::detached,
            signals: &signals,
            quarantine: &|_| None,
            over_quota: &over_quota,
            availability: &availability,
            slow: &slow,
            share: &share,
        };
        let snap = Snapshot::build(Arc::clone(&self.s.config), &inputs, self.version + 1);
        let load = &self.load;
        let view = |node: &NodeView| if headroom { load.view(&node.key) } else { LoadView::default() };
        self.candidates = match self.s.planning {
            Planning::Bounded { min_nodes, k } => {
                Some(Candidates::build(&snap, (at, &view), k, min_nodes, &self.affinity))
            }
            Planning::Full => None,
        };
        self.version += 1;
        self.shares.step(&snap, &view, &self.share_feedback, at);
        self.snap = snap;
    }

    fn sample(&mut self, now: Micros) {
        let bucket = self.bucket_of(now.saturating_sub(1));
        let avail: BTreeMap<String, f64> =
            self.tracked.iter().map(|b| (b.clone(), self.availability.get(b))).collect();
        let weights = match (self.strategy.tracked(), self.s.first_task()) {
            (Tracked::None, _) | (_, None) => BTreeMap::new(),
            (_, Some(name)) => {
                // The backends whose availability is tracked, in the task's preference order (for
                // spillway: the hosted chain used when the fleet has no headroom).
                let mut task = self.s.config.task(name).expect("validated").clone();
                task.backends.retain(|b| self.tracked.contains(b));
                strategies::current_weights(&task, &|b: &str| self.availability.get(b)).into_iter().collect()
            }
        };
        let b = self.stats.bucket(bucket);
        b.availability = avail;
        b.weights = weights;
    }

    fn timeline(&mut self, i: usize, start: bool, now: Micros) {
        let e = &self.s.timeline[i];
        let provider = |name: &str, engine: &Engine<'_>| engine.backend_index(name);
        if let Some(name) = &e.outage {
            let b = provider(name, self);
            let p = self.providers[b].as_mut().expect("validated: hosted");
            if start {
                p.outages += 1;
            } else {
                p.outages = p.outages.saturating_sub(1);
            }
        }
        if let Some(change) = &e.quota {
            let b = provider(&change.backend, self);
            let p = self.providers[b].as_mut().expect("validated: hosted");
            if start {
                (p.rpm, p.tpm) = (change.rpm.or(p.rpm), change.tpm.or(p.tpm));
            } else {
                (p.rpm, p.tpm) = (p.model().rpm, p.model().tpm);
            }
        }
        if let Some(change) = &e.errors {
            let b = provider(&change.backend, self);
            let p = self.providers[b].as_mut().expect("validated: hosted");
            p.error_rate = if start { change.rate } else { p.model().error_rate };
        }
        if let Some(change) = &e.slowdown {
            let b = provider(&change.backend, self);
            let p = self.providers[b].as_mut().expect("validated: hosted");
            p.slowdown = if start { (change.ttft_factor, change.tps_factor) } else { (1.0, 1.0) };
        }
        if let Some(reference) = &e.node_down {
            let (b, n) = self.s.node_ref(reference).expect("validated");
            let flat = self.node_base[b] + n;
            let node = self.nodes[flat].as_mut().expect("validated: vllm");
            if start {
                let lost = node.fail(now);
                self.node_lost(lost, now);
            } else {
                node.recover();
            }
        }
    }

    /// The fleet's GPU hours up to `now` (the run's end), and those its slots stood empty.
    fn count_fleet_hours(&mut self, now: Micros) {
        let hours = super::clock::secs(now) / 3600.0;
        let mut fleet = super::stats::FleetHours::default();
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            let pool = self.s.config.backends[self.flat[i].0].pool();
            let gpus = f64::from(pool.map_or(1, |p| p.gpu_count));
            let busy_share = node.busy_slot_secs(now) / 3600.0 / node.slots() as f64;
            fleet.gpu_hours += hours * gpus;
            fleet.idle_gpu_hours += (hours - busy_share).max(0.0) * gpus;
            let rate = pool.and_then(|p| p.gpu_hourly_usd).and_then(|d| d.to_f64()).unwrap_or(0.0);
            fleet.cost += rate * hours * gpus;
        }
        self.stats.fleet = fleet;
    }

    pub(super) fn backend_index(&self, name: &str) -> usize {
        self.s.config.backends.iter().position(|b| b.name == name).expect("validated backend name")
    }

    /// Schedule the first tokens and ends of jobs that just entered a node's slots, and the new
    /// ends of those whose end moved (the old `Done` is then stale: `done` skips it).
    pub(super) fn schedule(&mut self, started: Vec<Started>) {
        for s in started {
            if !s.moved {
                let first = Ev::FirstToken { req: s.req, attempt: s.attempt, cached: s.cached, written: 0 };
                self.q.push(s.first_token, first);
            }
            self.q.push(s.done, Ev::Done { req: s.req, attempt: s.attempt });
        }
    }
}
