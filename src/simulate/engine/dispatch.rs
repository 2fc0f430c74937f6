//! Dispatch on virtual time: a request is planned once on arrival (`route::plan`), then its
//! plan is walked by the same state machine the router runs (`dispatch::walk`), asking
//! modelled guards: per-node in-flight limit, breaker permit (the pure `Breaker`, explicit
//! `now`, held for a rate-limited provider's `Retry-After`), the retry budget and the
//! router's per-minute quota windows. Calls take virtual time: a first-token deadline of
//! SLO × factor, modelled nodes and providers. After the first token the request is
//! committed, and a node lost mid-stream is a client-visible error. Outcomes feed breakers
//! and (for tracked backends) PID availability.

use std::future::Future;

use futures::FutureExt;
use rand::Rng;
use tokio::time::Instant;

use super::batch::Line;
use super::{Engine, Ev};
use crate::canonical::{ErrorClass, Event, Usage};
use crate::config::{BreakerConfig, TaskConfig};
use crate::dispatch::walk::{AfterFailure, Guards, Stop, Walk};
use crate::fleet::headroom;
use crate::fleet::load::{InFlight, LoadView};
use crate::fleet::prefix_cache::PrefixKeys;
use crate::fleet::progress::Touch;
use crate::guard::breaker::Breaker;
use crate::guard::quota::{Limits, MinuteWindow};
use crate::guard::retry_budget::RetryBudget;
use crate::outcome::Skip;
use crate::route::{self, chain, CachedOn, RequestFacts, Target};
use crate::simulate::clock::{from_ms, Micros};
use crate::simulate::hosted::{Answer, Call};
use crate::simulate::node::Job;
use crate::simulate::scenario::StrategyName;
use crate::simulate::stats::ServedRequest;
use crate::simulate::strategies;
use crate::simulate::workload::Arrival;
use crate::snapshot::{NodeView, Snapshot};

/// One client request's progress through its plan.
#[derive(Debug)]
pub(crate) struct Req {
    pub arrival: Arrival,
    /// Its place in arrival order.
    pub seq: u64,
    pub walk: Walk,
    /// Number of the current attempt, unique across the run (0: none yet); events of other
    /// attempts are stale.
    pub attempt: u32,
    /// Flat node index of the attempt in flight.
    pub current: Option<usize>,
    pub committed: bool,
    pub within_slo: bool,
    pub finished: bool,
    pub in_flight: Option<InFlight>,
    /// Output tokens after the task's cap.
    pub output: u32,
    /// When the current attempt was sent.
    pub sent_at: Micros,
    /// Prompt tokens the current attempt found cached, once its first token came.
    pub cached: u32,
    /// The batch line it is (`None`: a client's request).
    pub batch: Option<Line>,
}

