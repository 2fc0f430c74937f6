//! What is limited and by how much: a request's scopes (its key, its team), the five limits
//! each may have, and the one pure decision both the local counters and the Redis script make
//! (a request is admitted only if it fits under every limit of every scope). Typed, so a
//! refusal names its scope and limit as data and the client's `code` is read from a table.

use crate::config::KeyLimits;

use super::window::to_nanos;

/// Whose limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeKind {
    /// One client key (a static key's variable, or an issued key's id).
    Key,
    /// Every key of one team.
    Team,
}

impl ScopeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Key => "key",
            ScopeKind::Team => "team",
        }
    }
}

/// One key or one team.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub kind: ScopeKind,
    pub name: String,
}

/// The limits a scope may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    Rpm,
    Tpm,
    Concurrent,
    UsdPerDay,
    UsdPerMonth,
}

impl Limit {
    pub const ALL: [Limit; 5] =
        [Limit::UsdPerDay, Limit::UsdPerMonth, Limit::Concurrent, Limit::Rpm, Limit::Tpm];

    /// The config key naming it.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Rpm => "rpm",
            Limit::Tpm => "tpm",
            Limit::Concurrent => "concurrent",
            Limit::UsdPerDay => "usd_per_day",
            Limit::UsdPerMonth => "usd_per_month",
        }
    }

    /// A USD budget (402 when over it) rather than a rate limit (429).
    pub fn is_budget(self) -> bool {
        matches!(self, Limit::UsdPerDay | Limit::UsdPerMonth)
    }

    /// Its number in the Redis script's reply.
    pub fn code(self) -> i64 {
        match self {
            Limit::Rpm => 1,
            Limit::Tpm => 2,
            Limit::Concurrent => 3,
            Limit::UsdPerDay => 4,
            Limit::UsdPerMonth => 5,
        }
    }

    pub(crate) fn from_code(code: i64) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.code() == code)
    }
}

/// A scope's limits as counted: budgets in nano-dollars; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub concurrent: Option<u64>,
    pub day_nanos: Option<i64>,
    pub month_nanos: Option<i64>,
}

impl Caps {
    pub fn of(limits: &KeyLimits) -> Caps {
        Caps {
            rpm: limits.rpm,
            tpm: limits.tpm,
            concurrent: limits.concurrent,
            day_nanos: limits.usd_per_day.map(to_nanos),
            month_nanos: limits.usd_per_month.map(to_nanos),
        }
    }

    pub fn has(&self, limit: Limit) -> bool {
        match limit {
            Limit::Rpm => self.rpm.is_some(),
            Limit::Tpm => self.tpm.is_some(),
            Limit::Concurrent => self.concurrent.is_some(),
            Limit::UsdPerDay => self.day_nanos.is_some(),
            Limit::UsdPerMonth => self.month_nanos.is_some(),
        }
    }

    /// The script's arguments for this scope: each limit, -1 for none.
    pub fn args(&self) -> [i64; 5] {
        let n = |v: Option<u64>| v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
        [
            n(self.rpm),
            n(self.tpm),
            n(self.concurrent),
            self.day_nanos.unwrap_or(-1),
            self.month_nanos.unwrap_or(-1),
        ]
    }
}

/// What one request asks of each scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Prompt estimate plus `max_tokens`.
    pub tokens: u64,
    /// Its worst-case cost, in nano-dollars.
    pub reserve_nanos: i64,
}

/// A scope's counts at the moment of the decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Requests and tokens this minute.
    pub requests: u64,
    pub tokens: u64,
    /// Requests in flight (unexpired reservations).
    pub in_flight: u64,
    /// Settled spend this UTC day and month, and what in-flight requests have reserved.
    pub day_nanos: i64,
    pub month_nanos: i64,
    pub reserved_nanos: i64,
}

/// The first limit (budgets first, then concurrency, requests, tokens) the request would go
/// over; `None`: it fits under all of them. A budget holds settled spend plus every in-flight
/// reservation plus this request's worst case, so settled spend never passes the budget.
pub(crate) fn first_exceeded(caps: &Caps, counts: &Counts, demand: &Demand) -> Option<Limit> {
    let committed =
        |spent: i64| spent.saturating_add(counts.reserved_nanos).saturating_add(demand.reserve_nanos);
    let over = |limit: Limit| match limit {
        Limit::UsdPerDay => caps.day_nanos.is_some_and(|cap| committed(counts.day_nanos) > cap),
        Limit::UsdPerMonth => caps.month_nanos.is_some_and(|cap| committed(counts.month_nanos) > cap),
        Limit::Concurrent => caps.concurrent.is_some_and(|cap| counts.in_flight + 1 > cap),
        Limit::Rpm => caps.rpm.is_some_and(|cap| counts.requests + 1 > cap),
        Limit::Tpm => caps.tpm.is_some_and(|cap| counts.tokens.saturating_add(demand.tokens) > cap),
    };
    Limit::ALL.into_iter().find(|&l| over(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_count_settled_spend_reservations_and_the_worst_case() {
        // $1 a day; $0.70 settled, $0.20 reserved by requests in flight.
        let caps = Caps { day_nanos: Some(1_000_000_000), ..Caps::default() };
        let counts = Counts { day_nanos: 700_000_000, reserved_nanos: 200_000_000, ..Counts::default() };
        let ask = |reserve_nanos| first_exceeded(&caps, &counts, &Demand { tokens: 0, reserve_nanos });
        assert_eq!(ask(100_000_000), None, "exactly at the budget fits");
        assert_eq!(ask(100_000_001), Some(Limit::UsdPerDay));
        let month = Caps { month_nanos: Some(500_000_000), ..caps };
        let counts = Counts { month_nanos: 400_000_000, ..counts };
        assert_eq!(
            first_exceeded(&month, &counts, &Demand { tokens: 0, reserve_nanos: 1 }),
            Some(Limit::UsdPerMonth)
        );
    }

    #[test]
    fn rate_limits_count_this_minute_and_in_flight() {
        let caps = Caps { rpm: Some(3), tpm: Some(1_000), concurrent: Some(2), ..Caps::default() };
        let counts = Counts { requests: 2, tokens: 900, in_flight: 1, ..Counts::default() };
        let ask = |tokens| first_exceeded(&caps, &counts, &Demand { tokens, reserve_nanos: 0 });
        assert_eq!(ask(100), None);
        assert_eq!(ask(101), Some(Limit::Tpm));
        let busy = Counts { in_flight: 2, requests: 3, ..counts };
        assert_eq!(
            first_exceeded(&caps, &busy, &Demand { tokens: 0, reserve_nanos: 0 }),
            Some(Limit::Concurrent)
        );
        let full = Counts { requests: 3, ..counts };
        assert_eq!(first_exceeded(&caps, &full, &Demand { tokens: 0, reserve_nanos: 0 }), Some(Limit::Rpm));
        assert_eq!(
            first_exceeded(&Caps::default(), &busy, &Demand { tokens: u64::MAX, reserve_nanos: i64::MAX }),
            None
        );
    }

    #[test]
    fn codes_round_trip() {
        for l in Limit::ALL {
            assert_eq!(Limit::from_code(l.code()), Some(l));
        }
        assert_eq!(Limit::from_code(0), None);
    }
}
