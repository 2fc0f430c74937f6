//! A modelled vLLM node: `max_num_seqs` sequence slots, a FIFO queue in front of them, prefill
//! at a fixed speed for the prompt tokens its prefix cache does not hold, and engine steps that
//! slow down as the batch grows. It keeps the cumulative counters and histograms vLLM exports,
//! so the simulated router reads it through the real telemetry code (`NodeTelemetry`), lag
//! and smoothing included.
//!
//! The arithmetic is deliberately coarse: a sequence's step time is fixed when it enters a slot
//! (from the batch size then), prompts are prefilled one after another (prefill is
//! compute-bound: two prompts at once take as long as one after the other) without slowing the
//! running sequences' steps, and KV use is the running sequences' full length. It must not know about the router: it sees jobs, not plans.

use std::collections::{HashMap, HashSet, VecDeque};

use super::clock::{from_ms, from_secs, secs, Micros};
use super::scenario::NodeModel;
use crate::fleet::metrics::{CacheConfig, HistogramSample, NodeSample};

/// One request sent to the node by one dispatch attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub req: usize,
    pub attempt: u32,
    pub enqueued: Micros,
    pub prompt: u32,
    pub output: u32,
    pub project: usize,
    /// Tokens of its prompt a node that served the project lately holds: the project's stable
    /// prefix, or an agent session's history.
    pub prefix: u32,
    /// What the node holds of the project once it has served this job: an agent session's
    /// prompt and answer, the next turn's history, of which a turn finds at most what is held.
    /// `None`: the stable prefix, all of which a warm node holds.
    pub keeps: Option<u32>,
    /// A preamble other projects send too (its cache key, apart from projects', and tokens):
    /// warm wherever any of them ran lately.
    pub shared: Option<(usize, u32)>,
}

/// A job entered a slot: when its first token and its end will come.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Started {
    pub req: usize,
    pub attempt: u32,
    pub first_token: Micros,
    pub done: Micros,
    /// Prompt tokens served from the prefix cache.
    pub cached: u32,
    /// A job already streaming whose end moved later (another prompt's prefill stalled its
    /// decode): only its new end is to be scheduled.
    pub moved: bool,
}

#[derive(Debug, Clone)]
struct Running {
    job: Job,
    started: Started,
    begun: Micros,
}

#[derive(Debug, Clone, Copy, Default)]
struct Hist {
    sum: f64,
    count: f64,
}

impl Hist {
    fn observe(&mut self, v: f64, n: f64) {
        self.sum += v * n;
        self.count += n;
    }
    fn sample(self) -> Option<HistogramSample> {
        Some(HistogramSample { buckets: Vec::new(), sum: Some(self.sum), count: Some(self.count) })
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    ttft: Hist,
    queue: Hist,
    prefill: Hist,
    e2e: Hist,
    itl: Hist,
    prompt_tokens: f64,
    generation_tokens: f64,
    cache_queries: f64,
    cache_hits: f64,
    success: f64,
}

/// Block size reported in `cache_config_info`.
const BLOCK: u64 = 16;

#[derive(Debug, Clone)]
pub struct Node {
    pub alive: bool,
    model: NodeModel,
    slots: usize,
    /// Jobs waiting for a slot, in arrival order, and some the router cancelled while they
    /// waited: those are skipped when they reach the front (a cancel does not scan the queue).
    queue: VecDeque<Job>,
    /// The jobs in `queue` still waiting, by (request, attempt).
    waiting: HashSet<(usize, u32)>,
    running: Vec<Running>,
    /// Project (or shared preamble) → what this node's cache holds of it.
    prefix: HashMap<usize, Held>,
    /// Tokens of the prefixes in `prefix`.
    prefix_tokens: u64,
    /// When the prefills it has started are done.
    prefill_until: Micros,
    counters: Counters,
    /// The gauges as they changed, (when, gauges), oldest first: those a scrape may still read
    /// through the model's `gauge_lag`, and the one before them.
    gauges: VecDeque<(Micros, Gauges)>,
    /// Slot-microseconds its slots have been busy up to `busy_since`, and how many were then.
    busy_us: u128,
    busy_since: Micros,
    busy_now: usize,
}

/// A prefix in a node's cache.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Held {
    /// When it was last used (its last prefill's end).
    used: Micros,
    /// Since when it has been ready to be read (a prefill's end).
    ready: Micros,
    tokens: u32,
}

