//! The workload: every request of a run, drawn lazily in time order from the scenario's
//! streams so that every strategy sees exactly the same arrivals (same seed, same requests,
//! same projects) and a run holds only the next one.
//!
//! Arrivals are a Poisson process whose rate follows a piecewise-linear profile (drawn by
//! thinning), prompt and output sizes are log-normal with the configured mean and spread, and
//! projects (affinity keys) are drawn with Zipf-like popularity. It must not look at any
//! strategy or model state: the workload is open-loop, as most real clients are. Agent
//! sessions, whose next turn waits for the last answer, are the closed-loop part
//! (`workload/sessions.rs`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::scenario::{Dist, Rate, Scenario};

mod sessions;
use crate::config::Priority;
pub use sessions::{Sessions, Turn};

/// One client request.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// Microseconds since the start of the run.
    pub at_us: u64,
    /// Index into `config.tasks`.
    pub task: usize,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// Hash of the project's name (`<task>/p<rank>`): the affinity key.
    pub affinity: u64,
    /// Index of the project across all streams (for per-project bookkeeping).
    pub project_id: usize,
    /// Tokens of the prompt that are the project's stable prefix.
    pub prefix_tokens: u32,
    pub priority: Priority,
    /// The request is malformed: the first backend refuses it with a 400.
    pub client_error: bool,
    /// The turn of an agent session it is (`sessions:`); `None` for an open-loop stream's.
    pub session: Option<Turn>,
}

/// Rate (requests per second) at `t` seconds.
pub(crate) fn rate_at(rate: &Rate, t: f64) -> f64 {
    match rate {
        Rate::Constant(r) => *r,
        Rate::Points(points) => {
            let Some(first) = points.first() else { return 0.0 };
            if t <= first.0 .0 {
                return first.1;
            }
            for w in points.windows(2) {
                let ((t0, r0), (t1, r1)) = ((w[0].0 .0, w[0].1), (w[1].0 .0, w[1].1));
                if t <= t1 {
                    return if t1 > t0 { r0 + (r1 - r0) * (t - t0) / (t1 - t0) } else { r1 };
                }
            }
            points.last().map_or(0.0, |p| p.1)
        }
    }
}

fn max_rate(rate: &Rate) -> f64 {
    match rate {
        Rate::Constant(r) => *r,
        Rate::Points(points) => points.iter().map(|p| p.1).fold(0.0, f64::max),
    }
}

/// A standard normal draw (Box–Muller).
pub fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A log-normal draw with the given mean and standard deviation, clamped to `[min, max]`.
pub(crate) fn draw(dist: &Dist, rng: &mut StdRng) -> u32 {
    let v = if dist.sd <= 0.0 {
        dist.mean
    } else {
        let s2 = (1.0 + (dist.sd / dist.mean).powi(2)).ln();
        let mu = dist.mean.ln() - s2 / 2.0;
        (mu + s2.sqrt() * normal(rng)).exp()
    };
    v.clamp(dist.min, dist.max).round() as u32
}

/// One stream's arrivals, in time order, drawn as they are asked for.
struct Stream {
    rng: StdRng,
    task: usize,
    priority: Priority,
    /// Cumulative Zipf weights: project k (0-based) has weight 1 / (k + 1)^zipf.
    cumulative: Vec<f64>,
    total: f64,
    /// Hash of each project's name (`<task>/p<rank>`), the affinity key.
    affinity: Vec<u64>,
    peak: f64,
    rps: Rate,
    prompt: Dist,
    output: Dist,
    prefix_share: f64,
    client_error_rate: f64,
    project_base: usize,
    t: f64,
    end: f64,
}

impl Stream {
    fn next(&mut self) -> Option<Arrival> {
        if self.peak <= 0.0 {
            return None;
        }
        loop {
            let rng = &mut self.rng;
            self.t += -(1.0 - rng.gen::<f64>()).ln() / self.peak;
            if self.t >= self.end {
                self.peak = 0.0;
                return None;
            }
            if rng.gen::<f64>() * self.peak > rate_at(&self.rps, self.t) {
                continue;
            }
            let u = rng.gen::<f64>() * self.total;
            let k = self.cumulative.partition_point(|c| *c < u).min(self.cumulative.len() - 1);
            let prompt = draw(&self.prompt, rng);
            let output = draw(&self.output, rng);
            return Some(Arrival {
                at_us: (self.t * 1e6) as u64,
                task: self.task,
                prompt_tokens: prompt,
                output_tokens: output,
                affinity: self.affinity[k],
                project_id: self.project_base + k,
                prefix_tokens: (f64::from(prompt) * self.prefix_share).round() as u32,
                priority: self.priority,
                client_error: rng.gen::<f64>() < self.client_error_rate,
                session: None,
            });
        }
    }
}

/// Every request of the scenario in arrival order, drawn lazily: each stream draws from its
/// own seeded generator, and the streams are merged by time (ties: the earlier stream first),
/// so a run holds one pending arrival per stream however long it is. Agent sessions' turns
/// (`sessions`) come after the open-loop streams' at the same instant.
pub struct Arrivals {
    streams: Vec<Stream>,
    heads: Vec<Option<Arrival>>,
    sessions: Sessions,
}

