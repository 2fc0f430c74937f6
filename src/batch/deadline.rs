//! Will a job finish on the fleet before its window ends? From its remaining lines, the rate
//! its lines have finished at lately and the fleet's capacity for it now, the finish time is
//! estimated; a job at risk goes to a provider's batch API when the task allows one and there
//! is time for it (`batch.hosted_batch_lead_secs`), else to hosted realtime, the last resort.
//! Pure: the runner gathers the figures.

use serde::Serialize;

/// The span (seconds) over which a job's recent rate is measured.
pub const RATE_WINDOW_S: f64 = 30.0;

/// What the estimate reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Lines queued or running.
    pub remaining: u64,
    /// Lines per second finished over the recent window (0 before any).
    pub observed_rate: f64,
    /// Lines the fleet runs at once for it now: those in flight and the room to start more.
    pub concurrency: f64,
    /// Seconds one line holds a slot.
    pub line_s: f64,
    /// Seconds until its window ends.
    pub left_s: f64,
}

/// Where a job's remaining lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    Fleet,
    HostedBatch,
    HostedRealtime,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Fleet => "fleet",
            Route::HostedBatch => "hosted_batch",
            Route::HostedRealtime => "hosted_realtime",
        }
    }
}

/// The plan and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub route: Route,
    /// Seconds to finish on the fleet at the rate estimated (`None`: no rate at all).
    pub fleet_finish_s: Option<f64>,
    pub reason: String,
}

/// The share of the time left the fleet estimate may use before the job is at risk: a
/// margin for the estimate's error.
const SAFETY: f64 = 0.8;

/// The plan for a job with `p`; `hosted_batch` / `hosted_realtime`: whether the task has a
/// backend of that kind its policy allows; `lead_s`: the least time left a provider's batch
/// is given.
pub fn plan(p: &Progress, hosted_batch: bool, hosted_realtime: bool, lead_s: f64) -> Plan {
    let capacity = if p.line_s > 0.0 { p.concurrency / p.line_s } else { 0.0 };
    let rate = p.observed_rate.max(capacity);
    let finish = (rate > 0.0).then(|| p.remaining as f64 / rate);
    let fits = finish.is_some_and(|f| f <= SAFETY * p.left_s);
    let estimate = match finish {
        Some(f) => format!("{} lines at {rate:.2}/s finish in {f:.0} s on the fleet", p.remaining),
        None => format!("{} lines, and no fleet capacity for them now", p.remaining),
    };
    let (route, why) = match (fits, hosted_batch && p.left_s >= lead_s, hosted_realtime) {
        (true, _, _) => (Route::Fleet, format!("{estimate}, within the {:.0} s left", p.left_s)),
        (false, true, _) => (
            Route::HostedBatch,
            format!("{estimate}, past the {:.0} s left: to a hosted batch API", p.left_s),
        ),
        (false, false, true) => (
            Route::HostedRealtime,
            format!(
                "{estimate}, past the {:.0} s left, too late or no hosted batch API: hosted realtime",
                p.left_s
            ),
        ),
        (false, false, false) => (
            Route::Fleet,
            format!("{estimate}, past the {:.0} s left, and the task may run nowhere else", p.left_s),
        ),
    };
    Plan { route, fleet_finish_s: finish, reason: why }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(remaining: u64, observed_rate: f64, concurrency: f64, left_s: f64) -> Progress {
        Progress { remaining, observed_rate, concurrency, line_s: 2.0, left_s }
    }

    #[test]
    fn a_job_stays_on_the_fleet_while_it_fits_and_spills_when_it_does_not() {
        // 4 at once, 2 s a line: 2 lines/s; 100 lines take 50 s.
        assert_eq!(plan(&progress(100, 0.0, 4.0, 600.0), true, true, 60.0).route, Route::Fleet);
        let at_risk = plan(&progress(100, 0.0, 4.0, 55.0), true, true, 30.0);
        assert_eq!(at_risk.route, Route::HostedBatch, "50 s is more than 80 % of 55 s: {at_risk:?}");
        assert_eq!(at_risk.fleet_finish_s, Some(50.0));
        // Observed faster than the capacity estimate: the observation counts.
        assert_eq!(plan(&progress(100, 10.0, 4.0, 55.0), true, true, 30.0).route, Route::Fleet);
        // Too little time for a provider's batch: realtime, the last resort.
        assert_eq!(plan(&progress(100, 0.0, 4.0, 55.0), true, true, 120.0).route, Route::HostedRealtime);
        assert_eq!(plan(&progress(100, 0.0, 4.0, 55.0), false, true, 30.0).route, Route::HostedRealtime);
        // No fleet capacity and nowhere else to go: it stays, and says so.
        let stuck = plan(&progress(100, 0.0, 0.0, 55.0), false, false, 30.0);
        assert_eq!((stuck.route, stuck.fleet_finish_s), (Route::Fleet, None));
        assert!(stuck.reason.contains("nowhere else"), "{}", stuck.reason);
    }
}
