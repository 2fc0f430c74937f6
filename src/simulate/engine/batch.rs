//! Batch jobs on virtual time, run as the router's batch runner runs them. Every
//! `batch.poll_ms` each open job is routed by `deadline::plan` on the figures the runner reads
//! (its rate over the last 30 s, each pool's room from `admission::pool_rooms` and
//! `admission::room`, the nodes' service time), and its lines start as requests at batch
//! priority through the same planning and dispatch as every other request: on the fleet only
//! while the route is the fleet, wherever the plan goes in hosted realtime. A line turned away
//! waits for the next tick, as a 429 from the front door makes the runner hand it back.
//!
//! With batching `provider` the whole job goes to a provider's batch API when it is submitted,
//! as teams without the router send it. A provider's batch comes back after the provider's
//! `batch_turnaround`, priced at the batch price (`spill::batch_cost`).
//!
//! A line's sizes are drawn from its own seed, so both ways of running a job send the same lines.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rust_decimal::Decimal;

use super::{Engine, Ev};
use crate::batch::admission;
use crate::batch::deadline::{self, Progress, Route, RATE_WINDOW_S};
use crate::batch::spill;
use crate::config::{BackendId, Priority};
use crate::ledger::{hosted_cost, Tokens};
use crate::simulate::clock::{from_ms, from_secs, secs, Micros};
use crate::simulate::scenario::Batching;
use crate::simulate::workload::{draw, Arrival};

/// One line of one job on its way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Line {
    pub job: usize,
    pub index: u64,
    /// It runs on its task's fleet pool only (the route was the fleet when it started).
    pub fleet_only: bool,
}

/// A job's progress.
#[derive(Debug, Clone)]
pub(crate) struct JobRun {
    submitted: Micros,
    expires: Micros,
    /// The fleet pool its task runs on first (backend index), if any.
    pool: Option<usize>,
    /// The hosted backend whose batch API takes its lines, if the task's policy allows one.
    batch_api: Option<BackendId>,
    /// Lines never started, from `next` on, and lines handed back to start again.
    next: u64,
    returned: Vec<u64>,
    /// Lines in flight as requests, those on the fleet and those in hosted realtime.
    on_fleet: u64,
    in_realtime: u64,
    /// Lines at a provider's batch API: (when they come back, how many).
    at_provider: Vec<(Micros, u64)>,
    /// When its recent lines finished (the last `RATE_WINDOW_S`).
    recent: VecDeque<Micros>,
    ended: bool,
}

impl JobRun {
    fn queued(&self, total: u64) -> u64 {
        total - self.next + self.returned.len() as u64
    }

    fn open(&self, total: u64) -> u64 {
        self.queued(total) + self.on_fleet + self.in_realtime
    }

    /// The next line to start.
    fn take(&mut self, total: u64) -> Option<u64> {
        self.returned.pop().or_else(|| {
            (self.next < total).then(|| {
                self.next += 1;
                self.next - 1
            })
        })
    }
}