/// What the node's gauges say: running and waiting requests, KV use.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Gauges {
    running: f64,
    waiting: f64,
    kv_usage: f64,
}

impl Node {
    pub fn new(model: &NodeModel, pool_max_running: u32) -> Node {
        let slots = if model.max_num_seqs == 0 { pool_max_running } else { model.max_num_seqs };
        Node {
            alive: true,
            model: model.clone(),
            slots: slots.max(1) as usize,
            queue: VecDeque::new(),
            waiting: HashSet::new(),
            running: Vec::new(),
            prefix: HashMap::new(),
            prefix_tokens: 0,
            prefill_until: 0,
            counters: Counters::default(),
            gauges: VecDeque::from([(0, Gauges::default())]),
            busy_us: 0,
            busy_since: 0,
            busy_now: 0,
        }
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slot-seconds its slots were busy from the start of the run to `now` (at or after its
    /// last change).
    pub fn busy_slot_secs(&self, now: Micros) -> f64 {
        let open = self.busy_now as u128 * u128::from(now.saturating_sub(self.busy_since));
        (self.busy_us + open) as f64 / 1e6
    }

    /// The gauges now.
    fn gauges_now(&self) -> Gauges {
        let kv: u64 = self.running.iter().map(|r| u64::from(r.job.prompt + r.job.output)).sum();
        Gauges {
            running: self.running.len() as f64,
            waiting: self.waiting.len() as f64,
            kv_usage: (kv as f64 / self.model.kv_tokens.max(BLOCK) as f64).min(1.0),
        }
    }

    /// Note the gauges after a change at `now`, forgetting what no scrape can read any more.
    fn note(&mut self, now: Micros) {
        self.busy_us += self.busy_now as u128 * u128::from(now.saturating_sub(self.busy_since));
        (self.busy_since, self.busy_now) = (now, self.running.len());
        let gauges = self.gauges_now();
        if self.gauges.back().is_some_and(|(_, last)| *last == gauges) {
            return;
        }
        self.gauges.push_back((now, gauges));
        let horizon = now.saturating_sub(from_secs(self.model.gauge_lag.0));
        while self.gauges.get(1).is_some_and(|(at, _)| *at <= horizon) {
            self.gauges.pop_front();
        }
    }

    /// The gauges a scrape at `now` reads: as they were `gauge_lag` before.
    fn gauges_read(&self, now: Micros) -> Gauges {
        // Before the run began, the node was idle.
        let Some(then) = now.checked_sub(from_secs(self.model.gauge_lag.0)) else { return Gauges::default() };
        let at = self.gauges.partition_point(|(at, _)| *at <= then);
        self.gauges.get(at.saturating_sub(1)).map_or_else(Gauges::default, |(_, g)| *g)
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Queue a job; returns the jobs that entered a slot (this one, if a slot was free).
    pub(crate) fn submit(&mut self, job: Job, now: Micros) -> Vec<Started> {
        self.waiting.insert((job.req, job.attempt));
        self.queue.push_back(job);
        self.fill(now)
    }

    /// Move waiting jobs into free slots; returns those that entered one.
    fn fill(&mut self, now: Micros) -> Vec<Started> {
        let started = self.enter(now);
        self.note(now);
        started
    }

    fn enter(&mut self, now: Micros) -> Vec<Started> {
        let mut started = Vec::new();
        while self.running.len() < self.slots {
            let Some(job) = self.queue.pop_front() else { break };
            if !self.waiting.remove(&(job.req, job.attempt)) {
                continue;
            }
            let batch = self.running.len() + 1;
            let step_ms = self.model.step_ms + self.model.step_per_seq_ms * batch as f64;
            // A prefix is warm once its prefill is done, and for the cache's window after.
            let fresh = |key: &usize| {
                let window = from_secs(self.model.prefix_cache.0);
                let warm = |h: &&Held| h.ready <= now && now.saturating_sub(h.used) <= window;
                self.prefix.get(key).filter(warm).map(|h| h.tokens)
            };
            let own = fresh(&job.project).map_or(0, |held| match job.keeps {
                Some(_) => held.min(job.prefix),
                None => job.prefix,
            });
            let shared = job.shared.filter(|(key, _)| fresh(key).is_some()).map_or(0, |(_, tokens)| tokens);
            let cached = own.max(shared).min(job.prompt);
            // Prefill is compute-bound: prompts entering together are prefilled one after another.
            let prefill_s = self.model.prefill_setup_ms / 1000.0
                + f64::from(job.prompt - cached) / self.model.prefill_tps;
            let begin = now.max(self.prefill_until);
            self.prefill_until = begin + from_secs(prefill_s);
            let prefilled = self.prefill_until;
            if self.model.decode_waits_for_prefill {
                // One engine loop runs both: the sequences decoding stand still meanwhile.
                for r in self.running.iter_mut().filter(|r| r.started.done > begin) {
                    r.started.done += prefilled - begin;
                    started.push(Started { moved: true, ..r.started });
                }
            }
            self.remember(job.project, job.keeps.unwrap_or(job.prefix.min(job.prompt)), now, prefilled);
            if let Some((key, tokens)) = job.shared {
                self.remember(key, tokens, now, prefilled);
            }
            let first_token = prefilled + from_ms(step_ms);
            let done = first_token + from_ms(step_ms * f64::from(job.output.saturating_sub(1)));
            let s = Started { req: job.req, attempt: job.attempt, first_token, done, cached, moved: false };
            self.counters.queue.observe(secs(now - job.enqueued), 1.0);
            self.counters.cache_queries += f64::from(job.prompt);
            self.counters.cache_hits += f64::from(cached);
            self.running.push(Running { job, started: s, begun: now });
            started.push(s);
        }
        started
    }

    /// The project's prefix of `tokens` is now cached; past the cache's capacity the least
    /// recently used prefixes go.
    fn remember(&mut self, project: usize, tokens: u32, now: Micros, prefilled: Micros) {
        // What was ready stays ready while it is prefilled again.
        let ready = self.prefix.get(&project).filter(|h| h.ready <= now).map_or(prefilled, |h| h.ready);
        if let Some(old) = self.prefix.insert(project, Held { used: prefilled, ready, tokens }) {
            self.prefix_tokens -= u64::from(old.tokens);
        }
        self.prefix_tokens += u64::from(tokens);
        let capacity = self.model.prefix_cache_tokens;
        while capacity > 0 && self.prefix_tokens > capacity {
            // Ties go by project, so runs stay the same whatever the map's order.
            let others = self.prefix.iter().filter(|(&p, _)| p != project);
            let oldest = others.min_by_key(|(&p, h)| (h.used, p));
            let Some((&gone, held)) = oldest else { break };
            self.prefix_tokens -= u64::from(held.tokens);
            self.prefix.remove(&gone);
        }
    }

    fn position(&self, req: usize, attempt: u32) -> Option<usize> {
        self.running.iter().position(|r| r.job.req == req && r.job.attempt == attempt)
    }

    /// When the job in a slot ends as things stand (a later prefill may move it).
    pub(crate) fn done_at(&self, req: usize, attempt: u32) -> Option<Micros> {
        self.position(req, attempt).map(|i| self.running[i].started.done)
    }

    /// The job's first token came out.
    pub(crate) fn first_token(&mut self, req: usize, attempt: u32, now: Micros) {
        if let Some(r) = self.position(req, attempt).map(|i| &self.running[i]) {
            let (ttft, prefill) = (secs(now - r.job.enqueued), secs(now - r.begun));
            self.counters.ttft.observe(ttft, 1.0);
            self.counters.prefill.observe(prefill, 1.0);
        }
    }

    /// The job finished; returns the jobs that took its slot.
    pub fn finish(&mut self, req: usize, attempt: u32, now: Micros) -> Vec<Started> {
        if let Some(i) = self.position(req, attempt) {
            let r = self.running.swap_remove(i);
            let c = &mut self.counters;
            c.e2e.observe(secs(now - r.job.enqueued), 1.0);
            let tokens = f64::from(r.job.output.saturating_sub(1));
            if tokens > 0.0 {
                c.itl.observe(secs(r.started.done - r.started.first_token) / tokens, tokens);
            }
            c.prompt_tokens += f64::from(r.job.prompt);
            c.generation_tokens += f64::from(r.job.output);
            c.success += 1.0;
        }
        self.fill(now)
    }

    /// The router gave up on the job (first-token deadline): it leaves the queue or its slot.
    pub(crate) fn cancel(&mut self, req: usize, attempt: u32, now: Micros) -> Vec<Started> {
        if !self.waiting.remove(&(req, attempt)) {
            if let Some(i) = self.position(req, attempt) {
                self.running.swap_remove(i);
            }
        }
        self.fill(now)
    }

    /// The node is gone: every job it held, with whether its first token had come out. Its
    /// counters and prefix cache are lost (it comes back as a fresh process).
    pub fn fail(&mut self, now: Micros) -> Vec<(usize, u32, bool)> {
        self.alive = false;
        let mut lost: Vec<(usize, u32, bool)> = self
            .running
            .drain(..)
            .map(|r| (r.job.req, r.job.attempt, r.started.first_token <= now))
            .collect();
        let waiting = std::mem::take(&mut self.waiting);
        lost.extend(
            self.queue
                .drain(..)
                .filter(|j| waiting.contains(&(j.req, j.attempt)))
                .map(|j| (j.req, j.attempt, false)),
        );
        lost.sort_unstable();
        self.prefix.clear();
        self.prefix_tokens = 0;
        self.counters = Counters::default();
        self.note(now);
        lost
    }

    pub(crate) fn recover(&mut self) {
        self.alive = true;
    }

    /// What `/metrics` would say at `now`: the counters as they are, the gauges as they were
    /// `gauge_lag` before.
    pub fn sample(&self, now: Micros) -> NodeSample {
        let c = &self.counters;
        let kv_tokens = self.model.kv_tokens.max(BLOCK);
        let gauges = self.gauges_read(now);
        NodeSample {
            running: Some(gauges.running),
            waiting: Some(gauges.waiting),
            kv_cache_usage: Some(gauges.kv_usage),
            cache: Some(CacheConfig {
                num_gpu_blocks: Some(kv_tokens / BLOCK),
                block_size: Some(BLOCK),
                cache_dtype: None,
            }),
            ttft: c.ttft.sample(),
            itl: c.itl.sample(),
            e2e: c.e2e.sample(),
            queue_time: c.queue.sample(),
            prefill_time: c.prefill.sample(),
            prompt_tokens: Some(c.prompt_tokens),
            generation_tokens: Some(c.generation_tokens),
            prefix_cache_queries: Some(c.cache_queries),
            prefix_cache_hits: Some(c.cache_hits),
            request_success: Some(c.success),
            ..NodeSample::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(req: usize, project: usize) -> Job {
        Job {
            req,
            attempt: 1,
            enqueued: 0,
            prompt: 1000,
            output: 11,
            project,
            prefix: 500,
            keeps: None,
            shared: None,
        }
    }

    #[test]
    fn slots_queue_and_prefix_cache() {
        let model = NodeModel {
            max_num_seqs: 1,
            prefill_tps: 1000.0,
            step_ms: 10.0,
            step_per_seq_ms: 0.0,
            ..NodeModel::default()
        };
        let mut n = Node::new(&model, 256);
        let s = n.submit(job(0, 7), 0);
        // 1000 tokens at 1000 tok/s + one 10 ms step; then 10 more steps.
        assert_eq!(
            s,
            vec![Started {
                req: 0,
                attempt: 1,
                first_token: 1_010_000,
                done: 1_110_000,
                cached: 0,
                moved: false
            }]
        );
        assert!(n.submit(job(1, 7), 0).is_empty(), "the only slot is busy");
        assert_eq!(n.waiting(), 1);
        let next = n.finish(0, 1, 1_110_000);
        // Same project within the cache window: half the prompt is cached.
        assert_eq!(next[0].cached, 500);
        assert_eq!(next[0].first_token, 1_110_000 + 510_000);
        assert!((n.busy_slot_secs(1_200_000) - 1.2).abs() < 1e-9, "its one slot busy all along");
        assert_eq!(n.fail(1_200_000), vec![(1, 1, false)]);
        assert!((n.busy_slot_secs(5_000_000) - 1.2).abs() < 1e-9, "a dead node's slots are not busy");
    }

    #[test]
    fn a_prefix_cache_of_bounded_tokens_keeps_the_most_recently_used_prefixes() {
        // Room for two 500-token prefixes.
        let model = NodeModel { max_num_seqs: 1, prefix_cache_tokens: 1000, ..NodeModel::default() };
        let mut n = Node::new(&model, 256);
        let mut at = 0;
        let mut run = |n: &mut Node, req: usize, project: usize| {
            let started = n.submit(job(req, project), at);
            at = started[0].done;
            n.finish(req, 1, at);
            started[0].cached
        };
        assert_eq!(run(&mut n, 0, 1), 0);
        assert_eq!(run(&mut n, 1, 2), 0);
        assert_eq!(run(&mut n, 2, 1), 500, "both fit");
        // A third project pushes out the least recently used: project 2.
        assert_eq!(run(&mut n, 3, 3), 0);
        assert_eq!(run(&mut n, 4, 1), 500);
        assert_eq!(run(&mut n, 5, 2), 0, "evicted");
        // Unbounded (0), only the time window decides.
        let mut open = Node::new(&NodeModel { max_num_seqs: 1, ..NodeModel::default() }, 256);
        for (req, project) in [(0, 1), (1, 2), (2, 3)] {
            run(&mut open, req, project);
        }
        assert_eq!(run(&mut open, 3, 1), 500);
    }

    #[test]
    fn prompts_are_prefilled_one_after_another_and_a_llamacpp_node_stalls_its_decode_meanwhile() {
        // Two slots, 1000 tokens/s plus 50 ms a prompt, 10 ms a step whatever the batch.
        let model = NodeModel {
            max_num_seqs: 2,
            prefill_tps: 1000.0,
            prefill_setup_ms: 50.0,
            step_ms: 10.0,
            step_per_seq_ms: 0.0,
            ..NodeModel::default()
        };
        let mut n = Node::new(&model, 256);
        let first = n.submit(job(0, 1), 0)[0];
        assert_eq!(first.first_token, 1_060_000, "50 ms + 1000 tokens + a step");
        // A prompt entering meanwhile waits for the first one's prefill.
        let second = n.submit(job(1, 2), 500_000)[0];
        assert_eq!(second.first_token, 1_050_000 + 1_050_000 + 10_000);
        assert_eq!(first.done, 1_160_000, "vLLM's chunked prefill: the decode goes on");

        let stalls = NodeModel { decode_waits_for_prefill: true, ..model };
        let mut n = Node::new(&stalls, 256);
        let first = n.submit(job(0, 1), 0)[0];
        // Its decode (1.06 s to 1.16 s) stands still while the next prompt is prefilled.
        let entered = n.submit(job(1, 2), 1_100_000);
        assert_eq!(entered.len(), 2);
        let moved = entered.iter().find(|s| s.moved).expect("the first job's end moved");
        assert_eq!((moved.req, moved.first_token), (0, first.first_token));
        assert_eq!(moved.done, first.done + 1_050_000);
        assert_eq!(n.done_at(0, 1), Some(moved.done));
    }

    #[test]
    fn a_session_finds_its_history_and_any_session_the_shared_preamble_once_prefilled() {
        let model = NodeModel { max_num_seqs: 2, prefill_tps: 1000.0, ..NodeModel::default() };
        let mut n = Node::new(&model, 256);
        let turn = |req, project, prompt, prefix| Job {
            prompt,
            prefix,
            keeps: Some(prompt + 11),
            shared: Some((usize::MAX / 2, 300)),
            ..job(req, project)
        };
        let first = n.submit(turn(0, 1, 400, 0), 0)[0];
        assert_eq!(first.cached, 0);
        // Another session entering before that prefill ends finds nothing yet.
        assert_eq!(n.submit(turn(1, 2, 400, 0), 100_000)[0].cached, 0);
        n.finish(0, 1, first.done);
        n.finish(1, 1, 2_000_000);
        // A third session finds the shared preamble; the first session's next turn its history
        // (its last prompt and answer), not more.
        assert_eq!(n.submit(turn(2, 3, 400, 0), 3_000_000)[0].cached, 300);
        assert_eq!(n.submit(turn(3, 1, 460, 411), 3_000_000)[0].cached, 411);
    }

    #[test]
    fn the_gauges_trail_the_node_by_its_gauge_lag_and_the_counters_do_not() {
        let model = NodeModel {
            max_num_seqs: 1,
            prefill_tps: 1000.0,
            step_ms: 10.0,
            gauge_lag: crate::simulate::scenario::Secs(1.0),
            ..NodeModel::default()
        };
        let mut n = Node::new(&model, 256);
        n.submit(job(0, 1), 0);
        n.submit(job(1, 1), 0);
        let read = |n: &Node, at: Micros| (n.sample(at).running, n.sample(at).waiting);
        assert_eq!(read(&n, 999_999), (Some(0.0), Some(0.0)), "not yet in the gauges");
        assert_eq!(read(&n, 1_000_000), (Some(1.0), Some(1.0)));
        n.finish(0, 1, 1_110_000);
        assert_eq!(n.sample(1_200_000).request_success, Some(1.0), "the counters at once");
        assert_eq!(read(&n, 2_109_999), (Some(1.0), Some(1.0)));
        assert_eq!(read(&n, 2_110_000), (Some(1.0), Some(0.0)), "the second took the slot");
        n.finish(1, 1, 2_000_000);
        assert_eq!(read(&n, 3_000_000), (Some(0.0), Some(0.0)));
        // Without a lag, the gauges are the node's now.
        let mut now = Node::new(&NodeModel { max_num_seqs: 1, ..NodeModel::default() }, 256);
        now.submit(job(0, 1), 5);
        assert_eq!(read(&now, 5), (Some(1.0), Some(0.0)));
    }

    #[test]
    fn a_cancelled_job_leaves_the_queue_or_its_slot() {
        let model = NodeModel { max_num_seqs: 1, prefill_tps: 1000.0, step_ms: 10.0, ..NodeModel::default() };
        let mut n = Node::new(&model, 256);
        n.submit(job(0, 1), 0);
        for req in 1..4 {
            assert!(n.submit(job(req, 1), 0).is_empty());
        }
        assert_eq!(n.waiting(), 3);
        // Cancelled while waiting: no longer counted, and skipped when the slot frees.
        assert!(n.cancel(1, 1, 5).is_empty());
        assert_eq!(n.waiting(), 2);
        assert_eq!(n.sample(5).waiting, Some(2.0));
        let next = n.finish(0, 1, 1_110_000);
        assert_eq!(next.iter().map(|s| s.req).collect::<Vec<_>>(), [2]);
        // Cancelled in its slot: the next waiting job takes it.
        let next = n.cancel(2, 1, 1_200_000);
        assert_eq!(next.iter().map(|s| s.req).collect::<Vec<_>>(), [3]);
        assert_eq!(n.waiting(), 0);
        // A job that already ended changes nothing; a lost node reports only live jobs.
        assert!(n.cancel(0, 1, 1_300_000).is_empty());
        n.submit(job(4, 1), 1_300_000);
        n.cancel(4, 1, 1_300_001);
        assert_eq!(n.fail(1_400_000), vec![(3, 1, false)]);
    }
}
