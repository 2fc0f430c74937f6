//! The capacity arithmetic: a pure function from backends' capacities and tasks' loads to
//! what every backend must carry, what it can carry, and what is shed, for normal operation
//! and for each single backend lost. No I/O, no config parsing, no printing.
//!
//! Loads are given in reference tokens (`o200k_base`) and converted into each backend's own
//! tokens with its ratio, because quotas and capacities are counted in the backend's tokens.
//!
//! Two figures per backend and scenario:
//! - *required*: what it must carry to keep the policy's routing with unlimited room: its
//!   share of the normal split, plus, for each task whose backend is lost, the lost share if
//!   it is the first surviving backend in that task's preference order.
//! - *carried*: what it does carry when capacities bind. Priority classes fill in order,
//!   interactive first, so batch is shed first; within a class each task first takes its
//!   surviving split shares, then what did not fit (and lost shares) walks its preference
//!   order, filling what room is left. A task never moves to a backend it does not list.
//!
//! A class may fill a hosted quota only up to its quota ceiling and a pool only up to
//! `1 − its local reserve`, as the router does; the pools' reserve is released when a hosted
//! backend is the one lost (its traffic comes home into it).

use serde::Serialize;

use crate::config::Priority;

/// Requests or tokens below this are zero (float dust from shares).
const EPS: f64 = 1e-9;

/// What one backend can take, in its own units.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendCap {
    pub name: String,
    /// A self-hosted pool (reserve applies) rather than a hosted API.
    pub local: bool,
    /// This backend's tokens per reference (o200k) token.
    pub ratio: f64,
    /// Tokens per minute it can take, in its own tokens: a hosted quota's `tpm`, or a pool's
    /// measured throughput. `None`: unknown or unlimited.
    pub tpm: Option<f64>,
    /// Requests per minute (hosted quota `rpm`). `None`: no limit.
    pub rpm: Option<f64>,
    /// Pools: share kept free in normal operation.
    pub reserve: f64,
}

/// One task's load.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskLoad {
    pub name: String,
    pub priority: Priority,
    pub requests_per_minute: f64,
    /// Reference (o200k) tokens per request, input plus output.
    pub tokens_per_request: f64,
    /// The backends it may use, in preference order.
    pub backends: Vec<String>,
    /// Shares in normal operation, by backend (adding up to 1).
    pub split: Vec<(String, f64)>,
}

/// One backend in one scenario. Tokens are this backend's own tokens per minute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendLoad {
    pub backend: String,
    pub required_requests: f64,
    pub required_tokens: f64,
    pub carried_requests: f64,
    pub carried_tokens: f64,
    /// The limit that applies in this scenario: the quota, or a pool's throughput less its
    /// reserve (the whole throughput once the reserve is released). `None`: unknown/unlimited.
    pub limit_tokens: Option<f64>,
    pub limit_requests: Option<f64>,
    /// required / limit, the larger of tokens and requests (2.72 means 2.72× the limit).
    pub load: Option<f64>,
    /// carried / limit, the larger of tokens and requests.
    pub utilisation: Option<f64>,
    /// What it must carry beyond its limit (own tokens per minute; requests per minute).
    pub short_tokens: f64,
    pub short_requests: f64,
}

/// One task in one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskOutcome {
    pub task: String,
    #[serde(serialize_with = "priority_name")]
    pub priority: Priority,
    pub requests: f64,
    /// Requests per minute served, by backend, in preference order.
    pub served: Vec<(String, f64)>,
    pub shed_requests: f64,
    /// Reference tokens per minute shed.
    pub shed_tokens: f64,
}

/// What one priority class loses in one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShedClass {
    #[serde(serialize_with = "priority_name")]
    pub priority: Priority,
    pub requests: f64,
    pub shed_requests: f64,
    /// Reference tokens per minute.
    pub shed_tokens: f64,
    /// shed / offered for this class.
    pub shed_share: f64,
}

