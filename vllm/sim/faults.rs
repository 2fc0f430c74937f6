//! Fault injection: what should go wrong with one request, decided before it starts.
//!
//! Faults come from the `--error-rate`/`--hang-rate`/`--drop-after`/… flags, drawn with an
//! RNG seeded by `--seed` so that a run is reproducible, and can be overridden per request by
//! the `x-sim-fault` header (comma-separated directives: `status=503`, `hang`,
//! `drop_after=N`, `token_delay_ms=N`, `ttft_ms=N`, `error_event` (after the first token) or
//! `error_event=N` (after N tokens, 0: before the first)). This module only decides; the wire
//! modules carry the decision out in each provider's format.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Mutex;
use std::time::Duration;

/// The header that carries per-request fault directives.
pub const FAULT_HEADER: &str = "x-sim-fault";

/// The faults for one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    /// Answer with this HTTP status in the provider's error format, before any token.
    pub status: Option<u16>,
    /// Accept the request and never send the first token.
    pub hang: bool,
    /// Close the connection abruptly after this many tokens.
    pub drop_after: Option<u32>,
    /// Extra delay before every token, in ms.
    pub token_delay_ms: u64,
    /// Time to first token override, in ms.
    pub ttft_ms: Option<u64>,
    /// Send an in-band error event after this many tokens (0: before the first).
    pub error_after: Option<u32>,
}

/// Flag-level fault settings plus the seeded RNG that draws the rates.
pub struct Faults {
    pub error_rate: f64,
    pub error_status: u16,
    pub hang_rate: f64,
    pub drop_after: Option<u32>,
    pub token_delay_ms: u64,
    /// The wait a failure with status 429 asks for.
    pub retry_after: Duration,
    /// `--error-event-after`: every stream's in-band error event after this many tokens.
    pub error_after: Option<u32>,
    rng: Mutex<StdRng>,
}

impl Faults {
    pub fn new(
        seed: u64,
        error_rate: f64,
        error_status: u16,
        hang_rate: f64,
        drop_after: Option<u32>,
        token_delay_ms: u64,
    ) -> Faults {
        Faults {
            error_rate,
            error_status,
            hang_rate,
            drop_after,
            token_delay_ms,
            retry_after: Duration::from_secs(1),
            error_after: None,
            rng: Mutex::new(StdRng::seed_from_u64(seed.wrapping_add(0x5eed_fa17))),
        }
    }

    /// Decide the faults for one request; `header` is the `x-sim-fault` value, if any.
    pub fn plan(&self, header: Option<&str>) -> Result<FaultPlan, String> {
        let (e, h) = {
            let mut rng = self.rng.lock().expect("fault rng");
            (rng.gen::<f64>(), rng.gen::<f64>())
        };
        let mut plan = FaultPlan {
            status: (e < self.error_rate).then_some(self.error_status),
            hang: h < self.hang_rate,
            drop_after: self.drop_after,
            token_delay_ms: self.token_delay_ms,
            ttft_ms: None,
            error_after: self.error_after,
        };
        if let Some(header) = header {
            apply_header(&mut plan, header)?;
        }
        Ok(plan)
    }
}

/// Apply `x-sim-fault` directives on top of `plan`.
pub fn apply_header(plan: &mut FaultPlan, header: &str) -> Result<(), String> {
    for d in header.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (key, value) = match d.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (d, None),
        };
        let num = |v: Option<&str>| -> Result<u64, String> {
            v.and_then(|v| v.parse().ok()).ok_or_else(|| format!("{FAULT_HEADER}: `{key}` needs a number"))
        };
        match key {
            "status" => {
                let s = num(value)?;
                if !(400..=599).contains(&s) {
                    return Err(format!("{FAULT_HEADER}: status {s} is not an error status"));
                }
                plan.status = Some(s as u16);
            }
            "hang" => plan.hang = true,
            "drop_after" => plan.drop_after = Some(num(value)? as u32),
            "token_delay_ms" => plan.token_delay_ms = num(value)?,
            "ttft_ms" => plan.ttft_ms = Some(num(value)?),
            // After the first token, unless a count says otherwise.
            "error_event" => plan.error_after = Some(value.map_or(Ok(1), |_| num(value))? as u32),
            "none" => *plan = FaultPlan::default(),
            other => return Err(format!("{FAULT_HEADER}: unknown directive `{other}`")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_overrides() {
        let f = Faults::new(1, 0.0, 503, 0.0, None, 0);
        let p = f.plan(Some("status=429, drop_after=3,token_delay_ms=5,ttft_ms=7,error_event,hang")).unwrap();
        assert_eq!(p.status, Some(429));
        assert_eq!(p.drop_after, Some(3));
        assert_eq!((p.token_delay_ms, p.ttft_ms), (5, Some(7)));
        assert!(p.error_after == Some(1) && p.hang);
        assert_eq!(f.plan(Some("error_event=0")).unwrap().error_after, Some(0), "before the first token");
        assert!(f.plan(Some("error_event=soon")).is_err());
        assert!(f.plan(Some("explode")).is_err());
        assert!(f.plan(Some("status=200")).is_err());
    }

    #[test]
    fn rates_are_seeded() {
        let draw = |seed| {
            let f = Faults::new(seed, 0.5, 503, 0.0, None, 0);
            (0..32).map(|_| f.plan(None).unwrap().status.is_some()).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        let hits = draw(3).iter().filter(|x| **x).count();
        assert!((4..=28).contains(&hits));
    }
}
