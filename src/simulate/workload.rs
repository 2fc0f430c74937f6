//! The workload: every request of a run, drawn up front from the scenario's streams so that
//! every strategy sees exactly the same arrivals (same seed, same requests, same projects).
//!
//! Arrivals are a Poisson process whose rate follows a piecewise-linear profile (drawn by
//! thinning), prompt and output sizes are log-normal with the configured mean and spread, and
//! projects (affinity keys) are drawn with Zipf-like popularity. It must not look at any
//! strategy or model state: the workload is open-loop, as real clients are.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::scenario::{Dist, Rate, Scenario};
use crate::config::Priority;

/// One client request.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// Microseconds since the start of the run.
    pub at_us: u64,
    /// Index into `config.tasks`.
    pub task: usize,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// The project's name (`<task>/p<rank>`): the affinity key.
    pub project: String,
    /// Index of the project across all streams (for per-project bookkeeping).
    pub project_id: usize,
    /// Tokens of the prompt that are the project's stable prefix.
    pub prefix_tokens: u32,
    pub priority: Priority,
    /// The request is malformed: the first backend refuses it with a 400.
    pub client_error: bool,
}

/// Rate (requests per second) at `t` seconds.
pub fn rate_at(rate: &Rate, t: f64) -> f64 {
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
pub fn draw(dist: &Dist, rng: &mut StdRng) -> u32 {
    let v = if dist.sd <= 0.0 {
        dist.mean
    } else {
        let s2 = (1.0 + (dist.sd / dist.mean).powi(2)).ln();
        let mu = dist.mean.ln() - s2 / 2.0;
        (mu + s2.sqrt() * normal(rng)).exp()
    };
    v.clamp(dist.min, dist.max).round() as u32
}

/// Every request of the scenario, in arrival order.
pub fn generate(s: &Scenario) -> Vec<Arrival> {
    let end = s.duration.as_secs_f64();
    let mut all = Vec::new();
    let mut project_base = 0usize;
    for (i, stream) in s.workload.iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(s.seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)));
        let task = s.config.tasks.iter().position(|t| t.name == stream.task).expect("validated");
        let priority = stream.priority.unwrap_or(s.config.tasks[task].priority);
        // Cumulative Zipf weights: project k (0-based) has weight 1 / (k + 1)^zipf.
        let mut cumulative = Vec::with_capacity(stream.projects as usize);
        let mut total = 0.0;
        for k in 0..stream.projects {
            total += 1.0 / f64::from(k + 1).powf(stream.zipf);
            cumulative.push(total);
        }
        let peak = max_rate(&stream.rps);
        let mut t = 0.0;
        if peak <= 0.0 {
            project_base += stream.projects as usize;
            continue;
        }
        loop {
            t += -(1.0 - rng.gen::<f64>()).ln() / peak;
            if t >= end {
                break;
            }
            if rng.gen::<f64>() * peak > rate_at(&stream.rps, t) {
                continue;
            }
            let u = rng.gen::<f64>() * total;
            let k = cumulative.partition_point(|c| *c < u).min(cumulative.len() - 1);
            let prompt = draw(&stream.prompt_tokens, &mut rng);
            let output = draw(&stream.output_tokens, &mut rng);
            all.push(Arrival {
                at_us: (t * 1e6) as u64,
                task,
                prompt_tokens: prompt,
                output_tokens: output,
                project: format!("{}/p{k}", stream.task),
                project_id: project_base + k,
                prefix_tokens: (f64::from(prompt) * stream.prefix_share).round() as u32,
                priority,
                client_error: rng.gen::<f64>() < stream.client_error_rate,
            });
        }
        project_base += stream.projects as usize;
    }
    all.sort_by_key(|a| a.at_us);
    all
}