impl Engine<'_> {
    /// The jobs' state at the start of a run, and their submissions on the event queue.
    pub(super) fn batch_jobs(&mut self) -> Vec<JobRun> {
        let config = &self.s.config;
        self.s
            .batches
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let task = config.task(&b.task).expect("validated");
                let submitted = from_secs(b.at.0);
                self.q.push(submitted, Ev::BatchSubmit(i));
                JobRun {
                    submitted,
                    expires: submitted + from_secs(b.window.0),
                    pool: task.backends.iter().find_map(|name| {
                        let i = self.backend_index(name);
                        self.snap.backends[i].is_local().then_some(i)
                    }),
                    batch_api: spill::batch_backend(&self.snap, task, &b.endpoint),
                    next: 0,
                    returned: Vec::new(),
                    on_fleet: 0,
                    in_realtime: 0,
                    at_provider: Vec::new(),
                    recent: VecDeque::new(),
                    ended: false,
                }
            })
            .collect()
    }

    /// Line `index` of job `job` as a request arriving `now`.
    fn line_arrival(&self, job: usize, index: u64, now: Micros) -> Arrival {
        let b = &self.s.batches[job];
        let seed = self.s.seed ^ (job as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index.rotate_left(32);
        let mut rng = StdRng::seed_from_u64(seed);
        let prompt_tokens = draw(&b.prompt_tokens, &mut rng);
        let output_tokens = draw(&b.output_tokens, &mut rng);
        Arrival {
            at_us: now,
            task: self.s.config.tasks.iter().position(|t| t.name == b.task).expect("validated"),
            prompt_tokens,
            output_tokens,
            affinity: seed,
            project_id: usize::MAX,
            prefix_tokens: 0,
            priority: Priority::Batch,
            client_error: false,
            session: None,
        }
    }

    /// What `lines` of job `job` cost at its provider's batch API.
    fn batch_price(&self, job: usize, lines: impl Iterator<Item = u64>, now: Micros) -> Decimal {
        let price = self.jobs[job].batch_api.and_then(|b| self.snap.backends[b].price.as_ref());
        let Some(price) = price else { return Decimal::ZERO };
        lines
            .map(|i| {
                let a = self.line_arrival(job, i, now);
                let tokens = Tokens {
                    input: u64::from(a.prompt_tokens),
                    output: u64::from(a.output_tokens),
                    ..Tokens::default()
                };
                spill::batch_cost(price, &tokens)
            })
            .sum()
    }

    /// Job `job`'s queued lines go to its provider's batch API.
    fn send_to_provider(&mut self, job: usize, now: Micros) {
        let total = self.s.batches[job].lines;
        let mut lines = std::mem::take(&mut self.jobs[job].returned);
        lines.extend(self.jobs[job].next..total);
        self.jobs[job].next = total;
        let cost = self.batch_price(job, lines.iter().copied(), now);
        let b = self.jobs[job].batch_api.expect("routed to a batch API only with one");
        let turnaround = self.providers[b.index()].as_ref().expect("hosted").model().batch_turnaround;
        let back = now + from_secs(turnaround.0);
        let n = lines.len() as u64;
        self.jobs[job].at_provider.push((back, n));
        self.q.push(back, Ev::BatchBack { job, lines: n });
        self.batch_stats().cost += cost;
    }

    pub(super) fn batch_submit(&mut self, job: usize, now: Micros) {
        self.batch_stats().lines += self.s.batches[job].lines;
        if self.batching == Some(Batching::Provider) {
            self.send_to_provider(job, now);
        }
    }

    /// A provider's batch came back: its lines are answered, or expired past the job's window.
    pub(super) fn batch_back(&mut self, job: usize, lines: u64, now: Micros) {
        let j = &mut self.jobs[job];
        if let Some(i) = j.at_provider.iter().position(|&(at, n)| at == now && n == lines) {
            j.at_provider.swap_remove(i);
        }
        let late = now > j.expires;
        let stats = self.batch_stats();
        if late {
            stats.expired += lines;
        } else {
            stats.hosted_batch += lines;
        }
        self.settle_job(job, now);
    }

    /// The runner's poll: every open job routed and its lines started where there is room.
    pub(super) fn batch_tick(&mut self, now: Micros) {
        for job in 0..self.jobs.len() {
            let j = &self.jobs[job];
            if j.ended || now < j.submitted {
                continue;
            }
            let total = self.s.batches[job].lines;
            if now >= j.expires {
                let queued = j.queued(total);
                let j = &mut self.jobs[job];
                (j.next, j.returned) = (total, Vec::new());
                self.batch_stats().expired += queued;
                self.settle_job(job, now);
                continue;
            }
            if self.batching != Some(Batching::Fleet) || j.queued(total) == 0 {
                continue;
            }
            match self.batch_route(job, now) {
                Route::Fleet => {
                    let room = self.jobs[job].pool.map_or(0, |pool| self.pool_room(pool, now));
                    self.start_lines(job, room, true, now);
                }
                Route::HostedBatch => self.send_to_provider(job, now),
                Route::HostedRealtime => {
                    let room = admission::HOSTED_IN_FLIGHT.saturating_sub(self.jobs[job].in_realtime);
                    self.start_lines(job, room, false, now);
                }
            }
        }
        if self.jobs.iter().any(|j| !j.ended) {
            self.q.push(now + from_ms(self.s.config.batch.poll_ms as f64), Ev::BatchTick);
        }
    }

    /// The lines pool `pool` may start now, less the batch lines already on it.
    fn pool_room(&self, pool: usize, now: Micros) -> u64 {
        let cfg = &self.s.config.batch;
        let load = &self.load;
        let view = &self.snap.backends[pool];
        let rooms = admission::pool_rooms(view, self.clock.instant(now), &|n| load.view(&n.key));
        let running: u64 = self.jobs.iter().filter(|j| j.pool == Some(pool)).map(|j| j.on_fleet).sum();
        admission::room(&rooms, cfg.occupancy_bar, cfg.max_per_node, running)
    }

    /// Where job `job`'s queued lines go now, from the figures the runner reads.
    fn batch_route(&mut self, job: usize, now: Micros) -> Route {
        let total = self.s.batches[job].lines;
        let window_us = from_secs(RATE_WINDOW_S);
        let j = &mut self.jobs[job];
        while j.recent.front().is_some_and(|&t| t + window_us < now) {
            j.recent.pop_front();
        }
        let window_s = secs(now - j.submitted).clamp(1.0, RATE_WINDOW_S);
        let room = j.pool.map_or(0, |pool| self.pool_room(pool, now));
        let j = &self.jobs[job];
        let progress = Progress {
            remaining: j.open(total),
            observed_rate: j.recent.len() as f64 / window_s,
            concurrency: (j.on_fleet + room) as f64,
            line_s: admission::line_seconds(&self.snap),
            left_s: secs(j.expires - now),
        };
        let task = self.s.config.task(&self.s.batches[job].task).expect("validated");
        let realtime = spill::hosted_allowed(&self.snap, task);
        let lead_s = self.s.config.batch.hosted_batch_lead_secs as f64;
        deadline::plan(&progress, self.s.config.batch.spill && j.batch_api.is_some(), realtime, lead_s).route
    }

    /// Start up to `room` of job `job`'s queued lines as requests.
    fn start_lines(&mut self, job: usize, room: u64, fleet_only: bool, now: Micros) {
        let total = self.s.batches[job].lines;
        for _ in 0..room {
            let Some(index) = self.jobs[job].take(total) else { break };
            let j = &mut self.jobs[job];
            if fleet_only {
                j.on_fleet += 1;
            } else {
                j.in_realtime += 1;
            }
            let a = self.line_arrival(job, index, now);
            self.start(a, Some(Line { job, index, fleet_only }), now);
        }
    }

    fn line_ended(&mut self, line: Line) {
        let j = &mut self.jobs[line.job];
        if line.fleet_only {
            j.on_fleet -= 1;
        } else {
            j.in_realtime -= 1;
        }
    }

    /// A line's request was turned away before any answer: it waits for the next tick, or
    /// (`refused`: the backend refused the line itself) ends in an error.
    pub(super) fn line_turned_away(&mut self, line: Line, refused: bool, now: Micros) {
        self.line_ended(line);
        if refused {
            self.batch_stats().failed += 1;
            self.settle_job(line.job, now);
        } else {
            self.jobs[line.job].returned.push(line.index);
        }
    }

    /// A line's answer came back whole (`hosted`: from a hosted backend, priced at list price).
    pub(super) fn line_answered(&mut self, line: Line, cost: Option<Decimal>, now: Micros) {
        self.line_ended(line);
        self.jobs[line.job].recent.push_back(now);
        let stats = self.batch_stats();
        match cost {
            Some(cost) => {
                stats.realtime += 1;
                stats.cost += cost;
            }
            None => stats.fleet += 1,
        }
        self.settle_job(line.job, now);
    }

    /// A line's stream broke after its first token: it ends in an error, as the runner writes it.
    pub(super) fn line_broken(&mut self, line: Line, now: Micros) {
        self.line_ended(line);
        self.batch_stats().failed += 1;
        self.settle_job(line.job, now);
    }

    /// The hosted list price of a line's answer.
    pub(super) fn realtime_cost(&self, backend: usize, a: &Arrival, output: u32, cached: u32) -> Decimal {
        let tokens = Tokens {
            input: u64::from(a.prompt_tokens),
            cached_input: u64::from(cached),
            output: u64::from(output),
            ..Tokens::default()
        };
        self.snap.backends[backend].price.as_ref().map_or(Decimal::ZERO, |p| hosted_cost(p, &tokens))
    }

    /// The job ends once no line is queued, running or at a provider.
    fn settle_job(&mut self, job: usize, now: Micros) {
        let total = self.s.batches[job].lines;
        let j = &mut self.jobs[job];
        if j.ended || j.open(total) > 0 || !j.at_provider.is_empty() {
            return;
        }
        j.ended = true;
        let took = secs(now - j.submitted);
        self.batch_stats().completion_s[job] = Some(took);
    }

    fn batch_stats(&mut self) -> &mut crate::simulate::stats::BatchStats {
        self.stats.batch.as_mut().expect("batch lines only in runs with batching")
    }
}