impl Engine<'_> {
    fn at(&self, t: Micros) -> Instant {
        self.clock.instant(t)
    }

    fn first_token_deadline(&self, task: usize) -> Micros {
        let t = &self.s.config.tasks[task];
        from_ms(t.slo.ttft_ms as f64 * self.s.config.dispatch.ttft_deadline_factor)
    }

    fn pending(&self, r: usize, attempt: u32) -> bool {
        let q = &self.reqs[r];
        !q.finished && !q.committed && q.attempt == attempt && q.current.is_some()
    }

    /// A client's request arrives.
    pub(super) fn arrive(&mut self, a: Arrival, now: Micros) {
        self.stats.arrived(self.bucket_of(a.at_us));
        self.start(a, None, now);
    }

    /// A request (a client's, or a batch line the runner starts): plan it on the current
    /// snapshot and start walking the plan.
    pub(super) fn start(&mut self, a: Arrival, line: Option<Line>, now: Micros) {
        let at = self.at(now);
        self.budget.deposit(at);
        let hash = a.affinity;
        let window =
            chain::window_index(self.clock.unix_secs(now), self.s.config.balancing.affinity_window_secs);
        let seed = if self.strategy.random_seed() { self.rng.gen() } else { hash };
        let base = match line {
            Some(l) if l.fleet_only => &self.fleet_tasks[a.task],
            _ => &self.tasks[a.task],
        };
        let reordered;
        let task: &TaskConfig = if self.strategy == StrategyName::PidChains && line.is_none() {
            let key = format!("{hash:016x}");
            let backends = strategies::pid_chain(base, &self.snap, &self.availability, &key, window);
            reordered = TaskConfig { backends, ..base.clone() };
            &reordered
        } else {
            base
        };
        let output = a.output_tokens.min(task.max_output_tokens.unwrap_or(u32::MAX));
        let headroom = self.strategy.uses_headroom();
        let load = &self.load;
        let view = |node: &NodeView| if headroom { load.view(&node.key) } else { LoadView::default() };
        let keys = prefix_keys(&a);
        let counters = &self.counters;
        let flat_of = &self.key_to_flat;
        let cached = |node: &NodeView| {
            let i = *flat_of.get(&node.key)?;
            counters[i].cached(&keys, a.prompt_tokens, node.signals.restarts)
        };
        let facts = RequestFacts {
            task,
            prompt_tokens: a.prompt_tokens,
            max_output_tokens: output,
            seed,
            affinity: Some(hash),
            window,
            priority: a.priority,
            load: &view,
            request: None,
            candidates: self.candidates.as_ref(),
            waits: None,
            cached: headroom.then_some(&cached as &CachedOn<'_>),
        };
        let planned = route::plan(&facts, &self.snap, at);
        if let Ok(p) = &planned {
            self.share_feedback.record(&self.snap, p, a.prompt_tokens);
        }
        let req = Req {
            arrival: a,
            seq: self.arrived,
            walk: Walk::default(),
            attempt: 0,
            current: None,
            committed: false,
            within_slo: false,
            finished: false,
            in_flight: None,
            output,
            sent_at: now,
            cached: 0,
            batch: line,
        };
        self.arrived += 1;
        let r = match self.free.pop() {
            Some(r) => {
                self.reqs[r] = req;
                r
            }
            None => {
                self.reqs.push(req);
                self.reqs.len() - 1
            }
        };
        match planned {
            Err(_) => self.fail(r, "no_backend", now),
            Ok(p) if p.targets.is_empty() => {
                self.fail(r, if p.spills.is_empty() { "exhausted" } else { "shed" }, now)
            }
            Ok(p) => {
                let targets = p.targets.into_iter().map(|t| {
                    let local = self.snap.backends[t.backend].is_local();
                    (t, local)
                });
                self.reqs[r].walk = Walk::new(targets, &self.s.config.dispatch);
                self.walk(r, now);
            }
        }
    }

    /// Request `r` ended before its first token with `kind`: an error its client sees, or a
    /// batch line turned away (refused when it was the line's own fault).
    fn fail(&mut self, r: usize, kind: &str, now: Micros) {
        let bucket = self.bucket_of(self.reqs[r].arrival.at_us);
        let line = self.reqs[r].batch;
        self.end_request(r, 0, now);
        match line {
            Some(line) => self.line_turned_away(line, kind == "client", now),
            None => self.stats.error(bucket, kind),
        }
    }

    /// A request of the router's left flat node `flat`: one fewer in flight, and the bounded
    /// index may hand the node out again.
    fn left_node(&mut self, flat: usize) {
        self.router_in_flight[flat] = self.router_in_flight[flat].saturating_sub(1);
        if let Some(index) = &self.candidates {
            index.freed(crate::config::BackendId::new(self.flat[flat].0), self.flat[flat].1);
        }
    }

    /// Request `r` has ended at `now` with `answer` output tokens: what it held is let go, its
    /// slot is free for the next one, and an agent session's next turn may be due.
    fn end_request(&mut self, r: usize, answer: u32, now: Micros) {
        self.arrivals.answered(&self.reqs[r].arrival, answer, now);
        let q = &mut self.reqs[r];
        q.finished = true;
        q.current = None;
        q.in_flight = None;
        q.walk = Walk::default();
        self.free.push(r);
    }

    /// Move on to the next target the walk admits, as `Dispatcher::dispatch` does.
    fn walk(&mut self, r: usize, now: Micros) {
        let (walk, mut guards) = self.walk_and_guards(r, now);
        let next = walk.next(&mut guards).now_or_never();
        match next.expect("the simulator's guards answer at once") {
            Err(Stop::RetryBudget) => self.fail(r, "retry_budget", now),
            Err(Stop::Exhausted | Stop::MaxAttempts) => self.fail(r, "exhausted", now),
            Ok(call) => {
                let delay = from_ms(call.backoff.draw(&mut self.rng).as_millis() as f64);
                self.attempts += 1;
                let attempt = self.attempts;
                let q = &mut self.reqs[r];
                q.attempt = attempt;
                q.current = Some(call.node);
                if delay > 0 {
                    self.q.push(now + delay, Ev::Begin { req: r, attempt });
                } else {
                    self.begin(r, attempt, now);
                }
            }
        }
    }

    /// Request `r`'s walk, and the router's guards as they stand at `now`.
    fn walk_and_guards(&mut self, r: usize, now: Micros) -> (&mut Walk, SimGuards<'_>) {
        let q = &mut self.reqs[r];
        let a = &q.arrival;
        let guards = SimGuards {
            at: self.clock.instant(now),
            minute: self.clock.unix_ms(now) / 60_000,
            estimate: u64::from(a.prompt_tokens) + u64::from(q.output),
            ceiling: a.priority.quota_ceiling(),
            snap: &self.snap,
            node_base: &self.node_base,
            router_in_flight: &self.router_in_flight,
            breakers: &mut self.breakers,
            breaker_cfg: &self.s.config.dispatch.breaker,
            budget: &mut self.budget,
            quota: &mut self.quota,
        };
        (&mut q.walk, guards)
    }

    /// Send the current attempt.
    pub(super) fn begin(&mut self, r: usize, attempt: u32, now: Micros) {
        if !self.pending(r, attempt) {
            return;
        }
        let flat = self.reqs[r].current.expect("pending");
        let b = self.flat[flat].0;
        self.router_in_flight[flat] += 1;
        self.reqs[r].in_flight = Some(self.counters[flat].start(self.reqs[r].arrival.priority));
        self.reqs[r].sent_at = now;
        if self.reqs[r].batch.is_none() {
            self.stats.attempts += 1;
        }
        let a = &self.reqs[r].arrival;
        let deadline = self.first_token_deadline(a.task);
        if a.client_error {
            return self.q.push(
                now + from_ms(30.0),
                Ev::Failed { req: r, attempt, class: ErrorClass::InvalidRequest, retry_after: None },
            );
        }
        let output = self.reqs[r].output;
        if self.nodes[flat].is_some() {
            // What the node likely holds of it, for it to learn from the answer, as dispatch does.
            let (b, n, _) = &self.flat[flat];
            let generation = self.snap.backends[*b].nodes[*n].signals.restarts;
            let keys = prefix_keys(a);
            let held = self.counters[flat].cached(&keys, a.prompt_tokens, generation);
            let predicted_cached = held.map_or(0, |h| h.tokens);
            let touch = Touch { keys, prompt_tokens: a.prompt_tokens, predicted_cached, generation };
            let progress = self.reqs[r].in_flight.as_ref().expect("just started").progress();
            progress.touch(touch);
            progress.describe(a.prompt_tokens - predicted_cached, output);
        }
        let a = &self.reqs[r].arrival;
        if let Some(node) = self.nodes[flat].as_mut() {
            if !node.alive {
                let connect = from_ms(self.s.config.dispatch.connect_timeout_ms as f64).min(deadline);
                return self.q.push(
                    now + connect,
                    Ev::Failed { req: r, attempt, class: ErrorClass::Connect, retry_after: None },
                );
            }
            self.q.push(now + deadline, Ev::Deadline { req: r, attempt });
            let job = Job {
                req: r,
                attempt,
                enqueued: now,
                prompt: a.prompt_tokens,
                output,
                project: a.project_id,
                prefix: a.prefix_tokens,
                keeps: a.session.map(|_| a.prompt_tokens + output),
                shared: a.session.filter(|t| t.shared).map(|t| (SHARED_KEYS + t.stream, t.preamble.1)),
            };
            let started = node.submit(job, now);
            return self.schedule(started);
        }
        let minute = self.clock.unix_ms(now) / 60_000;
        let call = Call { prompt: a.prompt_tokens, prefix: a.prefix_tokens, output, project: a.project_id };
        let provider = self.providers[b].as_mut().expect("a hosted backend has a provider model");
        match provider.call(call, now, minute, &mut self.rng) {
            Answer::Served { ttft, .. } if ttft > deadline => self.q.push(
                now + deadline,
                Ev::Failed { req: r, attempt, class: ErrorClass::Timeout, retry_after: None },
            ),
            Answer::Served { ttft, done, cached, written } => {
                self.q.push(now + ttft, Ev::FirstToken { req: r, attempt, cached, written });
                self.q.push(now + done, Ev::Done { req: r, attempt });
            }
            Answer::Failed { after, .. } if after > deadline => self.q.push(
                now + deadline,
                Ev::Failed { req: r, attempt, class: ErrorClass::Timeout, retry_after: None },
            ),
            Answer::Failed { class, after } => {
                // A rate-limited provider says when its window resets, as real ones do.
                let retry_after = (class == ErrorClass::RateLimited).then(|| {
                    let into_minute = self.clock.unix_ms(now + after) % 60_000;
                    from_ms((60_000 - into_minute) as f64)
                });
                self.q.push(now + after, Ev::Failed { req: r, attempt, class, retry_after })
            }
        }
    }

    /// Tell PID (for tracked backends) how an attempt went: served (`slow` when its first
    /// token came after the task's SLO) or failed.
    fn tracked_record(&mut self, backend: usize, failure: Option<ErrorClass>, slow: bool) {
        let name = &self.s.config.backends[backend].name;
        if self.availability.pid(name).is_none() {
            return;
        }
        match failure {
            None => self.availability.record_served(name, slow),
            Some(class) => self.availability.record_failure(name, class),
        }
    }

    /// `cache`: prompt tokens read from and written to the cache.
    pub(super) fn first_token(&mut self, r: usize, attempt: u32, cache: (u32, u32), now: Micros) {
        let (cached, cache_write) = cache;
        if !self.pending(r, attempt) {
            return;
        }
        let flat = self.reqs[r].current.expect("pending");
        let backend = self.flat[flat].0;
        if let Some(node) = self.nodes[flat].as_mut() {
            node.first_token(r, attempt, now);
        }
        let at = self.at(now);
        self.breakers[flat].on_success(at, &self.s.config.dispatch.breaker);
        let slo_ms = self.s.config.tasks[self.reqs[r].arrival.task].slo.ttft_ms as f64;
        let slow = (now - self.reqs[r].sent_at) as f64 / 1000.0 > slo_ms;
        self.tracked_record(backend, None, slow);
        let (at_us, task) = (self.reqs[r].arrival.at_us, self.reqs[r].arrival.task);
        let ttft = now - at_us;
        let within = ttft as f64 / 1000.0 <= self.s.config.tasks[task].slo.ttft_ms as f64;
        let bucket = self.bucket_of(at_us);
        let q = &mut self.reqs[r];
        q.committed = true;
        q.within_slo = within;
        q.cached = cached;
        if let Some(in_flight) = &q.in_flight {
            in_flight.progress().observe(&Event::TextDelta(String::new()));
        }
        if q.batch.is_some() {
            return;
        }
        let q = &self.reqs[r];
        let a = &q.arrival;
        let view = &self.snap.backends[backend];
        let served = ServedRequest {
            bucket,
            project: a.project_id,
            backend,
            backend_name: &view.name,
            local: view.is_local(),
            price: view.price.as_ref(),
            ttft,
            within_slo: within,
            prompt: a.prompt_tokens,
            cached,
            cache_write,
            output: q.output,
        };
        self.stats.served(served);
    }

    pub(super) fn done(&mut self, r: usize, attempt: u32, now: Micros) {
        let q = &mut self.reqs[r];
        if !(q.committed && !q.finished && q.attempt == attempt) {
            return;
        }
        let flat = q.current.expect("committed");
        if self.nodes[flat].as_ref().and_then(|n| n.done_at(r, attempt)).is_some_and(|end| end != now) {
            return; // Its end moved later.
        }
        let line = q.batch;
        let cost = line.filter(|_| self.nodes[flat].is_none()).map(|_| {
            let q = &self.reqs[r];
            self.realtime_cost(self.flat[flat].0, &q.arrival, q.output, 0)
        });
        let q = &self.reqs[r];
        if let Some(in_flight) = &q.in_flight {
            // The engine's usage, for the node to learn from as the request leaves it.
            let usage = Usage {
                input_tokens: q.arrival.prompt_tokens,
                cached_input_tokens: q.cached,
                output_tokens: q.output,
                cache_write_tokens: 0,
            };
            in_flight.progress().observe(&Event::Usage(usage));
        }
        self.end_request(r, self.reqs[r].output, now);
        self.left_node(flat);
        if let Some(node) = self.nodes[flat].as_mut() {
            let started = node.finish(r, attempt, now);
            self.schedule(started);
        }
        if let Some(line) = line {
            self.line_answered(line, cost, now);
        }
    }

    /// The attempt in flight ended in `class` before its first token: release what it held,
    /// tell PID, and let the walk feed the breaker and go on.
    pub(super) fn failed(
        &mut self,
        r: usize,
        attempt: u32,
        class: ErrorClass,
        retry_after: Option<Micros>,
        now: Micros,
    ) {
        if !self.pending(r, attempt) {
            return;
        }
        let flat = self.reqs[r].current.take().expect("pending");
        if let Some(node) = self.nodes[flat].as_mut() {
            let started = node.cancel(r, attempt, now);
            self.schedule(started);
        }
        self.reqs[r].in_flight = None;
        self.left_node(flat);
        self.tracked_record(self.flat[flat].0, Some(class), false);
        let retry_after = retry_after.map(std::time::Duration::from_micros);
        let (walk, mut guards) = self.walk_and_guards(r, now);
        match walk.failed(&mut guards, flat, class, retry_after) {
            AfterFailure::Reject => self.fail(r, "client", now),
            AfterFailure::FailOver => self.walk(r, now),
        }
    }

    /// No first token by the deadline: a node that is up was late (as dispatch judges it), any
    /// other backend timed out.
    pub(super) fn deadline(&mut self, r: usize, attempt: u32, now: Micros) {
        if !self.pending(r, attempt) {
            return;
        }
        let flat = self.reqs[r].current.expect("pending");
        let (b, n, _) = &self.flat[flat];
        let view = &self.snap.backends[*b];
        let up = view.is_local() && headroom::fresh(&view.nodes[*n].signals, &view.limits, self.at(now));
        if up {
            self.counters[flat].late(std::time::Duration::from_micros(now - self.reqs[r].sent_at));
        }
        self.failed(r, attempt, if up { ErrorClass::Late } else { ErrorClass::Timeout }, None, now);
    }

    /// A node went away holding these jobs: those before their first token fail over (the
    /// connection broke); those already streaming are client-visible errors.
    pub(super) fn node_lost(&mut self, mut lost: Vec<(usize, u32, bool)>, now: Micros) {
        // In arrival order, whichever slots the requests hold.
        lost.sort_by_key(|&(r, attempt, _)| (self.reqs[r].seq, attempt));
        for (r, attempt, _) in lost {
            let q = &self.reqs[r];
            if q.attempt != attempt || q.finished {
                continue;
            }
            if !q.committed {
                self.q
                    .push(now, Ev::Failed { req: r, attempt, class: ErrorClass::Connect, retry_after: None });
                continue;
            }
            let within = q.within_slo;
            let flat = q.current.expect("committed");
            self.left_node(flat);
            let at = self.at(now);
            self.breakers[flat].on_failure(at, &self.s.config.dispatch.breaker);
            self.tracked_record(self.flat[flat].0, Some(ErrorClass::StreamBroken), false);
            let bucket = self.bucket_of(self.reqs[r].arrival.at_us);
            let line = self.reqs[r].batch;
            self.end_request(r, 0, now);
            match line {
                Some(line) => self.line_broken(line, now),
                None => self.stats.broken_stream(bucket, within),
            }
        }
    }
}

