//! This replica's own counters: used when no Redis is configured (one replica), and as the
//! fallback while a configured Redis is down (then each replica counts alone, so N replicas
//! may together let up to N times a limit through). The same decision as the Redis script
//! (`limits::first_exceeded`), the same windows, reservations that expire after their TTL.
//! Pure: every call is given the time.

use std::collections::HashMap;

use super::limits::{first_exceeded, Caps, Counts, Demand, Limit, Scope};
use super::window::Windows;

/// One in-flight request's hold on a scope.
#[derive(Debug, Clone, Copy)]
struct Held {
    nanos: i64,
    expires_ms: u64,
}

#[derive(Debug, Default)]
struct ScopeState {
    minute: u64,
    requests: u64,
    tokens: u64,
    day: u64,
    day_nanos: i64,
    month: u64,
    month_nanos: i64,
    held: HashMap<u64, Held>,
}

impl ScopeState {
    fn roll(&mut self, w: Windows, now_ms: u64) {
        if w.minute != self.minute {
            (self.minute, self.requests, self.tokens) = (w.minute, 0, 0);
        }
        if w.day != self.day {
            (self.day, self.day_nanos) = (w.day, 0);
        }
        if w.month != self.month {
            (self.month, self.month_nanos) = (w.month, 0);
        }
        self.held.retain(|_, h| h.expires_ms > now_ms);
    }

    fn counts(&self) -> Counts {
        Counts {
            requests: self.requests,
            tokens: self.tokens,
            in_flight: self.held.len() as u64,
            day_nanos: self.day_nanos,
            month_nanos: self.month_nanos,
            reserved_nanos: self.held.values().map(|h| h.nanos).sum(),
        }
    }
}

/// Counters per scope.
#[derive(Debug, Default)]
pub(crate) struct LocalCounters {
    scopes: HashMap<Scope, ScopeState>,
}

impl LocalCounters {
    /// Admit reservation `id` into every scope if it fits under all of their caps (then count
    /// it in each), else name the first scope (its index) and limit it would go over.
    pub fn admit(
        &mut self,
        now_ms: u64,
        scopes: &[(Scope, Caps)],
        demand: &Demand,
        id: u64,
        ttl_ms: u64,
    ) -> Result<(), (usize, Limit)> {
        let w = Windows::at(now_ms);
        for (i, (scope, caps)) in scopes.iter().enumerate() {
            let state = self.scopes.entry(scope.clone()).or_default();
            state.roll(w, now_ms);
            if let Some(limit) = first_exceeded(caps, &state.counts(), demand) {
                return Err((i, limit));
            }
        }
        for (scope, _) in scopes {
            let state = self.scopes.entry(scope.clone()).or_default();
            state.requests += 1;
            state.tokens = state.tokens.saturating_add(demand.tokens);
            state.held.insert(id, Held { nanos: demand.reserve_nanos, expires_ms: now_ms + ttl_ms });
        }
        Ok(())
    }

    /// End reservation `id`: release its hold, add `actual_nanos` to the day and month it ends
    /// in, and move this minute's tokens by `token_delta` (never below zero).
    pub fn settle(&mut self, now_ms: u64, scopes: &[Scope], id: u64, actual_nanos: i64, token_delta: i64) {
        let w = Windows::at(now_ms);
        for scope in scopes {
            let state = self.scopes.entry(scope.clone()).or_default();
            state.roll(w, now_ms);
            state.held.remove(&id);
            state.day_nanos = state.day_nanos.saturating_add(actual_nanos);
            state.month_nanos = state.month_nanos.saturating_add(actual_nanos);
            state.tokens = state.tokens.saturating_add_signed(token_delta);
        }
    }

    /// Settled spend this day and month, in nano-dollars.
    pub fn spent(&self, now_ms: u64, scope: &Scope) -> (i64, i64) {
        let w = Windows::at(now_ms);
        self.scopes.get(scope).map_or((0, 0), |s| {
            (if s.day == w.day { s.day_nanos } else { 0 }, if s.month == w.month { s.month_nanos } else { 0 })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::limits::ScopeKind;
    use super::*;

    const T0: u64 = 1_738_367_970_000; // 2025-01-31T23:59:30Z

    fn key() -> Scope {
        Scope { kind: ScopeKind::Key, name: "TEAM_A".into() }
    }

    fn team() -> Scope {
        Scope { kind: ScopeKind::Team, name: "pay".into() }
    }

    #[test]
    fn reservations_hold_until_settled_or_expired_and_windows_roll() {
        let caps = Caps { day_nanos: Some(2_000), concurrent: Some(2), ..Caps::default() };
        let scopes = [(key(), caps)];
        let mut c = LocalCounters::default();
        let demand = Demand { tokens: 10, reserve_nanos: 400 };
        assert_eq!(c.admit(T0, &scopes, &demand, 1, 10_000), Ok(()));
        assert_eq!(c.admit(T0, &scopes, &demand, 2, 10_000), Ok(()));
        assert_eq!(c.admit(T0, &scopes, &demand, 3, 10_000), Err((0, Limit::Concurrent)), "two in flight");
        // Request 1 cost 150 of its 400: one in flight again.
        c.settle(T0 + 1, &[key()], 1, 150, -5);
        assert_eq!(c.admit(T0 + 1, &scopes, &demand, 3, 10_000), Ok(()));
        // 150 settled + 800 held + 1,500 asked > 2,000 (and two in flight): the budget is named first.
        let big = Demand { tokens: 10, reserve_nanos: 1_500 };
        assert_eq!(c.admit(T0 + 2, &scopes, &big, 4, 10_000), Err((0, Limit::UsdPerDay)));
        // Unsettled holds expire (a crashed replica's requests): 150 + 1,500 fits.
        assert_eq!(c.admit(T0 + 10_002, &scopes, &big, 4, 10_000), Ok(()));
        assert_eq!(c.spent(T0 + 10_002, &key()), (150, 150));
        // 30.002 s later it is February: the day and month start again.
        c.settle(T0 + 30_002, &[key()], 4, 100, 0);
        assert_eq!(c.spent(T0 + 30_002, &key()), (100, 100));
    }

    #[test]
    fn a_request_is_counted_in_every_scope_or_none() {
        let mut c = LocalCounters::default();
        let scopes = [
            (key(), Caps { rpm: Some(5), ..Caps::default() }),
            (team(), Caps { rpm: Some(1), ..Caps::default() }),
        ];
        let demand = Demand { tokens: 0, reserve_nanos: 0 };
        assert_eq!(c.admit(T0, &scopes, &demand, 1, 1_000), Ok(()));
        assert_eq!(c.admit(T0, &scopes, &demand, 2, 1_000), Err((1, Limit::Rpm)));
        // The key alone was not charged for the refused request: 4 more fit under its 5.
        let alone = [(key(), Caps { rpm: Some(5), ..Caps::default() })];
        let admitted = (3..10).filter(|&id| c.admit(T0, &alone, &demand, id, 1_000).is_ok()).count();
        assert_eq!(admitted, 4);
    }
}