impl Arrivals {
    pub fn new(s: &Scenario) -> Arrivals {
        let end = s.duration.as_secs_f64();
        let mut project_base = 0usize;
        let mut streams = Vec::new();
        for (i, stream) in s.workload.iter().enumerate() {
            let rng = StdRng::seed_from_u64(s.seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)));
            let task = s.config.tasks.iter().position(|t| t.name == stream.task).expect("validated");
            let mut cumulative = Vec::with_capacity(stream.projects as usize);
            let mut total = 0.0;
            for k in 0..stream.projects {
                total += 1.0 / f64::from(k + 1).powf(stream.zipf);
                cumulative.push(total);
            }
            let affinity = (0..stream.projects)
                .map(|k| xxhash_rust::xxh3::xxh3_64(format!("{}/p{k}", stream.task).as_bytes()))
                .collect();
            streams.push(Stream {
                rng,
                task,
                priority: stream.priority.unwrap_or(s.config.tasks[task].priority),
                cumulative,
                total,
                affinity,
                peak: max_rate(&stream.rps),
                rps: stream.rps.clone(),
                prompt: stream.prompt_tokens,
                output: stream.output_tokens,
                prefix_share: stream.prefix_share,
                client_error_rate: stream.client_error_rate,
                project_base,
                t: 0.0,
                end,
            });
            project_base += stream.projects as usize;
        }
        let heads = streams.iter_mut().map(Stream::next).collect();
        Arrivals { streams, heads, sessions: Sessions::new(s, project_base) }
    }

    /// Every project's affinity key, across the streams and the sessions.
    pub(crate) fn affinity_keys(&self) -> impl Iterator<Item = u64> + '_ {
        let open = self.streams.iter().flat_map(|s| s.affinity.iter().copied());
        open.chain(self.sessions.affinity_keys())
    }

    /// When the next arrival comes, without drawing it.
    pub(crate) fn peek_at(&self) -> Option<u64> {
        let open = self.heads.iter().flatten().map(|a| a.at_us).min();
        open.into_iter().chain(self.sessions.peek_at()).min()
    }

    /// Request `a` ended at `now` with `output` tokens of answer: a session's next turn may be
    /// due (`Sessions::answered`).
    pub(crate) fn answered(&mut self, a: &Arrival, output: u32, now: u64) {
        self.sessions.answered(a, output, now);
    }
}

impl Iterator for Arrivals {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        let open = self
            .heads
            .iter()
            .enumerate()
            .filter_map(|(i, h)| Some((i, h.as_ref()?.at_us)))
            .min_by_key(|&(i, at)| (at, i));
        let (i, _) = match (open, self.sessions.peek_at()) {
            (Some((_, at)), Some(turn)) if turn < at => return self.sessions.next(),
            (None, _) => return self.sessions.next(),
            (Some(open), _) => open,
        };
        let next = self.streams[i].next();
        std::mem::replace(&mut self.heads[i], next)
    }
}

/// Every request of the scenario, in arrival order, at once (tests and small tools).
pub fn generate(s: &Scenario) -> Vec<Arrival> {
    Arrivals::new(s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arrivals as they were drawn before they were drawn lazily: every stream up front,
    /// then a stable sort by time.
    fn up_front(s: &Scenario) -> Vec<Arrival> {
        let mut all = Vec::new();
        for i in 0..s.workload.len() {
            let mut fresh = Arrivals::new(s);
            let mut stream = fresh.streams.swap_remove(i);
            all.extend(fresh.heads.swap_remove(i));
            all.extend(std::iter::from_fn(|| stream.next()));
        }
        all.sort_by_key(|a| a.at_us);
        all
    }

    #[test]
    fn lazy_merge_is_the_stable_sort_of_every_stream() {
        let text = r#"
duration: 2m
seed: 5
strategies: [priority]
router:
  backends:
    - {name: local, kind: vllm, endpoints: [http://10.0.0.1:8000], model: m}
  tasks:
    - {name: chat, backends: [local], slo: {ttft_ms: 1000}}
    - {name: batch, backends: [local], slo: {ttft_ms: 5000}}
nodes:
  local: {prefill_tps: 8000, step_ms: 20}
workload:
  - {task: chat, rps: 40, projects: 10, prompt_tokens: {mean: 500, sd: 200, min: 10, max: 2000}, output_tokens: {mean: 50, sd: 20, min: 1, max: 200}}
  - {task: batch, rps: [[0, 0], [1m, 30], [2m, 5]], projects: 3, prompt_tokens: {mean: 900, sd: 0, min: 10, max: 2000}, output_tokens: {mean: 20, sd: 5, min: 1, max: 200}}
  - {task: chat, rps: 0, projects: 2, prompt_tokens: {mean: 100, sd: 10, min: 10, max: 200}, output_tokens: {mean: 10, sd: 1, min: 1, max: 20}}
"#;
        let s = crate::simulate::parse("t", text).unwrap();
        let lazy = generate(&s);
        assert!(lazy.len() > 4000, "{}", lazy.len());
        assert_eq!(lazy, up_front(&s));
        assert!(lazy.windows(2).all(|w| w[0].at_us <= w[1].at_us));
        assert!(lazy.iter().any(|a| a.task == 1) && lazy.iter().all(|a| a.project_id < 13));
        let mut it = Arrivals::new(&s);
        assert_eq!(it.peek_at(), Some(lazy[0].at_us));
        assert_eq!(it.next().as_ref(), lazy.first());
    }
}