/// Normal operation, or one backend lost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioResult {
    pub name: String,
    pub lost: Option<String>,
    pub reserve_released: bool,
    pub backends: Vec<BackendLoad>,
    pub tasks: Vec<TaskOutcome>,
    /// Only the classes that shed something, in the order they are shed (batch first).
    pub shed: Vec<ShedClass>,
}

/// Normal operation, then each backend lost in turn (in the order given).
pub fn plan(backends: &[BackendCap], tasks: &[TaskLoad]) -> Vec<ScenarioResult> {
    let mut out = vec![scenario(backends, tasks, None)];
    for b in backends {
        out.push(scenario(backends, tasks, Some(&b.name)));
    }
    out
}

/// One scenario: `lost` is the backend that is gone, if any.
pub fn scenario(backends: &[BackendCap], tasks: &[TaskLoad], lost: Option<&str>) -> ScenarioResult {
    let index = |name: &str| backends.iter().position(|b| b.name == name);
    let alive = |name: &str| Some(name) != lost && index(name).is_some();
    let reserve_released = lost.and_then(|l| backends.iter().find(|b| b.name == l)).is_some_and(|b| !b.local);

    // Required: the routing policy with unlimited room.
    let mut req_requests = vec![0.0; backends.len()];
    let mut req_tokens = vec![0.0; backends.len()];
    for t in tasks {
        let fallback = t.backends.iter().find(|b| alive(b)).and_then(|b| index(b));
        for (b, share) in &t.split {
            let target = if alive(b) { index(b) } else { fallback };
            if let Some(i) = target {
                let requests = t.requests_per_minute * share;
                req_requests[i] += requests;
                req_tokens[i] += requests * t.tokens_per_request * backends[i].ratio;
            }
        }
    }

    // Carried: fill by priority class with capacities.
    let mut used_requests = vec![0.0; backends.len()];
    let mut used_tokens = vec![0.0; backends.len()];
    let mut served: Vec<Vec<(String, f64)>> = tasks.iter().map(|_| Vec::new()).collect();
    let mut shed = vec![0.0; tasks.len()];
    for priority in Priority::ALL {
        let in_class: Vec<usize> = (0..tasks.len()).filter(|&i| tasks[i].priority == priority).collect();
        let mut overflow = vec![0.0; tasks.len()];
        for &ti in &in_class {
            let t = &tasks[ti];
            for (b, share) in &t.split {
                let want = t.requests_per_minute * share;
                match index(b).filter(|_| alive(b)) {
                    Some(bi) => {
                        let room = room(
                            &backends[bi],
                            priority,
                            reserve_released,
                            used_requests[bi],
                            used_tokens[bi],
                        );
                        let took = take(want, t, &backends[bi], room);
                        record(&mut served[ti], b, took);
                        used_requests[bi] += took;
                        used_tokens[bi] += took * t.tokens_per_request * backends[bi].ratio;
                        overflow[ti] += want - took;
                    }
                    None => overflow[ti] += want,
                }
            }
        }
        for &ti in &in_class {
            let t = &tasks[ti];
            let mut left = overflow[ti];
            for b in &t.backends {
                if left <= EPS {
                    break;
                }
                let Some(bi) = index(b).filter(|_| alive(b)) else { continue };
                let room =
                    room(&backends[bi], priority, reserve_released, used_requests[bi], used_tokens[bi]);
                let took = take(left, t, &backends[bi], room);
                record(&mut served[ti], b, took);
                used_requests[bi] += took;
                used_tokens[bi] += took * t.tokens_per_request * backends[bi].ratio;
                left -= took;
            }
            shed[ti] = if left > EPS { left } else { 0.0 };
        }
    }

    let loads = backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let (limit_tokens, limit_requests) = limits(b, reserve_released);
            let ratio = |v: f64, l: Option<f64>| l.map(|l| if l > 0.0 { v / l } else { f64::INFINITY });
            let worst = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
            BackendLoad {
                backend: b.name.clone(),
                required_requests: req_requests[i],
                required_tokens: req_tokens[i],
                carried_requests: used_requests[i],
                carried_tokens: used_tokens[i],
                limit_tokens,
                limit_requests,
                load: worst(ratio(req_tokens[i], limit_tokens), ratio(req_requests[i], limit_requests)),
                utilisation: worst(
                    ratio(used_tokens[i], limit_tokens),
                    ratio(used_requests[i], limit_requests),
                ),
                short_tokens: limit_tokens.map_or(0.0, |l| (req_tokens[i] - l).max(0.0)),
                short_requests: limit_requests.map_or(0.0, |l| (req_requests[i] - l).max(0.0)),
            }
        })
        .filter(|l| Some(l.backend.as_str()) != lost)
        .collect();

    let outcomes: Vec<TaskOutcome> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| TaskOutcome {
            task: t.name.clone(),
            priority: t.priority,
            requests: t.requests_per_minute,
            served: {
                let mut s = std::mem::take(&mut served[i]);
                s.sort_by_key(|(b, _)| t.backends.iter().position(|x| x == b));
                s
            },
            shed_requests: shed[i],
            shed_tokens: shed[i] * t.tokens_per_request,
        })
        .collect();
    let shed_classes = Priority::ALL
        .into_iter()
        .rev()
        .filter_map(|p| {
            let of_class = outcomes.iter().filter(|o| o.priority == p);
            let requests: f64 = of_class.clone().map(|o| o.requests).sum();
            let shed_requests: f64 = of_class.clone().map(|o| o.shed_requests).sum();
            let shed_tokens: f64 = of_class.map(|o| o.shed_tokens).sum();
            (shed_requests > EPS).then(|| ShedClass {
                priority: p,
                requests,
                shed_requests,
                shed_tokens,
                shed_share: if requests > 0.0 { shed_requests / requests } else { 0.0 },
            })
        })
        .collect();

    ScenarioResult {
        name: lost.map_or_else(|| "normal operation".to_string(), |l| format!("{l} lost")),
        lost: lost.map(str::to_string),
        reserve_released,
        backends: loads,
        tasks: outcomes,
        shed: shed_classes,
    }
}

