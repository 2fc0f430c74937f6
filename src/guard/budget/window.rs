//! The pure arithmetic behind every key limit and budget: which minute, UTC day and UTC month
//! an instant falls in (every replica computes the same window keys from its own clock), how
//! long a client waits for the next minute (`Retry-After`), and dollars as whole nano-dollars
//! (what Redis counts exactly). No clock reads, no I/O.

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use crate::guard::quota::{until_next_window, WINDOW_MS};

/// Milliseconds in a UTC day.
pub(crate) const DAY_MS: u64 = 86_400_000;
/// Nano-dollars in a dollar: the unit budgets are counted in.
pub(crate) const NANOS_PER_USD: i64 = 1_000_000_000;

/// The windows an instant falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Windows {
    /// Minutes since the Unix epoch.
    pub minute: u64,
    /// UTC days since the Unix epoch.
    pub day: u64,
    /// UTC calendar months as `year * 12 + month - 1`.
    pub month: u64,
}

impl Windows {
    pub fn at(unix_ms: u64) -> Windows {
        let day = unix_ms / DAY_MS;
        let (year, month) = civil_month(day as i64);
        Windows { minute: unix_ms / WINDOW_MS, day, month: (year * 12 + month - 1) as u64 }
    }
}

/// (year, month 1-12) of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month)
}

/// Whole seconds until the next minute window starts, rounded up: in [1, 60].
pub fn retry_after_secs(unix_ms: u64) -> u64 {
    let wait = until_next_window(unix_ms);
    (wait.as_millis() as u64).div_ceil(1_000).max(1)
}

/// Dollars as whole nano-dollars, rounded up (a reservation or a charge is never short by a
/// fraction); negative amounts count as zero, huge ones saturate.
pub(crate) fn to_nanos(usd: Decimal) -> i64 {
    if usd.is_sign_negative() {
        return 0;
    }
    (usd * Decimal::from(NANOS_PER_USD)).ceil().to_i64().unwrap_or(i64::MAX)
}

/// Nano-dollars back to dollars, exactly.
pub(crate) fn from_nanos(nanos: i64) -> Decimal {
    Decimal::new(nanos, 9).normalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn instants_fall_in_their_minute_day_and_month() {
        // 2025-01-31T23:59:30Z and thirty seconds later, 2025-02-01T00:00:00Z.
        let before = 1_738_367_970_000;
        assert_eq!(Windows::at(before), Windows { minute: 28_972_799, day: 20_119, month: 2025 * 12 });
        assert_eq!(
            Windows::at(before + 30_000),
            Windows { minute: 28_972_800, day: 20_120, month: 2025 * 12 + 1 }
        );
        // Leap day 2024-02-29T12:00:00Z and 2024-03-01T00:00:00Z; the epoch.
        assert_eq!(Windows::at(1_709_208_000_000).month, 2024 * 12 + 1);
        assert_eq!(Windows::at(1_709_251_200_000).month, 2024 * 12 + 2);
        assert_eq!(Windows::at(0), Windows { minute: 0, day: 0, month: 1970 * 12 });
        // 2000-12-31T23:59:59.999Z is still December.
        assert_eq!(Windows::at(978_307_199_999).month, 2000 * 12 + 11);
    }

    #[test]
    fn retry_after_runs_to_the_next_minute_in_whole_seconds() {
        let minute_start = 28_972_800 * 60_000;
        assert_eq!(retry_after_secs(minute_start), 60);
        assert_eq!(retry_after_secs(minute_start + 15_000), 45);
        assert_eq!(retry_after_secs(minute_start + 15_001), 45, "44.999 s rounds up");
        assert_eq!(retry_after_secs(minute_start + 59_999), 1);
    }

    #[test]
    fn dollars_are_counted_in_whole_nanos_rounded_up() {
        assert_eq!(to_nanos(d("50")), 50_000_000_000);
        assert_eq!(to_nanos(d("0.00000075")), 750);
        assert_eq!(to_nanos(d("0.0000000375")), 38, "37.5 nano-dollars round up");
        assert_eq!(to_nanos(d("-1")), 0);
        assert_eq!(from_nanos(750), d("0.00000075"));
        assert_eq!(from_nanos(50_000_000_000).to_string(), "50");
    }
}