/// What a node may hold of an arrival, as the router reads it off a request: the session (its
/// affinity key) and, for an agent session's turn, its preamble.
fn prefix_keys(a: &Arrival) -> PrefixKeys {
    PrefixKeys { session: Some(a.affinity), preamble: a.session.map(|t| t.preamble) }
}

/// Node cache keys of the session streams' shared preambles, apart from projects' numbers.
const SHARED_KEYS: usize = usize::MAX / 2;

/// The router's guards as the simulation keeps them, one entry per flat node index.
struct SimGuards<'a> {
    at: Instant,
    minute: u64,
    /// Prompt and output tokens of the request, charged to a quota.
    estimate: u64,
    ceiling: f64,
    snap: &'a Snapshot,
    node_base: &'a [usize],
    router_in_flight: &'a [u32],
    breakers: &'a mut [Breaker],
    breaker_cfg: &'a BreakerConfig,
    budget: &'a mut RetryBudget,
    quota: &'a mut [(Option<Limits>, MinuteWindow)],
}

impl Guards for SimGuards<'_> {
    /// The flat node index.
    type Node = usize;
    type Charge = ();

    fn take_node(&mut self, target: &Target) -> Result<usize, Skip> {
        let flat = self.node_base[target.backend.index()] + target.node;
        let limit = self.snap.backends[target.backend].max_inflight_per_node;
        if limit.is_some_and(|limit| self.router_in_flight[flat] >= limit) {
            return Err(Skip::NodeFull);
        }
        if !self.breakers[flat].try_acquire(self.at) {
            return Err(Skip::BreakerOpen);
        }
        Ok(flat)
    }

    fn withdraw_retry(&mut self) -> bool {
        self.budget.try_withdraw(self.at)
    }

    fn take_quota(&mut self, target: &Target) -> impl Future<Output = Result<(), Skip>> + Send {
        let granted = match &mut self.quota[target.backend.index()] {
            (Some(limits), window) => window.try_take(self.minute, limits, self.estimate, self.ceiling),
            (None, _) => true,
        };
        std::future::ready(if granted { Ok(()) } else { Err(Skip::OverQuota) })
    }

    fn release(&mut self, flat: usize) {
        self.breakers[flat].release();
    }

    fn failed(
        &mut self,
        flat: usize,
        counts_against_backend: bool,
        retry_after: Option<std::time::Duration>,
    ) {
        let breaker = &mut self.breakers[flat];
        if let Some(retry_after) = retry_after {
            breaker.hold(self.at, retry_after);
        }
        if counts_against_backend {
            breaker.on_failure(self.at, self.breaker_cfg);
        } else {
            breaker.release();
        }
    }

    fn skipped(&mut self, _: &Target, _: Skip) {}
}