/// A backend's limits in a scenario (tokens, requests), before class ceilings.
pub fn limits(b: &BackendCap, reserve_released: bool) -> (Option<f64>, Option<f64>) {
    if b.local {
        let reserve = if reserve_released { 0.0 } else { b.reserve };
        (b.tpm.map(|t| t * (1.0 - reserve)), b.rpm)
    } else {
        (b.tpm, b.rpm)
    }
}

/// Room left for a class on a backend: (requests, own tokens); infinite where unlimited.
fn room(
    b: &BackendCap,
    priority: Priority,
    reserve_released: bool,
    used_requests: f64,
    used_tokens: f64,
) -> (f64, f64) {
    let (share_tokens, share_requests) = if b.local {
        let reserve = if reserve_released { 0.0 } else { b.reserve };
        let usable = 1.0 - priority.local_reserve(reserve);
        (usable, usable)
    } else {
        let c = priority.quota_ceiling();
        (c, c)
    };
    let tokens = b.tpm.map_or(f64::INFINITY, |t| (t * share_tokens - used_tokens).max(0.0));
    let requests = b.rpm.map_or(f64::INFINITY, |r| (r * share_requests - used_requests).max(0.0));
    (requests, tokens)
}

/// Requests per minute of `want` that fit in `room`.
fn take(want: f64, t: &TaskLoad, b: &BackendCap, (room_requests, room_tokens): (f64, f64)) -> f64 {
    let per_request = t.tokens_per_request * b.ratio;
    let by_tokens = if per_request > 0.0 { room_tokens / per_request } else { f64::INFINITY };
    let took = want.min(room_requests).min(by_tokens).max(0.0);
    if took <= EPS {
        0.0
    } else {
        took
    }
}

fn record(served: &mut Vec<(String, f64)>, backend: &str, requests: f64) {
    if requests <= 0.0 {
        return;
    }
    match served.iter_mut().find(|(b, _)| b == backend) {
        Some((_, r)) => *r += requests,
        None => served.push((backend.to_string(), requests)),
    }
}

fn priority_name<S: serde::Serializer>(p: &Priority, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}
